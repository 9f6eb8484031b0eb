"""Scale-out: the retention sweep of a post office of 100,000 messages on PostgreSQL.

A scratch database of the server at `AGENTPOST_BENCH_POSTGRES` (as `pg_search`), migrated by
the store, then loaded with COPY (`BENCH_PG_SWEEP_MESSAGES` sets another size): messages over
90 days among 20 agents, each to one (70%), three (20%) or all 19 others (10%), one in 20 a
request and the next its answer; one `message.created` event per delivery. Mail older than
the retention (30 days) is acked, but for one delivery of one message in 100; 30% of the
younger deliveries are open.

The sweep's mail batches run first as `Mailbox.sweep` runs them (500 a transaction, until one
purges fewer), each timed and measured by PostgreSQL's own counters for its transaction: the
buffers it asked for from `deliveries` and `messages` (table and indexes), and the rows of
`deliveries` it read. `Mailbox.sweep` then does the rest (past-TTL mail, events and the other
logs), timed whole.
"""

from __future__ import annotations

import functools
import json
import os
import random
import time

import asyncpg
from sqlalchemy import Connection, text

from agentpost.services import PostOffice
from agentpost.store import mail
from agentpost.store.retained import Cutoff
from bench.common import Report, log, median, scratch_home, settings_for
from bench.replica_wake import scratch_database

NAME = "pg_sweep"
MESSAGES = int(os.environ.get("BENCH_PG_SWEEP_MESSAGES", "100000"))
AGENTS = [f"agent-{i:02d}" for i in range(20)]
NOW = 1_800_000_000.0
SPAN_S = 90 * 86_400
KEEP_DAYS = 30
BATCH = 500

_COUNTERS = text(
    "SELECT t.relname, sum(pg_stat_get_xact_blocks_fetched(r.oid)),"
    " min(x.seq_tup_read + coalesce(x.idx_tup_fetch, 0))"
    " FROM pg_stat_xact_user_tables x JOIN pg_class t ON t.oid = x.relid JOIN pg_class r"
    " ON r.oid = t.oid OR r.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = t.oid)"
    " WHERE t.relname IN ('deliveries', 'messages') GROUP BY t.relname"
)
"""Per table: the buffers this transaction asked for (table and indexes), and the rows its
scans read (sequentially, or fetched through an index): this backend's own, not a parallel
worker's (the sweep's plans have none)."""


Rows = list[tuple[object, ...]]


def _mail() -> tuple[Rows, Rows, Rows]:
    """Messages, deliveries and events, as rows for COPY."""
    rnd = random.Random(7)
    cutoff = NOW - KEEP_DAYS * 86_400
    messages: Rows = []
    deliveries: Rows = []
    events: Rows = []
    for seq in range(1, MESSAGES + 1):
        at = NOW - SPAN_S + SPAN_S * seq / MESSAGES
        sender = rnd.choice(AGENTS)
        others = [a for a in AGENTS if a != sender]
        share = rnd.random()
        to = (
            [rnd.choice(others)]
            if share < 0.7
            else rnd.sample(others, 3)
            if share < 0.9
            else others
        )
        kind = {3: "request", 4: "response"}.get(seq % 20, "message")
        reply_to = f"m_{seq - 1:08d}" if kind == "response" else None
        body = "x" * rnd.randrange(20, 400)
        messages.append(
            (seq, f"m_{seq:08d}", sender, json.dumps(to), kind, "s", body, f"t_{seq}", reply_to,
             "normal", False, at, "verified")
        )  # fmt: skip
        for n, name in enumerate(to):
            if at < cutoff:
                state = "read" if seq % 100 == 7 and n == 0 else "acked"
            else:
                state = rnd.choice(["queued", "read"]) if rnd.random() < 0.3 else "acked"
            deliveries.append((name, seq, state, False))
            events.append((name, "message.created", f"m_{seq:08d}", at, "{}"))
    return messages, deliveries, events


async def _load(url: str) -> None:
    messages, deliveries, events = _mail()
    conn = await asyncpg.connect(url)
    try:
        await conn.executemany(
            "INSERT INTO agents (name, created_at) VALUES ($1, 0)", [(a,) for a in AGENTS]
        )
        columns = ["seq", "id", "sender", "recipients", "kind", "subject", "body", "thread_id"]
        columns += ["reply_to", "priority", "must_read", "created_at", "trust"]
        await conn.copy_records_to_table("messages", records=messages, columns=columns)
        await conn.execute("SELECT setval('messages_seq_seq', $1)", MESSAGES)
        columns = ["recipient", "message_seq", "state", "urgent"]
        await conn.copy_records_to_table("deliveries", records=deliveries, columns=columns)
        columns = ["agent", "type", "message_id", "at", "data"]
        await conn.copy_records_to_table("events", records=events, columns=columns)
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()


def _counted(conn: Connection) -> dict[str, tuple[int, int]]:
    return {name: (int(blocks), int(rows)) for name, blocks, rows in conn.execute(_COUNTERS)}


def _batch(conn: Connection, cutoff: Cutoff) -> tuple[int, dict[str, tuple[int, int]]]:
    """One batch of the sweep's mail, and what it read."""
    before = _counted(conn)
    purged = mail.purge_handled(conn, cutoff, BATCH, NOW)
    after = _counted(conn)
    return purged, {k: (after[k][0] - before[k][0], after[k][1] - before[k][1]) for k in after}


async def run() -> Report:
    report = Report(NAME, config={"AGENTPOST_RETENTION_DAYS": str(KEEP_DAYS)})
    with scratch_home(NAME) as home:
        async with scratch_database() as url:
            settings = settings_for(
                home, AGENTPOST_DATABASE_URL=url, AGENTPOST_RETENTION_DAYS=str(KEEP_DAYS)
            )
            office = await PostOffice.open(settings, clock=lambda: NOW)  # migrates
            try:
                log(NAME, f"loading {MESSAGES:,} messages")
                await _load(url)
                log(NAME, "sweeping")
                batches: list[tuple[float, int, dict[str, tuple[int, int]]]] = []
                start = time.perf_counter()
                before = NOW - KEEP_DAYS * 86_400  # as `Mailbox.sweep`: found once a sweep
                cutoff = await office.store.read(lambda c: mail.written_before(c, before))
                while not batches or batches[-1][1] == BATCH:
                    t0 = time.perf_counter()
                    purged, read = await office.store.write(
                        functools.partial(_batch, cutoff=cutoff), lengthy=True
                    )
                    batches.append((time.perf_counter() - t0, purged, read))
                mail_s = time.perf_counter() - start
                start = time.perf_counter()
                await office.mailbox.sweep(batch=BATCH)
                rest_s = time.perf_counter() - start
            finally:
                await office.aclose()
    purged = sum(b[1] for b in batches)
    report.add(
        f"pg_sweep: the mail of {MESSAGES:,} messages, {purged:,} purged in {len(batches)} batches",
        "(reported)",
        f"{mail_s:.2f} s, median batch {median([b[0] for b in batches]) * 1000:.0f} ms",
    )
    for table in ("deliveries", "messages"):
        blocks = [b[2][table][0] for b in batches]
        report.add(
            f"pg_sweep: buffers of {table} a batch (table and indexes), mean / max",
            "(reported)",
            f"{sum(blocks) // len(blocks):,} / {max(blocks):,}",
        )
    rows = [b[2]["deliveries"][1] for b in batches]
    report.add(
        "pg_sweep: rows of deliveries a batch reads, mean / max",
        "(reported)",
        f"{sum(rows) // len(rows):,} / {max(rows):,}",
    )
    report.add(
        "pg_sweep: the rest of the sweep (events and other logs)", "(reported)", f"{rest_s:.2f} s"
    )
    report.data = {"batches": batches, "mail_s": mail_s, "rest_s": rest_s}
    return report
