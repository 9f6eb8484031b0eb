"""Service figure: REST `POST /v1/messages` from 32 keep-alive connections (issue 3).

`agentpost serve` runs as a real process (one uvicorn worker, SQLite in a scratch home). The load
generator is `wrk` (one thread, 32 connections, `bench/rest_send.lua`), or, where `wrk` is not
installed (or BENCH_REST_LOAD=httpx), 32 httpx clients of one connection each in this process,
which costs far more CPU per request on the same cores; the table says which one ran.

32 agents, created through the admin REST API; request i is sent by agent i mod 32 (its own
bearer key) to agent i+1, with an 87-character body, so the 32 inboxes grow at the same pace and
none passes ~1,000 open messages over the run. Rate and inbox limits are raised through
configuration (RAISED_LIMITS): the default 60 sends a minute would refuse nearly every request.
Every non-2xx answer is an error, counted by status. After a warm-up, ROUNDS rounds of ROUND_S
seconds; the best round is the figure and the table gives every round. One more round, with the
server's threads pinned to one CPU, is reported beside it (not the figure: users do not pin).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx

from bench.common import BENCH_DIR, RAISED_LIMITS, Report, expect, log, ms, scratch_home
from bench.serve import Serve, cpu_window, running

NAME = "rest"
TARGET = 500
CONNECTIONS = 32
AGENTS = 32
WARMUP_S = 3
ROUND_S = 10
ROUNDS = 3
LUA = BENCH_DIR / "rest_send.lua"
BODY = "Please review the migration in PR 42 before the release; the index on deliveries moved."


@dataclass
class Round:
    ok: int
    errors: int
    seconds: float
    statuses: dict[str, int]
    p50_s: float
    p99_s: float
    server_cpu_s: float = 0.0
    transport_errors: dict[str, int] = field(default_factory=dict)

    @property
    def per_s(self) -> float:
        return self.ok / self.seconds

    @property
    def cpu_per_request_s(self) -> float:
        return self.server_cpu_s / max(1, self.ok + self.errors)


def _pin(pid: int) -> bool:
    """Pin every thread of `pid` to the first CPU this process may use (Linux; else False).

    The server's event loop and its SQLite threads hand work to each other several times per
    request; on different CPUs each hand-off may wake an idle CPU, which a VM makes dear. The
    pinned round says how much of a request's cost that is.
    """
    if not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2:
        return False
    cpu = min(os.sched_getaffinity(0))
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(tid), {cpu})
    return True


def _generator() -> str:
    if os.environ.get("BENCH_REST_LOAD") == "httpx" or shutil.which("wrk") is None:
        return "httpx"
    return "wrk"


async def _wrk(server: Serve, agents_file: Path, seconds: float) -> Round:
    wrk = shutil.which("wrk")
    assert wrk is not None
    command = [
        wrk,
        "-t1",
        f"-c{CONNECTIONS}",
        f"-d{seconds:g}s",
        "--timeout",
        "30s",
        "-s",
        str(LUA),
        server.url,
        "--",
        str(agents_file),
    ]
    done = await anyio.run_process(command, check=False)
    out = done.stdout.decode()
    line = next((x for x in out.splitlines() if x.startswith("AGENTPOST_RESULT ")), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({done.returncode}):\n{out}\n{done.stderr.decode()}")
    got: dict[str, Any] = json.loads(line.removeprefix("AGENTPOST_RESULT "))
    transport = {k: int(got[k]) for k in ("connect", "read", "write", "timeout") if got[k]}
    return Round(
        ok=int(got["ok"]),
        errors=int(got["non2xx"]) + sum(transport.values()),
        seconds=got["duration_us"] / 1e6,
        statuses={str(k): int(v) for k, v in got["statuses"].items()},
        p50_s=got["p50_us"] / 1e6,
        p99_s=got["p99_us"] / 1e6,
        transport_errors=transport,
    )


async def _httpx(server: Serve, keys: dict[str, str], seconds: float) -> Round:
    """The fallback: CONNECTIONS httpx clients, one connection each, as fast as they answer."""
    names = list(keys)
    counter = 0
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    transport: dict[str, int] = {}
    ok = 0
    clients = [
        httpx.AsyncClient(base_url=server.url, timeout=30, limits=httpx.Limits(max_connections=1))
        for _ in range(CONNECTIONS)
    ]
    deadline = time.perf_counter() + seconds

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal counter, ok
        while time.perf_counter() < deadline:
            counter += 1
            sender, to = names[counter % len(names)], names[(counter + 1) % len(names)]
            t = time.perf_counter()
            try:
                answer = await client.post(
                    "/v1/messages",
                    json={"to": to, "body": f"{BODY} ({counter})"},
                    headers={"Authorization": f"Bearer {keys[sender]}"},
                )
            except httpx.HTTPError as exc:
                kind = type(exc).__name__
                transport[kind] = transport.get(kind, 0) + 1
                continue
            latencies.append(time.perf_counter() - t)
            if 200 <= answer.status_code < 300:
                ok += 1
            else:
                statuses[str(answer.status_code)] = statuses.get(str(answer.status_code), 0) + 1

    t0 = time.perf_counter()
    try:
        async with anyio.create_task_group() as tg:
            for client in clients:
                tg.start_soon(worker, client)
    finally:
        for client in clients:
            await client.aclose()
    elapsed = time.perf_counter() - t0
    latencies.sort()
    return Round(
        ok=ok,
        errors=sum(statuses.values()) + sum(transport.values()),
        seconds=elapsed,
        statuses=statuses,
        p50_s=latencies[len(latencies) // 2] if latencies else 0.0,
        p99_s=latencies[int(len(latencies) * 0.99)] if latencies else 0.0,
        transport_errors=transport,
    )


async def run() -> Report:
    report = Report(NAME, config=dict(RAISED_LIMITS))
    generator = _generator()
    rounds: list[Round] = []
    with scratch_home(NAME) as home:
        async with running(home) as server:
            names = [f"load-{i:02d}" for i in range(AGENTS)]
            log(NAME, f"creating {AGENTS} agents through the admin API")
            keys = await server.create_agents(names)
            agents_file = home / "agents.txt"
            agents_file.write_text("".join(f"{n} {keys[n]}\n" for n in names))
            rss_idle = server.rss()

            async def one(seconds: float) -> Round:
                if generator == "wrk":
                    return await _wrk(server, agents_file, seconds)
                return await _httpx(server, keys, seconds)

            log(NAME, f"{generator}: warm-up {WARMUP_S} s, then {ROUNDS} rounds of {ROUND_S} s")
            warm = await one(WARMUP_S)
            for n in range(ROUNDS):
                with cpu_window(server) as cpu:
                    got = await one(ROUND_S)
                got.server_cpu_s = cpu["cpu_s"]
                rounds.append(got)
                log(NAME, f"round {n + 1}: {got.per_s:,.0f}/s, {got.errors} errors")
            pinned: Round | None = None
            if _pin(server.pid):
                with cpu_window(server) as cpu:
                    pinned = await one(ROUND_S)
                pinned.server_cpu_s = cpu["cpu_s"]
                log(NAME, f"pinned to one CPU: {pinned.per_s:,.0f}/s, {pinned.errors} errors")
            await anyio.sleep(1)  # let requests still in flight when the generator stopped land
            stored = server.stored()
            sent_ok = warm.ok + sum(r.ok for r in rounds) + (pinned.ok if pinned else 0)
            expect(stored >= sent_ok, f"{stored} stored, {sent_ok} answered 2xx")
            rss_after = server.rss()

    best = max(rounds, key=lambda r: r.per_s)
    errors = warm.errors + sum(r.errors for r in rounds)
    statuses: dict[str, int] = {}
    for r in [warm, *rounds]:
        for k, v in [*r.statuses.items(), *r.transport_errors.items()]:
            statuses[k] = statuses.get(k, 0) + v
    every = ", ".join(f"{r.per_s:,.0f}" for r in rounds)
    report.add(
        f"rest: POST /v1/messages, {CONNECTIONS} keep-alive connections, 1 worker ({generator})",
        f"≥ {TARGET}/s",
        f"{best.per_s:,.0f}/s (rounds: {every}; p50 {ms(best.p50_s)}, p99 {ms(best.p99_s)})",
        best.per_s >= TARGET,
    )
    by_status = ", ".join(f"{k}: {v}" for k, v in statuses.items())
    report.add(
        "rest: non-2xx answers and transport errors, all rounds",
        "0",
        f"{errors} ({by_status})" if errors else "0",
        errors == 0,
    )
    report.add(
        "rest: server CPU per request (all its threads)",
        "(reported)",
        f"{ms(best.cpu_per_request_s)} ({best.server_cpu_s / best.seconds:.0%} of a core)",
    )
    if pinned is not None:
        report.add(
            "rest: the same, one more round with every server thread pinned to one CPU",
            "(reported)",
            f"{pinned.per_s:,.0f}/s ({ms(pinned.cpu_per_request_s)} CPU per request; "
            f"{pinned.errors} errors)",
        )
    report.add(
        "rest: server resident memory, idle / after the rounds",
        "(reported)",
        f"{rss_idle / 2**20:,.0f} / {rss_after / 2**20:,.0f} MB",
    )
    report.notes.append(
        f"load generator: {generator}"
        + (" (wrk 1 thread, bench/rest_send.lua)" if generator == "wrk" else " (wrk not found)")
        + f"; {AGENTS} agents, request i from agent i mod {AGENTS} to the next, "
        f"{len(BODY)}-char body; {WARMUP_S} s warm-up, best of {ROUNDS} rounds of {ROUND_S} s; "
        f"{stored:,} messages stored for {sent_ok:,} 2xx answers"
    )
    report.data = {
        "generator": generator,
        "rounds": [vars(r) for r in rounds],
        "warmup": vars(warm),
        "pinned": vars(pinned) if pinned else None,
        "stored": stored,
        "rss_idle": rss_idle,
        "rss_after": rss_after,
    }
    return report
