"""Issue 4: a Claude Code channel notification leaves ≤ 100 ms after a send in another process.

Two `agentpost mcp` processes on one database: the reader (`bench-reader`), spoken to over its
pipes as Claude Code does (raw JSON-RPC lines, 2025-11-25 initialize: the SDK's client drops
`notifications/claude/channel`), and the sender (`bench-sender`), driven by the SDK's client.
Each trial: stamp the clock, the sender calls `send` to the reader, and the clock is read again
the moment the reader's stdout yields the channel notification carrying that message. Both ends
are in this process, on one `time.monotonic()` clock; the reader makes no call in between.
"""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream

from bench.common import (
    LEGACY,
    MODERN,
    RAISED_LIMITS,
    Report,
    agentpost_command,
    agentpost_env,
    agentpost_server,
    connect,
    expect,
    log,
    ms,
    pct,
    scratch_home,
    server_log,
    structured,
)

NAME = "channel"
TRIALS = 200
WARMUP = 10
P99_TARGET_S = 0.100
CHANNEL = "notifications/claude/channel"


async def _channel_notice_of(lines: BufferedByteReceiveStream, message_id: str) -> dict[str, Any]:
    """The channel notification of `message_id`; others (a leader change on the project's
    channel, say) are skipped."""
    while True:
        message = json.loads(await lines.receive_until(b"\n", 16 * 1024 * 1024))
        if (
            message.get("method") == CHANNEL
            and message["params"]["meta"]["message_id"] == message_id
        ):
            params: dict[str, Any] = message["params"]
            return params


async def run() -> Report:
    report = Report(NAME, config=dict(RAISED_LIMITS))
    delays: list[float] = []
    with scratch_home(NAME) as home, server_log(home, "servers") as errlog:
        command, args = agentpost_command()
        reader_env = agentpost_env(home, AGENTPOST_AGENT="bench-reader")
        async with await anyio.open_process(
            [command, *args], env=reader_env, stderr=errlog
        ) as reader:
            assert reader.stdin is not None
            assert reader.stdout is not None
            lines = BufferedByteReceiveStream(reader.stdout)
            hello = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": LEGACY,
                    "capabilities": {},
                    "clientInfo": {"name": "bench-channel", "version": "0"},
                },
            }
            await reader.stdin.send(json.dumps(hello).encode() + b"\n")
            answer = json.loads(await lines.receive_until(b"\n", 1 << 20))
            expect(
                answer["result"]["capabilities"].get("experimental") == {"claude/channel": {}},
                "the reader did not declare claude/channel",
            )
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            await reader.stdin.send(json.dumps(note).encode() + b"\n")
            async with connect(
                agentpost_server(home, "bench-sender"), MODERN, errlog=errlog
            ) as sender:
                log(NAME, f"{TRIALS} trials")
                for trial in range(WARMUP + TRIALS):
                    body = f"channel trial {trial}"
                    t_send = time.monotonic()
                    sent = structured(
                        await sender.call_tool("send", {"to": "bench-reader", "body": body})
                    )
                    with anyio.fail_after(10):
                        got = await _channel_notice_of(lines, sent["id"])
                    t_got = time.monotonic()
                    expect(body in got["content"], f"trial {trial}: content lacks the body")
                    if trial >= WARMUP:
                        delays.append(t_got - t_send)
            await reader.stdin.aclose()

    p50, p99 = pct(delays, 50), pct(delays, 99)
    report.add(
        f"channel: send issued -> notification read, p99 ({TRIALS} sends)",
        f"≤ {ms(P99_TARGET_S)}",
        f"{ms(p99)} (p50 {ms(p50)}, max {ms(max(delays))})",
        p99 <= P99_TARGET_S,
    )
    report.notes.append(
        "reader: raw 2025-11-25 client on `agentpost mcp`; sender: another `agentpost mcp` "
        f"driven by the SDK client ({MODERN}); measured from before the send call"
    )
    report.data = {"delays_s": delays}
    return report
