"""Figure 3: the stdio server (`agentpost mcp`) with one client calling in sequence.

The client is the SDK's own `mcp.Client` over `stdio_client`, spawning the server exactly as an
MCP host does. Measured, in both protocol revisions unless noted:

- `send` calls per second (one recipient a call, rotating over a few inboxes), next to the SDK's
  own echo tool served the same way (bench/echo_server.py, an `MCPServer` with one async tool):
  the floor of the stack. Besides the wall-clock rate, the CPU each call costs the server (all
  its threads, read from /proc) and this client, which the machine's other load does not skew
  the way it skews the rate. Nothing else holds the file open meanwhile; a last round has this
  process listen to it too, as another agent session would;
- an `inbox` call while the inbox holds 200 unread messages, read two ways: the call an agent
  makes (default page of 20) and one returning all 200 (`limit=200`). `peek=true` leaves the
  mail unread, so every call does the same work; the marking variant (default revision only)
  tops the inbox up first so that each of its back-to-back timed calls still finds at least
  200 unread (this process tops it up through the services and acknowledges what was read
  afterwards; neither is timed);
- start to first answer: spawn `agentpost mcp`, connect, first tool result (`whoami`), on a
  database that exists and is migrated (what every session after the first sees), median of 5;
  once on a fresh home, where the start also creates the file and runs the migrations; and the
  SDK echo server's start as the reference.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.client.client import Client

from agentpost.domain.models import Caller
from agentpost.services import PostOffice
from bench.common import (
    LEGACY,
    MODERN,
    RAISED_LIMITS,
    REVISIONS,
    Report,
    agentpost_server,
    children_cpu_s,
    connect,
    echo_server,
    expect,
    log,
    median,
    ms,
    pct,
    scratch_home,
    self_cpu_s,
    server_log,
    settings_for,
    structured,
)

NAME = "stdio"
SEND_TARGET = 500
ECHO_AT_TARGET = 960
"""The echo rate the issue quotes next to the 500/s target (measured where the target was set)."""
INBOX_TARGET_S = 0.005
START_TARGET_S = 1.5
SENDS = 1500
ECHOES = 3000
ROUNDS = 3
WARMUP = 50
UNREAD = 200
PAGES = (20, UNREAD)
RECIPIENTS = 8
"""Sends rotate over this many inboxes, none of which then holds more than ~600 open messages:
with the cap raised, the inbox-full check counts a recipient's whole open backlog, which the
default cap (1,000) bounds in real use."""
PEEK_CALLS = 100
MARK_TRIALS = 25
STARTS = 5
BODY = "Please review the migration in PR 42 before the release; the index on deliveries moved."


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


Args = dict[str, Any] | Callable[[int], dict[str, Any]]
"""A call's arguments: the same each time, or the i-th call's."""


async def _calls(client: Client, tool: str, args: Args, n: int) -> Run:
    times = []
    args_of = args if callable(args) else lambda _: args
    server0, client0 = children_cpu_s(), self_cpu_s()
    for i in range(n):
        call_args = args_of(i)
        t = time.perf_counter()
        result = await client.call_tool(tool, call_args)
        times.append(time.perf_counter() - t)
        if result.is_error:
            structured(result)  # raises with the error text
    server, own = children_cpu_s() - server0, self_cpu_s() - client0
    return Run(times, server / n, own / n)


async def _throughput(client: Client, tool: str, args: Args, n: int) -> Run:
    """The best of ROUNDS rounds of n/ROUNDS calls: the one least disturbed by other load."""
    await _calls(client, tool, args, WARMUP)
    rounds = [await _calls(client, tool, args, n // ROUNDS) for _ in range(ROUNDS)]
    return max(rounds, key=lambda r: r.per_s)


def _send_args(i: int) -> dict[str, Any]:
    return {"to": f"bench-inbox-{i % RECIPIENTS}", "body": BODY}


async def _sends(home: Path, revision: str, args: Args) -> Run:
    with server_log(home, f"sender-{revision}") as errlog:
        async with connect(agentpost_server(home, "bench-sender"), revision, errlog=errlog) as c:
            return await _throughput(c, "send", args, SENDS)


async def _fill(office: PostOffice, sender: Caller, to: str, n: int) -> None:
    await asyncio.gather(
        *(office.mailbox.send(sender, to, f"{BODY} ({i})", subject=f"fill {i}") for i in range(n))
    )


async def _start_times(home: Path, agent: str, revision: str, n: int) -> list[float]:
    times = []
    with server_log(home, f"start-{agent}") as errlog:
        for _ in range(n):
            t0 = time.perf_counter()
            async with connect(agentpost_server(home, agent), revision, errlog=errlog) as c:
                structured(await c.call_tool("whoami", {}))
                times.append(time.perf_counter() - t0)
    return times


async def _echo_start_times(home: Path, n: int) -> list[float]:
    times = []
    with server_log(home, "echo-start") as errlog:
        for _ in range(n):
            t0 = time.perf_counter()
            async with connect(echo_server(), MODERN, errlog=errlog) as c:
                await c.call_tool("echo", {"text": "hi"})
                times.append(time.perf_counter() - t0)
    return times


async def _marking(office: PostOffice, filler: Caller, client: Client, page: int) -> Run:
    """Timed `inbox` calls that each return `page` messages and mark them read, in sequence.

    The inbox is topped up beforehand so that every timed call still finds at least 200 unread
    (200 + what the later calls will take), and the calls run back to back like the peek ones:
    a call after an idle pause pays the machine's wake-up (≈ 2 ms here, for peek as much as
    for marking), which is not the inbox's cost.
    """
    await _fill(office, filler, "bench-reader", MARK_TRIALS * page)
    await asyncio.sleep(0.5)  # let the server's arrival push and signal re-checks settle
    await _calls(client, "inbox", {"limit": 1, "peek": True}, 5)  # warm, as the peek runs are
    gc.collect()  # this process's garbage (it also ran the top-up) is not the calls' cost
    times: list[float] = []
    read: list[str] = []
    server0, client0 = children_cpu_s(), self_cpu_s()
    for trial in range(MARK_TRIALS):
        t = time.perf_counter()
        result = await client.call_tool("inbox", {"limit": page})
        times.append(time.perf_counter() - t)
        got = structured(result)
        expect(len(got["messages"]) == page, f"{len(got['messages'])} returned, not {page}")
        left = UNREAD + (MARK_TRIALS - trial - 1) * page
        expect(got["unread"] == left, f"{got['unread']} left unread, not {left}")
        read.extend(m["id"] for m in got["messages"])
    server_cpu = children_cpu_s() - server0
    client_cpu = self_cpu_s() - client0
    for start in range(0, len(read), 500):  # `ack` takes at most 500 ids a call
        chunk = read[start : start + 500]
        ack = await client.call_tool("ack", {"ids": chunk})
        expect(len(structured(ack)["acked"]) == len(chunk), "not all acknowledged")
    return Run(times, server_cpu / MARK_TRIALS, client_cpu / MARK_TRIALS)


async def run() -> Report:
    report = Report(NAME, config=dict(RAISED_LIMITS))
    with scratch_home(NAME) as home:
        log(NAME, "start to first answer on a fresh home (creates and migrates the database)")
        cold_home = home / "cold"
        cold_home.mkdir()
        cold = await _start_times(cold_home, "bench-start", MODERN, 1)

        # The agents, made by a post office that is closed again before anything is timed: a
        # process holding the file open hears every commit of the server (its change signal),
        # and on two cores its CPU would be the measured pair's.
        office = await PostOffice.open(settings_for(home))
        try:
            for i in range(RECIPIENTS):
                await office.presence.ensure_agent(f"bench-inbox-{i}")
            filler = await office.presence.ensure_agent("bench-filler")
        finally:
            await office.aclose()

        starts: dict[str, list[float]] = {}
        for revision in REVISIONS:
            log(NAME, f"start to first answer x{STARTS} ({revision})")
            starts[revision] = await _start_times(home, "bench-start", revision, STARTS)
        echo_starts = await _echo_start_times(home, STARTS)

        sends: dict[str, Run] = {}
        echoes: dict[str, Run] = {}
        for revision in REVISIONS:
            log(NAME, f"{SENDS} send calls, then {ECHOES} echo calls ({revision})")
            sends[revision] = await _sends(home, revision, _send_args)
            with server_log(home, f"echo-{revision}") as errlog:
                async with connect(echo_server(), revision, errlog=errlog) as client:
                    echo_args = {"text": BODY}
                    echoes[revision] = await _throughput(client, "echo", echo_args, ECHOES)

        office = await PostOffice.open(settings_for(home))
        try:
            log(NAME, f"{SENDS} send calls while another process listens ({MODERN})")
            neighboured = await _sends(home, MODERN, _send_args)

            peeks: dict[tuple[str, int], Run] = {}
            marking: dict[int, Run] = {}
            for revision in (LEGACY, MODERN):
                log(NAME, f"inbox with {UNREAD} unread ({revision})")
                with server_log(home, f"reader-{revision}") as errlog:
                    async with connect(
                        agentpost_server(home, "bench-reader"), revision, errlog=errlog
                    ) as client:
                        if revision == LEGACY:
                            await _fill(office, filler, "bench-reader", UNREAD)
                            await asyncio.sleep(0.2)  # let the server's arrival push settle
                        for page in PAGES:
                            args = {"limit": page, "peek": True}
                            got = structured(await client.call_tool("inbox", args))
                            expect(len(got["messages"]) == page, "a short page")
                            expect(got["unread"] == UNREAD, f"{got['unread']} unread")
                            await _calls(client, "inbox", args, 5)
                            peeks[revision, page] = await _calls(client, "inbox", args, PEEK_CALLS)
                        if revision == MODERN:
                            for page in PAGES:
                                marking[page] = await _marking(office, filler, client, page)
        finally:
            await office.aclose()

    for revision in REVISIONS:
        r = sends[revision]
        report.add(
            f"stdio: send calls/s, one client in sequence ({revision})",
            f"≥ {SEND_TARGET}/s",
            f"{r.per_s:,.0f}/s ({ms(median(r.times))} median; {r.cpu()})",
            r.per_s >= SEND_TARGET,
        )
    report.add(
        f"stdio: send calls/s while another agentpost process listens to the file ({MODERN})",
        "(reported)",
        f"{neighboured.per_s:,.0f}/s ({ms(median(neighboured.times))} median; "
        f"{neighboured.cpu()}, the listener's counted as the client's)",
    )
    for revision in REVISIONS:
        r = echoes[revision]
        report.add(
            f"stdio: the SDK's echo tool, same client ({revision})",
            "(reference)",
            f"{r.per_s:,.0f}/s ({ms(median(r.times))} median; {r.cpu()})",
        )
    for revision in REVISIONS:
        send, echo = sends[revision], echoes[revision]
        share = (echo.server_cpu_s + echo.client_cpu_s) / (send.server_cpu_s + send.client_cpu_s)
        report.add(
            f"stdio: send as a share of echo's rate, by CPU per call ({revision})",
            f"(≥ {SEND_TARGET / ECHO_AT_TARGET:.2f} = {SEND_TARGET}/{ECHO_AT_TARGET})",
            f"{share:.2f} (wall-clock: {send.per_s / echo.per_s:.2f})",
        )
    for page in PAGES:
        for revision in REVISIONS:
            r = peeks[revision, page]
            what = "default page of 20" if page == 20 else f"all {page} (limit={page})"
            report.add(
                f"stdio: inbox, {UNREAD} unread, returns {what}, peek ({revision})",
                f"≤ {ms(INBOX_TARGET_S)} median",
                f"{ms(median(r.times))} (p99 {ms(pct(r.times, 99))}; {r.cpu()})",
                median(r.times) <= INBOX_TARGET_S,
            )
        r = marking[page]
        report.add(
            f"stdio: inbox, {UNREAD} unread, returns {page} and marks them read ({MODERN})",
            f"≤ {ms(INBOX_TARGET_S)} median",
            f"{ms(median(r.times))} (p99 {ms(pct(r.times, 99))}; {r.cpu()})",
            median(r.times) <= INBOX_TARGET_S,
        )
    for revision in REVISIONS:
        times = starts[revision]
        report.add(
            f"stdio: start to first answer, median of {STARTS} ({revision})",
            f"≤ {START_TARGET_S:g} s",
            f"{median(times):.2f} s (min {min(times):.2f}, max {max(times):.2f})",
            median(times) <= START_TARGET_S,
        )
    report.add(
        f"stdio: start to first answer on a fresh home, with migrations ({MODERN})",
        "(reported)",
        f"{cold[0]:.2f} s",
    )
    report.add(
        f"stdio: start to first answer, SDK echo server, median of {STARTS} ({MODERN})",
        "(reference)",
        f"{median(echo_starts):.2f} s (min {min(echo_starts):.2f})",
    )
    report.notes.append(
        f"send/echo: best of {ROUNDS} rounds of {SENDS // ROUNDS}/{ECHOES // ROUNDS} calls "
        f"after {WARMUP} warm-up calls, body {len(BODY)} chars, one recipient a call, rotating "
        f"over {RECIPIENTS} inboxes; no other process holds the file open (but in the "
        "'while another agentpost process listens' row)"
    )
    report.notes.append(
        f"inbox: {PEEK_CALLS} peek calls, {MARK_TRIALS} marking trials per page size; CPU per "
        "call: the server's from /proc schedstat (all its threads), this client's process_time"
    )

    def run_data(r: Run) -> dict[str, Any]:
        return {"times_s": r.times, "server_cpu_s": r.server_cpu_s, "client_cpu_s": r.client_cpu_s}

    report.data = {
        "sends": {k: run_data(v) for k, v in sends.items()},
        "sends_with_a_listener": run_data(neighboured),
        "echo": {k: run_data(v) for k, v in echoes.items()},
        "inbox_peek": {f"{k[0]}/{k[1]}": run_data(v) for k, v in peeks.items()},
        "inbox_marking": {str(k): run_data(v) for k, v in marking.items()},
        "start_s": starts,
        "cold_start_s": cold,
        "echo_start_s": echo_starts,
    }
    return report
