"""Figure 4: another process's `wait` wakes after a `send` (500 trials).

Two `agentpost mcp` processes on one database, A (`bench-waiter`) and B (`bench-sender`), both
driven by this one client process, so every timestamp is on one `time.monotonic()` clock. Each
trial: A calls `wait`; after 20 ms (time for A to reach its blocking point in the server) B calls
`send` to A. Measured: from the moment B's `send` returned to this process until A's `wait`
returned (the figure), and, for context, from the moment B's `send` was issued. A's wake can
beat B's own answer home, so the first can be negative.
"""

from __future__ import annotations

import time

import anyio
from mcp.client.client import Client

from bench.common import (
    MODERN,
    RAISED_LIMITS,
    Report,
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

NAME = "wake"
TRIALS = 500
WARMUP = 10
SETTLE_S = 0.02
P50_TARGET_S = 0.020
P99_TARGET_S = 0.060


async def _wait(waiter: Client, body: str, woke: dict[str, float]) -> None:
    """A's `wait`; stamps `woke["t"]` the moment its answer is here, then checks it."""
    result = await waiter.call_tool("wait", {"timeout_s": 10})
    woke["t"] = time.monotonic()
    got = structured(result)
    expect(not got["timed_out"], "wait timed out")
    bodies = [m["body"] for m in got["messages"]]
    expect(bodies == [body], f"woke with {bodies}")


async def run() -> Report:
    report = Report(NAME, config=dict(RAISED_LIMITS))
    from_return: list[float] = []
    from_call: list[float] = []
    with scratch_home(NAME) as home, server_log(home, "servers") as errlog:
        waiter_params = agentpost_server(home, "bench-waiter")
        sender_params = agentpost_server(home, "bench-sender")
        async with (
            connect(waiter_params, MODERN, errlog=errlog) as waiter,
            connect(sender_params, MODERN, errlog=errlog) as sender,
        ):
            structured(await waiter.call_tool("whoami", {}))
            log(NAME, f"{TRIALS} trials ({MODERN})")
            for trial in range(WARMUP + TRIALS):
                woke: dict[str, float] = {}
                body = f"wake up {trial}"
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_wait, waiter, body, woke)
                    await anyio.sleep(SETTLE_S)
                    t_call = time.monotonic()
                    structured(await sender.call_tool("send", {"to": "bench-waiter", "body": body}))
                    t_return = time.monotonic()
                if trial >= WARMUP:
                    from_return.append(woke["t"] - t_return)
                    from_call.append(woke["t"] - t_call)

    p50, p99 = pct(from_return, 50), pct(from_return, 99)
    report.add(
        f"wake: send returned -> other process's wait returned, p50 ({TRIALS} trials)",
        f"≤ {ms(P50_TARGET_S)}",
        ms(p50),
        p50 <= P50_TARGET_S,
    )
    report.add(
        f"wake: send returned -> other process's wait returned, p99 ({TRIALS} trials)",
        f"≤ {ms(P99_TARGET_S)}",
        f"{ms(p99)} (max {ms(max(from_return))})",
        p99 <= P99_TARGET_S,
    )
    report.add(
        "wake: send issued -> other process's wait returned, p50 / p99",
        "(reported)",
        f"{ms(pct(from_call, 50))} / {ms(pct(from_call, 99))}",
    )
    negative = sum(1 for v in from_return if v < 0)
    report.notes.append(
        f"protocol {MODERN}; {negative} of {TRIALS} waits returned before the send's own answer"
    )
    report.data = {"from_return_s": from_return, "from_call_s": from_call}
    return report
