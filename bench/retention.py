"""Retention's sweep of a store of old handled mail, on PostgreSQL and on SQLite, sends beside.

Each database gets `BENCH_RETENTION_MESSAGES` (default 200,000) messages from 40 days ago,
written directly (COPY on PostgreSQL, one `executemany` on SQLite), each to one of 100 readers
(mail to one agent is a sliver of a real store's; the sends go to 100 others in turn, each
message one more for its recipient's cap to count, with the benchmarks' raised caps): every 10th
a request and the next its response, one in 100 still unread (kept), the rest acked or
expired; then 10,000 acked today (kept: too young). PostgreSQL is a scratch database of the
server at `AGENTPOST_BENCH_POSTGRES` (`bench.replica_wake`), SQLite a file in a scratch home.
Through the services in one process, `Mailbox.sweep` runs while `SENDERS` tasks send (one
message, then 10 ms of pause, each); each of its batches (a lengthy write) is timed from its
call to its commit, each send likewise; on PostgreSQL, the rows and index entries the database
read meanwhile (`pg_stat_database`: the sweep's, and some 50 a send), which the machine's load
does not move. Run from another source (`PYTHONPATH=<its src>`) to
compare: nothing here depends on the sweep's insides.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import asyncpg

from agentpost.services import PostOffice
from agentpost.store.database import Store
from bench.common import (
    RAISED_LIMITS,
    Report,
    expect,
    log,
    median,
    ms,
    pct,
    scratch_home,
    settings_for,
)
from bench.replica_wake import scratch_database

NAME = "retention"
MESSAGES = int(os.environ.get("BENCH_RETENTION_MESSAGES", "200000"))
YOUNG = 10_000
SENDERS = 4
SEND_GAP_S = 0.01
QUIET_S = 2.0
"""Sends timed before the sweep starts, to compare those during it with."""
EDGE = 50
"""Batches at each end of the sweep compared: the first walk the whole store, the last little."""
STATS_S = 1.5
DAY_S = 86_400.0
COLUMNS = ["id", "sender", "recipients", "kind", "body", "thread_id", "reply_to"]
COLUMNS += ["priority", "must_read", "created_at", "trust"]


def _messages(now: float) -> list[tuple[Any, ...]]:
    rows = []
    for i in range(MESSAGES + YOUNG):
        kind = {1: "request", 2: "response"}.get(i % 10, "message")
        reply_to = f"m_{i - 1:09d}" if kind == "response" else None
        at = now - 40 * DAY_S + i * 0.01 if i < MESSAGES else now - 60 + i * 1e-4
        rows.append((f"m_{i:09d}", "bench-writer", '["r"]', kind, f"body {i}",
                     f"t_{i}", reply_to, "normal", False, at, "verified"))  # fmt: skip
    return rows


_DELIVERIES = (
    "INSERT INTO deliveries (recipient, message_seq, state, urgent, acked_at)"
    " SELECT 'r' || (seq % 100), seq, CASE WHEN seq % 100 = 50 AND seq <= {old} THEN 'queued'"
    " WHEN seq % 2 = 0 OR seq > {old} THEN 'acked' ELSE 'expired' END, false, created_at"
    " FROM messages"
)
SINKS = 100
_AGENTS = "INSERT INTO agents (name, created_at) VALUES ('bench-writer', 1), " + ", ".join(
    f"('bench-sink-{i}', 1)" for i in range(SINKS)
)


async def _load_postgres(url: str, now: float) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(_AGENTS)
        await conn.copy_records_to_table("messages", records=_messages(now), columns=COLUMNS)
        await conn.execute(_DELIVERIES.format(old=MESSAGES))
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


def _load_sqlite(path: Path, now: float) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute(_AGENTS)
        marks = ", ".join("?" for _ in COLUMNS)
        conn.executemany(f"INSERT INTO messages ({', '.join(COLUMNS)}) VALUES ({marks})",
                         _messages(now))  # fmt: skip
        conn.execute(_DELIVERIES.format(old=MESSAGES))
        conn.commit()
        conn.execute("ANALYZE")
    finally:
        conn.close()


async def _rows_read(url: str) -> int:
    """Rows (and index entries) the database has read so far, once every other connection's
    counts are in: each reports them within a second, and on closing."""
    await asyncio.sleep(STATS_S)
    conn = await asyncpg.connect(url)
    try:
        query = "SELECT tup_returned + tup_fetched FROM pg_stat_database WHERE datname = $1"
        return int(await conn.fetchval(query, url.rsplit("/", 1)[1]))
    finally:
        await conn.close()


async def _sweep(home: Path, url: str) -> dict[str, Any]:
    office = await PostOffice.open(settings_for(home, AGENTPOST_DATABASE_URL=url))
    batches: list[float] = []
    sends: list[tuple[float, float]] = []
    write = office.store.write

    async def timed_write(fn: Any, **options: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await write(fn, **options)
        finally:
            if options.get("lengthy"):
                batches.append(time.perf_counter() - t0)

    office.store.write = timed_write  # type: ignore[method-assign]
    stop = asyncio.Event()
    try:
        sender = await office.presence.ensure_agent("bench-sender")

        async def send(n: int) -> None:
            i = 0
            while not stop.is_set():
                t0 = time.perf_counter()
                await office.mailbox.send(sender, f"bench-sink-{i % SINKS}", f"status {n} {i}")
                sends.append((t0, time.perf_counter() - t0))
                i += 1
                await asyncio.sleep(SEND_GAP_S)

        senders = [asyncio.create_task(send(n)) for n in range(SENDERS)]
        await asyncio.sleep(QUIET_S)
        start = time.perf_counter()
        purged = await office.mailbox.sweep()
        end = time.perf_counter()
        stop.set()
        await asyncio.gather(*senders)
    finally:
        office.store.write = write  # type: ignore[method-assign]
        await office.aclose()
    expected = MESSAGES - MESSAGES // 100
    expect(abs(purged - expected) <= 20, f"about {expected:,} purged, not {purged:,}")
    return {
        "purged": purged,
        "wall_s": end - start,
        "batches": batches,
        "sends_before": [s for t, s in sends if t < start],
        "sends": [s for t, s in sends if start <= t < end],
    }


async def _backend(name: str) -> dict[str, Any]:
    with scratch_home(NAME) as home:
        now = time.time()
        if name == "postgres":
            async with scratch_database() as url:
                await (await Store.open(url)).aclose()
                log(NAME, f"postgres: loading {MESSAGES:,} old messages and {YOUNG:,} young")
                await _load_postgres(url, now)
                start = await _rows_read(url)
                got = await _sweep(home, url)
                got["rows_read"] = await _rows_read(url) - start
                return got
        path = home / "agentpost.db"
        await (await Store.open(f"sqlite:///{path}")).aclose()
        log(NAME, f"sqlite: loading {MESSAGES:,} old messages and {YOUNG:,} young")
        _load_sqlite(path, now)
        return await _sweep(home, f"sqlite:///{path}")


async def run() -> Report:
    report = Report(NAME, config=dict(RAISED_LIMITS))
    for name in os.environ.get("BENCH_RETENTION_BACKENDS", "postgres,sqlite").split(","):
        log(NAME, f"{name}: sweeping")
        got = await _backend(name)
        report.data[name] = got
        batches, sends, quiet = got["batches"], got["sends"], got["sends_before"]
        report.add(
            f"retention on {name}: the sweep of {MESSAGES:,} old messages ({got['purged']:,} go)",
            "(reported)",
            f"{got['wall_s']:.1f} s, {len(batches)} batches",
        )
        report.add(
            f"retention on {name}: a batch, p50 of the first {EDGE} / of the last {EDGE} / max",
            "(reported)",
            " / ".join(
                ms(v) for v in (median(batches[:EDGE]), median(batches[-EDGE:]), max(batches))
            ),
        )
        if "rows_read" in got:
            report.add(
                f"retention on {name}: rows read meanwhile (pg_stat_database), per batch",
                "(reported)",
                f"{got['rows_read']:,}, {got['rows_read'] // len(batches):,}",
            )
        report.add(
            f"retention on {name}: a send, p50 / p99: before the sweep; during it (max)",
            "(reported)",
            f"{ms(pct(quiet, 50))} / {ms(pct(quiet, 99))}; {ms(pct(sends, 50))} / "
            f"{ms(pct(sends, 99))} ({ms(max(sends))})",
        )
    return report
