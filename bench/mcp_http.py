"""Service figure: MCP over Streamable HTTP against `agentpost serve` (issue 3).

The client is the SDK's own `mcp.Client` over `streamable_http_client`, with an
`httpx2.AsyncClient` carrying the agent's bearer key, as an MCP host connects. Measured:

- one client calling `send` in sequence, next to the SDK's own echo tool served the same way
  (bench/echo_server.py --http: an `MCPServer` with one async tool, one uvicorn worker on another
  loopback port, started in the same run), in both protocol revisions: calls/s, and the ratio
  send/echo, target ≥ 0.80. Rounds of sends and of echoes take turns, so a guest's load that
  comes and goes falls on both alike (measured one after the other, the ratio of the same
  code moved by ±0.15 between runs). Also the CPU each call costs the server (all its threads, from
  /proc) and this client, which the machine's other load does not skew;
- 16 clients at once, each its own agent and key, each calling `send` in sequence to the next
  agent of a ring: total calls/s, target ≥ 400; and 16 clients of the echo server the same way,
  for reference (all clients run in this process, on the same cores as the server).

Sends rotate over RECIPIENTS inboxes so that none holds more than ~1,000 open messages (the
default cap): with the cap raised (RAISED_LIMITS), the inbox-full check counts a recipient's
whole open backlog, which a real inbox never reaches.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx2
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from bench.common import (
    BENCH_DIR,
    LEGACY,
    MODERN,
    RAISED_LIMITS,
    REPO,
    REVISIONS,
    Report,
    expect,
    log,
    log_file,
    median,
    ms,
    process_cpu_s,
    scratch_home,
    self_cpu_s,
    structured,
)
from bench.serve import running, stop, wait_for_port

NAME = "mcp_http"
RATIO_TARGET = 0.80
CONCURRENT_TARGET = 400
SENDS = 1500
ECHOES = 3000
ROUNDS = 5
WARMUP = 50
CLIENTS = 16
CALLS_EACH = 150
CONCURRENT_ROUNDS = 2
RECIPIENTS = 8
BODY = "Please review the migration in PR 42 before the release; the index on deliveries moved."

Args = Callable[[int], dict[str, Any]]


@dataclass
class Run:
    """Sequential calls: wall time of each, and CPU per call of the server and of this client."""

    times: list[float]
    server_cpu_s: float
    client_cpu_s: float

    @property
    def per_s(self) -> float:
        return len(self.times) / sum(self.times)

    def cpu(self) -> str:
        return f"server {ms(self.server_cpu_s)} + client {ms(self.client_cpu_s)} CPU"


@contextlib.asynccontextmanager
async def mcp_client(url: str, key: str | None, revision: str) -> AsyncIterator[Client]:
    """The SDK's client over Streamable HTTP at `url`, speaking `revision` with `key`."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(
            streamable_http_client(url, http_client=http),
            mode="legacy" if revision == LEGACY else "auto",
            read_timeout_seconds=60,
        ) as client,
    ):
        expect(client.protocol_version == revision, f"negotiated {client.protocol_version}")
        yield client


@contextlib.asynccontextmanager
async def echo_http(home: Path) -> AsyncIterator[tuple[str, int]]:
    """bench/echo_server.py --http on a free loopback port: its /mcp URL and its pid."""
    log_path = log_file(home, "echo-http.log")
    with log_path.open("wb") as out:
        process = await anyio.open_process(
            [sys.executable, str(BENCH_DIR / "echo_server.py"), "--http"],
            stdout=out,
            stderr=out,
            cwd=str(REPO),
        )
    try:
        port = await wait_for_port(process, log_path)
        yield f"http://127.0.0.1:{port}/mcp", process.pid
    finally:
        await stop(process)


async def _calls(client: Client, tool: str, args: Args, n: int, pid: int) -> Run:
    times = []
    server0, client0 = process_cpu_s(pid), self_cpu_s()
    for i in range(n):
        t = time.perf_counter()
        result = await client.call_tool(tool, args(i))
        times.append(time.perf_counter() - t)
        if result.is_error:
            structured(result)  # raises with the error text
    server, own = process_cpu_s(pid) - server0, self_cpu_s() - client0
    return Run(times, server / n, own / n)


@dataclass
class Paired:
    """Rounds of sends and echoes taken in turns: the best round of each, and each pair's ratio."""

    send: Run
    echo: Run
    ratios: list[float]


async def _in_turns(
    send: tuple[Client, Args, int], echo: tuple[Client, Args, int], revision: str
) -> Paired:
    """ROUNDS rounds of SENDS/ROUNDS sends, each followed by ECHOES/ROUNDS echoes, after
    WARMUP calls of each; the best round of each counts (the one least disturbed)."""
    (send_client, send_args, server_pid), (echo_client, echo_args, echo_pid) = send, echo
    await _calls(send_client, "send", send_args, WARMUP, server_pid)
    await _calls(echo_client, "echo", echo_args, WARMUP, echo_pid)
    sends: list[Run] = []
    echoes: list[Run] = []
    for _ in range(ROUNDS):
        sends.append(await _calls(send_client, "send", send_args, SENDS // ROUNDS, server_pid))
        echoes.append(await _calls(echo_client, "echo", echo_args, ECHOES // ROUNDS, echo_pid))
        log(NAME, f"round ({revision}): send/echo {sends[-1].per_s / echoes[-1].per_s:.2f}")
    return Paired(
        send=max(sends, key=lambda r: r.per_s),
        echo=max(echoes, key=lambda r: r.per_s),
        ratios=[s.per_s / e.per_s for s, e in zip(sends, echoes, strict=True)],
    )


@dataclass
class Concurrent:
    calls: int
    seconds: float
    server_cpu_s: float
    client_cpu_s: float
    latencies: list[float]

    @property
    def per_s(self) -> float:
        return self.calls / self.seconds


CallFor = Callable[[int, int], tuple[str, dict[str, Any]]]
"""(client index, call number) -> (tool, arguments)."""


async def _agent(
    client: Client, i: int, call_for: CallFor, calls: int, go: anyio.Event, out: list[float]
) -> None:
    """One of the concurrent clients: once `go` is set, `calls` calls in sequence."""
    await go.wait()
    for n in range(calls):
        tool, args = call_for(i, n)
        t = time.perf_counter()
        result = await client.call_tool(tool, args)
        out.append(time.perf_counter() - t)
        if result.is_error:
            structured(result)


async def _concurrent(
    url: str, keys: list[str | None], call_for: CallFor, revision: str, pid: int
) -> Concurrent:
    """One client per key, connected at once; each round they all start together and each
    makes CALLS_EACH calls in sequence; the best of CONCURRENT_ROUNDS rounds."""
    best: Concurrent | None = None
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(mcp_client(url, k, revision)) for k in keys]
        for round_no in range(CONCURRENT_ROUNDS + 1):  # round 0 warms up
            calls = 20 if round_no == 0 else CALLS_EACH
            go = anyio.Event()
            latencies: list[float] = []
            async with anyio.create_task_group() as tg:
                for i, client in enumerate(clients):
                    tg.start_soon(_agent, client, i, call_for, calls, go, latencies)
                await anyio.sleep(0.1)
                server0, client0 = process_cpu_s(pid), self_cpu_s()
                t0 = time.perf_counter()
                go.set()
            seconds = time.perf_counter() - t0
            if round_no == 0:
                continue
            total = calls * len(clients)
            got = Concurrent(
                calls=total,
                seconds=seconds,
                server_cpu_s=(process_cpu_s(pid) - server0) / total,
                client_cpu_s=(self_cpu_s() - client0) / total,
                latencies=latencies,
            )
            log(NAME, f"{len(clients)} clients ({revision}): {got.per_s:,.0f} calls/s")
            if best is None or got.per_s > best.per_s:
                best = got
    assert best is not None
    return best


async def run() -> Report:
    report = Report(NAME, config=dict(RAISED_LIMITS))
    paired: dict[str, Paired] = {}
    concurrent: dict[str, Concurrent] = {}
    concurrent_echo: dict[str, Concurrent] = {}
    with scratch_home(NAME) as home:
        async with running(home) as server, echo_http(home) as (echo_url, echo_pid):
            inboxes = [f"inbox-{i}" for i in range(RECIPIENTS)]
            ring = [f"agent-{i:02d}" for i in range(CLIENTS)]
            keys = await server.create_agents(["bench-sender", *inboxes, *ring])
            mcp_url = f"{server.url}/mcp"

            def send_args(i: int) -> dict[str, Any]:
                return {"to": inboxes[i % RECIPIENTS], "body": BODY}

            def echo_args(i: int) -> dict[str, Any]:
                return {"text": BODY}

            for revision in REVISIONS:
                log(NAME, f"{SENDS} send calls and {ECHOES} echo calls in turns ({revision})")
                async with (
                    mcp_client(mcp_url, keys["bench-sender"], revision) as sender,
                    mcp_client(echo_url, None, revision) as echoer,
                ):
                    paired[revision] = await _in_turns(
                        (sender, send_args, server.pid), (echoer, echo_args, echo_pid), revision
                    )

            def ring_send(i: int, n: int) -> tuple[str, dict[str, Any]]:
                return "send", {"to": ring[(i + 1) % CLIENTS], "body": f"{BODY} {n}"}

            def echo_call(i: int, n: int) -> tuple[str, dict[str, Any]]:
                return "echo", {"text": BODY}

            for revision in REVISIONS:
                log(NAME, f"{CLIENTS} clients x {CALLS_EACH} sends, then echoes ({revision})")
                ring_keys: list[str | None] = [keys[n] for n in ring]
                concurrent[revision] = await _concurrent(
                    mcp_url, ring_keys, ring_send, revision, server.pid
                )
                concurrent_echo[revision] = await _concurrent(
                    echo_url, [None] * CLIENTS, echo_call, revision, echo_pid
                )

    for revision in REVISIONS:
        send, echo = paired[revision].send, paired[revision].echo
        ratio = send.per_s / echo.per_s
        report.add(
            f"mcp_http: send calls/s, one client in sequence ({revision})",
            f"≥ {RATIO_TARGET:.2f} x echo",
            f"{send.per_s:,.0f}/s = {ratio:.2f} x echo ({ms(median(send.times))} median; "
            f"{send.cpu()})",
            ratio >= RATIO_TARGET,
        )
        report.add(
            f"mcp_http: send/echo of each round pair, in the order taken ({revision})",
            "(reported)",
            " ".join(f"{r:.2f}" for r in paired[revision].ratios),
        )
        report.add(
            f"mcp_http: the SDK's echo tool over HTTP, same client, same run ({revision})",
            "(reference)",
            f"{echo.per_s:,.0f}/s ({ms(median(echo.times))} median; {echo.cpu()})",
        )
        by_cpu = (echo.server_cpu_s + echo.client_cpu_s) / (send.server_cpu_s + send.client_cpu_s)
        report.add(
            f"mcp_http: send as a share of echo, by server+client CPU per call ({revision})",
            "(reported)",
            f"{by_cpu:.2f}",
        )
    for revision in REVISIONS:
        c = concurrent[revision]
        report.add(
            f"mcp_http: {CLIENTS} concurrent clients (agents), send calls/s in total ({revision})",
            f"≥ {CONCURRENT_TARGET}/s",
            f"{c.per_s:,.0f}/s (p50 {ms(median(c.latencies))}; server {ms(c.server_cpu_s)} + "
            f"client {ms(c.client_cpu_s)} CPU per call)",
            c.per_s >= CONCURRENT_TARGET,
        )
        e = concurrent_echo[revision]
        report.add(
            f"mcp_http: {CLIENTS} concurrent clients, the SDK's echo tool, in total ({revision})",
            "(reference)",
            f"{e.per_s:,.0f}/s (p50 {ms(median(e.latencies))}; server {ms(e.server_cpu_s)} + "
            f"client {ms(e.client_cpu_s)} CPU per call)",
        )
    report.notes.append(
        f"one client: best of {ROUNDS} rounds of {SENDS // ROUNDS} sends / {ECHOES // ROUNDS} "
        f"echoes, taken in turns, after {WARMUP} warm-up calls of each, {len(BODY)}-char body, "
        f"sends rotating over {RECIPIENTS} inboxes; {CLIENTS} clients: best of "
        f"{CONCURRENT_ROUNDS} rounds of {CALLS_EACH} sends each after a warm-up round; "
        "the clients all run in this process"
    )

    def run_data(r: Run) -> dict[str, Any]:
        return {"times_s": r.times, "server_cpu_s": r.server_cpu_s, "client_cpu_s": r.client_cpu_s}

    report.data = {
        "sends": {k: run_data(v.send) for k, v in paired.items()},
        "echo": {k: run_data(v.echo) for k, v in paired.items()},
        "round_ratios": {k: v.ratios for k, v in paired.items()},
        "concurrent": {k: vars(v) for k, v in concurrent.items()},
        "concurrent_echo": {k: vars(v) for k, v in concurrent_echo.items()},
        "protocols": [MODERN, LEGACY],
    }
    return report
