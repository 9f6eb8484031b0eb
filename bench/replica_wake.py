"""Scale-out: a REST long-poll on one `agentpost serve` replica told of a send made through
another, both on one PostgreSQL database (LISTEN/NOTIFY carries the news between them).

Two real `serve` processes, each with its own home, on a scratch database of the PostgreSQL
server at `AGENTPOST_BENCH_POSTGRES` (default `postgresql://postgres@127.0.0.1:5432/test`,
the development machine's), created for the run and dropped after. The trials are those of
`service_wake`'s long-poll, with the waiter on the second replica. Before LISTEN/NOTIFY
every wait there ended within a 1 s poll, which bounded this figure instead.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import AsyncIterator

import asyncpg

from bench.common import RAISED_LIMITS, Report, log, ms, pct, scratch_home
from bench.serve import running
from bench.service_wake import SETTLE_S, TRIALS, WARMUP, long_polls

NAME = "replica_wake"
ADMIN_URL = os.environ.get("AGENTPOST_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


@contextlib.asynccontextmanager
async def scratch_database() -> AsyncIterator[str]:
    name = f"agentpost_bench_{secrets.token_hex(6)}"
    admin = await asyncpg.connect(ADMIN_URL, timeout=5)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield ADMIN_URL.rsplit("/", 1)[0] + "/" + name
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def run() -> Report:
    report = Report(NAME, config=dict(RAISED_LIMITS))
    admin_key = "ap_" + secrets.token_urlsafe(32)
    with scratch_home(NAME) as home:
        (home / "one").mkdir()
        (home / "two").mkdir()
        async with (
            scratch_database() as url,
            running(home / "one", AGENTPOST_DATABASE_URL=url, AGENTPOST_ADMIN_KEY=admin_key) as one,
            running(home / "two", AGENTPOST_DATABASE_URL=url, AGENTPOST_ADMIN_KEY=admin_key) as two,
        ):
            keys = await one.create_agents(["bench-sender", "bench-poller"])
            sender = one.client(keys["bench-sender"])
            poller = two.client(keys["bench-poller"])
            log(NAME, f"{TRIALS} long-poll trials across replicas")
            polls = await long_polls(sender, poller)
    p50, p99 = pct(polls.from_call, 50), pct(polls.from_call, 99)
    report.add(
        "replica_wake: a long-poll on another replica told of a send, from the send issued,"
        f" p50 / p99 ({TRIALS} trials)",
        "(reported)",
        f"{ms(p50)} / {ms(p99)} (max {ms(max(polls.from_call))})",
    )
    report.add(
        "replica_wake: the same, from the send's answer, p50 / p99",
        "(reported)",
        f"{ms(pct(polls.from_return, 50))} / {ms(pct(polls.from_return, 99))}",
    )
    report.notes.append(
        f"two serve replicas on one PostgreSQL database; {WARMUP} warm-up trials; "
        f"{SETTLE_S * 1000:.0f} ms between a wait's request and the send"
    )
    report.data = {"long_poll": vars(polls)}
    return report
