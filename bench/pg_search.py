"""Scale-out: a search among 50,000 messages on PostgreSQL, with and without the index of words.

A scratch database of the PostgreSQL server at `AGENTPOST_BENCH_POSTGRES` (default
`postgresql://postgres@127.0.0.1:5432/test`), migrated by the store, then loaded with COPY:
50,000 messages of 40 words drawn from 5,000 made-up ones, all to `bench-reader`. Every 2nd
message holds `common`, every 100th `medium`, every 10,000th `rare café`. Each query is the
store's search as the service runs it (the reader's visible mail, newest 20), five times; the
median is reported, with the index of migration 0011, then without it (dropped), then the time
to build it again.
"""

from __future__ import annotations

import random
import time

import asyncpg

from agentpost.store import reading
from agentpost.store.database import Store
from bench.common import Report, log, median, ms
from bench.replica_wake import scratch_database

NAME = "pg_search"
MESSAGES = 50_000
RUNS = 5
QUERIES = (["rare"], ["cafe"], ["medium"], ["common"], ["nowhere"], ["rare", "common"])
INDEX = "ix_messages_search"


def _rows() -> list[tuple[object, ...]]:
    rnd = random.Random(7)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rnd.choice(letters) for _ in range(rnd.randint(3, 9))) for _ in range(5000)]
    rows: list[tuple[object, ...]] = []
    for i in range(MESSAGES):
        body = " ".join(rnd.choice(words) for _ in range(40))
        body += " common" if i % 2 == 0 else ""
        body += " medium" if i % 100 == 0 else ""
        body += " rare café" if i % 10_000 == 0 else ""
        rows.append(
            (f"m_{i:08d}", "bench-writer", '["bench-reader"]', "message", f"subject {i}", body,
             f"t_{i}", "normal", False, float(i), "verified")
        )  # fmt: skip
    return rows


async def _load(url: str) -> str:
    """The index's definition, as the migration made it."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "INSERT INTO agents (name, created_at) VALUES ('bench-writer', 1), ('bench-reader', 1)"
        )
        columns = ["id", "sender", "recipients", "kind", "subject", "body", "thread_id"]
        columns += ["priority", "must_read", "created_at", "trust"]
        await conn.copy_records_to_table("messages", records=_rows(), columns=columns)
        await conn.execute(
            "INSERT INTO deliveries (recipient, message_seq, state, urgent)"
            " SELECT 'bench-reader', seq, 'queued', false FROM messages"
        )
        await conn.execute("ANALYZE")
        query = "SELECT indexdef FROM pg_indexes WHERE indexname = $1"
        return str(await conn.fetchval(query, INDEX))
    finally:
        await conn.close()


async def _searches(url: str) -> dict[str, tuple[int, float]]:
    store = await Store.open(url)
    try:
        out = {}
        for words in QUERIES:
            times, found = [], 0
            for _ in range(RUNS):
                start = time.perf_counter()
                rows = await store.read(
                    lambda c, w=words: reading.search_rows(
                        c, store.dialect, "bench-reader", [], w, 20, store.clock()
                    )
                )
                times.append(time.perf_counter() - start)
                found = len(rows or [])
            out[" ".join(words)] = (found, median(times))
        return out
    finally:
        await store.aclose()


async def _admin(url: str, sql: str) -> float:
    conn = await asyncpg.connect(url)
    try:
        start = time.perf_counter()
        await conn.execute(sql)
        elapsed = time.perf_counter() - start
        await conn.execute("ANALYZE messages")
        return elapsed
    finally:
        await conn.close()


async def run() -> Report:
    report = Report(NAME)
    async with scratch_database() as url:
        store = await Store.open(url)  # migrates
        await store.aclose()
        log(NAME, f"loading {MESSAGES:,} messages")
        definition = await _load(url)
        await _admin(url, "REINDEX INDEX " + INDEX)
        log(NAME, "searching with the index")
        indexed = await _searches(url)
        await _admin(url, "DROP INDEX " + INDEX)
        log(NAME, "searching without it")
        scanned = await _searches(url)
        built = await _admin(url, definition)
    for query, (found, with_index) in indexed.items():
        report.add(
            f"pg_search: `{query}` ({found} found of {MESSAGES:,}), median of {RUNS}",
            "(reported)",
            f"{ms(with_index)} indexed, {ms(scanned[query][1])} without",
        )
    report.add(f"pg_search: building {INDEX} over {MESSAGES:,} messages", "(reported)", ms(built))
    report.data = {"indexed": indexed, "scanned": scanned, "build_s": built}
    return report
