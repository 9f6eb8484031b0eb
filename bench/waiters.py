"""Service figure: 1,000 waiting connections held by one `agentpost serve`, then a broadcast.

1,000 agents are created through the admin REST API; each then holds one REST long-poll
(`GET /v1/inbox/wait?timeout_s=240`) on a connection of its own. The client side is plain
asyncio streams (one small coroutine per connection: write the request, read the answer), so
that this process's own cost per answer stays far below the figure it measures. Once every
request is in and the server has gone quiet, its resident memory is read from
/proc/PID/status (VmRSS; target ≤ 300 MB). Then another agent sends one message to `#general`
(every agent is a member) and each waiter's answer is timed from the moment that send was
issued, until its whole answer is here; target: all 1,000 woken, each with the message, within
1 s. The benchmark raises its own RLIMIT_NOFILE soft limit to the hard one (the server, its
child, inherits it); rate and inbox limits are raised as in every benchmark (RAISED_LIMITS).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio
import httpx

from bench.common import RAISED_LIMITS, Report, expect, log, ms, pct, scratch_home
from bench.serve import Serve, mb, raise_fd_limit, running

NAME = "waiters"
WAITERS = 1000
RSS_TARGET = 300 * 2**20
WAKE_TARGET_S = 1.0
HOLD_S = 240
OPEN_AT_ONCE = 100
QUIET_CPU_SHARE = 0.10
QUIET_LIMIT_S = 60
DIRECT_SENDS = 10
BODY = "All hands: the release branch is cut; please finish what you hold and report."


@dataclass
class Held:
    """What holding the waiters and waking them measured."""

    waiters: int
    rss_before: int = 0
    rss_holding: int = 0
    peak_rss: int = 0
    open_s: float = 0.0
    settle_s: float = 0.0
    settled: bool = True
    """Whether the server went quiet (under QUIET_CPU_SHARE of a core) once the polls were in."""
    holding_cpu_share: float = 0.0
    send_s: float = 0.0
    direct_idle_s: list[float] = field(default_factory=list)
    """A direct send to an agent nobody waits for, with no long-poll held."""
    direct_holding_s: list[float] = field(default_factory=list)
    """The same while the long-polls are held (every commit wakes every waiter)."""
    woken_s: list[float] = field(default_factory=list)
    """Per waiter: from the broadcast issued to its whole answer here."""
    failures: list[str] = field(default_factory=list)

    @property
    def woken_s_max(self) -> float:
        return max(self.woken_s) if self.woken_s else float("inf")


async def _request(port: int, key: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        (
            f"GET /v1/inbox/wait?timeout_s={HOLD_S} HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {key}\r\n"
            "Connection: close\r\n\r\n"
        ).encode()
    )
    await writer.drain()
    return reader, writer


async def _answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """Status and body of one HTTP/1.1 answer with a Content-Length."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    lengths = [int(x.split(":", 1)[1]) for x in lines if x.lower().startswith("content-length:")]
    length = lengths[0] if lengths else None
    body = await (reader.readexactly(length) if length is not None else reader.read())
    return status, body


async def _wait_quiet(server: Serve) -> tuple[float, bool]:
    """Until the server uses under QUIET_CPU_SHARE of a core over 1 s, at most QUIET_LIMIT_S:
    the seconds it took, and whether it went quiet."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < QUIET_LIMIT_S:
        cpu0 = server.cpu_s()
        await anyio.sleep(1.0)
        if server.cpu_s() - cpu0 < QUIET_CPU_SHARE:
            return time.perf_counter() - t0, True
    return time.perf_counter() - t0, False


async def _direct_sends(sender: httpx.AsyncClient) -> list[float]:
    """DIRECT_SENDS sends, one at a time, to `bench-idle` (who never waits); each one's time."""
    times = []
    for n in range(DIRECT_SENDS):
        t = time.perf_counter()
        answer = await sender.post("/v1/messages", json={"to": "bench-idle", "body": f"n {n}"})
        times.append(time.perf_counter() - t)
        expect(answer.status_code == 201, f"send: {answer.status_code} {answer.text}")
        await anyio.sleep(0.05)
    return times


async def hold_and_broadcast(
    server: Serve,
    waiters: int = WAITERS,
    *,
    before_broadcast: Callable[[], Awaitable[None]] | None = None,
) -> Held:
    """Create `waiters` agents, hold one long-poll each, broadcast once, time every wake."""
    held = Held(waiters)
    names = [f"w-{i:04d}" for i in range(waiters)]
    log(NAME, f"creating {waiters} agents through the admin API")
    keys = await server.create_agents([*names, "bench-broadcaster", "bench-idle"])
    broadcaster = server.client(keys["bench-broadcaster"])
    await _wait_quiet(server)
    held.rss_before = server.rss()
    held.direct_idle_s = await _direct_sends(broadcaster)

    log(NAME, f"opening {waiters} long-polls")
    started = asyncio.Event()
    all_open = anyio.Event()
    all_woken = anyio.Event()
    t_call = 0.0
    arrivals: dict[str, float] = {}
    gate = asyncio.Semaphore(OPEN_AT_ONCE)
    opened = 0

    async def waiter(name: str) -> None:
        nonlocal opened
        try:
            async with gate:
                reader, writer = await _request(server.port, keys[name])
        except OSError as exc:
            held.failures.append(f"{name}: could not connect ({exc})")
            return
        finally:
            opened += 1
            if opened == waiters:
                all_open.set()
        try:
            status, body = await _answer(reader)
            t = time.perf_counter()
        finally:
            writer.close()
        if not started.is_set():
            held.failures.append(f"{name}: answered before the broadcast ({status})")
            return
        arrivals[name] = t
        if len(arrivals) == waiters:
            all_woken.set()
        if status != 200:
            held.failures.append(f"{name}: {status} {body[:200]!r}")
            return
        got = json.loads(body)
        bodies = [m["body"] for m in got["messages"]]
        if got["timed_out"] or bodies != [BODY]:
            held.failures.append(f"{name}: woke with {bodies} (timed out: {got['timed_out']})")

    t_open = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for name in names:
            tg.start_soon(waiter, name)
        await all_open.wait()
        held.open_s = time.perf_counter() - t_open
        held.settle_s, held.settled = await _wait_quiet(server)
        cpu0 = server.cpu_s()
        await anyio.sleep(2.0)
        held.holding_cpu_share = (server.cpu_s() - cpu0) / 2.0
        held.rss_holding = server.rss()
        held.direct_holding_s = await _direct_sends(broadcaster)
        await _wait_quiet(server)
        expect(not held.failures, f"before the broadcast: {held.failures[:3]}")
        log(NAME, f"holding {waiters}: {mb(held.rss_holding)} resident; broadcasting")
        if before_broadcast is not None:
            await before_broadcast()
        started.set()
        t_call = time.perf_counter()
        answer = await broadcaster.post("/v1/messages", json={"to": "#general", "body": BODY})
        held.send_s = time.perf_counter() - t_call
        expect(answer.status_code == 201, f"broadcast: {answer.status_code} {answer.text}")
        with anyio.move_on_after(30):
            await all_woken.wait()
        tg.cancel_scope.cancel()
    held.woken_s = sorted(t - t_call for t in arrivals.values())
    held.peak_rss = server.peak_rss()
    missing = waiters - len(arrivals)
    if missing:
        held.failures.append(f"{missing} waiters not woken within 30 s")
    return held


async def run() -> Report:
    report = Report(NAME, config={**RAISED_LIMITS})
    limit = raise_fd_limit()
    expect(limit >= 2 * WAITERS + 100, f"RLIMIT_NOFILE is {limit}, too low for {WAITERS}")
    with scratch_home(NAME) as home:
        async with running(home) as server:
            held = await hold_and_broadcast(server)

    ok = not held.failures and len(held.woken_s) == WAITERS
    report.add(
        f"waiters: {WAITERS} long-polls held by one serve process, resident memory (VmRSS)",
        f"≤ {mb(RSS_TARGET)}",
        f"{mb(held.rss_holding)} (before the connections {mb(held.rss_before)}; "
        f"{(held.rss_holding - held.rss_before) / WAITERS / 1024:,.0f} kB per waiter)",
        held.rss_holding <= RSS_TARGET,
    )
    report.add(
        f"waiters: all {WAITERS} woken by one #general broadcast, from the send issued",
        f"all within {WAKE_TARGET_S:g} s",
        f"{len(held.woken_s)}/{WAITERS} woken, last after {ms(held.woken_s_max)} "
        f"(p50 {ms(pct(held.woken_s, 50))}, first {ms(held.woken_s[0])})"
        if held.woken_s
        else "none woken",
        ok and held.woken_s_max <= WAKE_TARGET_S,
    )
    report.add(
        "waiters: the broadcast's own answer; peak resident memory over the run (VmHWM)",
        "(reported)",
        f"{ms(held.send_s)}; {mb(held.peak_rss)}",
    )
    report.add(
        f"waiters: a direct send to an agent nobody waits for, p50 of {DIRECT_SENDS}, "
        f"without / with the {WAITERS} long-polls held",
        "(reported)",
        f"{ms(pct(held.direct_idle_s, 50))} / {ms(pct(held.direct_holding_s, 50))} "
        f"(max {ms(max(held.direct_idle_s))} / {ms(max(held.direct_holding_s))})",
    )
    report.add(
        f"waiters: the server's CPU while holding {WAITERS} idle long-polls",
        "(reported)",
        f"{held.holding_cpu_share:.1%} of a core",
    )
    for failure in held.failures[:5]:
        report.notes.append(f"failure: {failure}")
    quiet = (
        f"server quiet {held.settle_s:.1f} s later"
        if held.settled
        else f"the server never went quiet (under {QUIET_CPU_SHARE:.0%} of a core) in "
        f"{QUIET_LIMIT_S} s: measured anyway"
    )
    report.notes.append(
        f"RLIMIT_NOFILE {limit}; {WAITERS} connections opened in {held.open_s:.1f} s "
        f"({OPEN_AT_ONCE} at a time), {quiet}; long-polls with timeout_s={HOLD_S}"
    )
    report.data = {
        "rss_before": held.rss_before,
        "rss_holding": held.rss_holding,
        "peak_rss": held.peak_rss,
        "woken_s": held.woken_s,
        "send_s": held.send_s,
        "settled": held.settled,
        "settle_s": held.settle_s,
        "direct_idle_s": held.direct_idle_s,
        "direct_holding_s": held.direct_holding_s,
        "failures": held.failures,
    }
    return report
