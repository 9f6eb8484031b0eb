"""Figure 2: an inbox page of 20 out of 1,000,000 stored messages, through the services.

The database is built once, fast, and cached under bench/.cache/ (keyed by the schema head and
a digest of the migrations and this generator), then copied into each run's scratch
home, so the marking variant never changes the cache.

The build migrates an empty file with the store's own migration path, then bulk-inserts with the
stdlib `sqlite3` driver: secondary indexes and the FTS triggers are dropped during the load and
restored after it, and the FTS index is rebuilt from the content table (`'rebuild'`) with its
cursor at the newest message, then checked (`'integrity-check'`), so it is exactly what
indexing the messages as they came would have produced.

The messages are direct mail to 500 agents over 30 days. The measured agent, `bench-reader`,
receives every 100th message (10,000 in all): the newest 1,000 are unread (the default cap on
unacknowledged mail), 500 read, the rest acknowledged; the other agents' mail is 90%
acknowledged, 7% read and 3% unread.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentpost.domain.ids import sortable_id
from agentpost.services import PostOffice
from agentpost.store import migrate, sqlite
from bench.common import (
    BENCH_DIR,
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

NAME = "inbox"
TARGET_S = 0.002
N_MESSAGES = 1_000_000
N_AGENTS = 500
READER = "bench-reader"
READER_EVERY = 100
READER_UNREAD = 1000
READER_READ = 500
PAGE = 20
PEEK_CALLS = 400
WARMUP = 20
MARK_WARMUP = 2
MARK_CALLS = READER_UNREAD // PAGE - MARK_WARMUP - 3  # each marks a page; never run dry
BUILD_VERSION = "3"
"""Bump when the generator below changes, so the cache is rebuilt."""

CACHE = BENCH_DIR / ".cache"
WORDS = (
    "review",
    "deploy",
    "migration",
    "index",
    "query",
    "schema",
    "release",
    "branch",
    "commit",
    "test",
    "fix",
    "bug",
    "design",
    "agent",
    "inbox",
    "message",
    "thread",
    "channel",
    "build",
    "lint",
    "type",
    "check",
    "merge",
    "rebase",
    "conflict",
    "note",
    "please",
    "thanks",
    "done",
    "blocked",
    "waiting",
    "ready",
    "ship",
    "rollback",
    "config",
    "limit",
    "rate",
    "cap",
    "wal",
    "fts",
    "sqlite",
    "postgres",
    "store",
    "service",
    "server",
    "client",
    "tool",
    "result",
    "error",
    "latency",
    "throughput",
)


def cache_key(n: int = N_MESSAGES) -> str:
    digest = hashlib.sha256()
    for path in sorted((migrate.MIGRATIONS / "versions").glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    digest.update(f"{BUILD_VERSION}/{n}/{N_AGENTS}".encode())
    return f"{migrate.SCHEMA_HEAD}-{digest.hexdigest()[:12]}"


def cached_database(n: int = N_MESSAGES, *, kind: str = "inbox-1m", who: str = NAME) -> Path:
    """The built database of `n` messages for the current schema, building it first if needed.
    `kind` names the cached files (a newer build replaces those of its kind), `who` the log's
    benchmark."""
    path = CACHE / f"{kind}-{cache_key(n)}.db"
    if path.exists():
        log(who, f"using cached {path.relative_to(BENCH_DIR.parent)}")
        return path
    CACHE.mkdir(exist_ok=True)
    (CACHE / ".gitignore").write_text("*\n")
    for old in CACHE.glob(f"{kind}-*.db*"):
        log(who, f"removing stale {old.name}")
        old.unlink()
    tmp = path.with_name(path.name + ".building")
    for suffix in ("", "-wal", "-shm", ".migrate-lock"):
        Path(f"{tmp}{suffix}").unlink(missing_ok=True)
    t0 = time.perf_counter()
    build(tmp, n)
    log(who, f"built {n:,} messages in {time.perf_counter() - t0:.0f} s")
    Path(f"{tmp}.migrate-lock").unlink(missing_ok=True)
    tmp.rename(path)
    return path


def _agents() -> list[str]:
    return [f"agent-{i:03d}" for i in range(N_AGENTS - 1)] + [READER]


def _rows(now: float, n: int = N_MESSAGES) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...]]]:
    """(message row, delivery row) for every one of `n` messages, oldest first."""
    rng = random.Random(20260728)
    others = _agents()[:-1]
    projects = ["web", "api", "infra", "docs", "mobile"]
    bodies = [" ".join(rng.choices(WORDS, k=rng.randint(8, 60))) for _ in range(4096)]
    start = now - 30 * 86400
    step = 30 * 86400 / n
    reader_total = n // READER_EVERY
    reader_seen = 0
    for i in range(n):
        seq = i + 1
        created = start + i * step
        if i % READER_EVERY == 0:
            recipient = READER
            reader_seen += 1
            left = reader_total - reader_seen  # how many of its messages are newer
            if left < READER_UNREAD:
                state = "queued"
            elif left < READER_UNREAD + READER_READ:
                state = "read"
            else:
                state = "acked"
        else:
            recipient = others[rng.randrange(len(others))]
            position = i / n
            state = "acked" if position < 0.90 else "read" if position < 0.97 else "queued"
        sender = others[rng.randrange(len(others))]
        mid = sortable_id("m", now=created)
        urgent = rng.random() < 0.02
        message = (
            seq,
            mid,
            sender,
            json.dumps([recipient]),
            None,
            "message",
            f"{projects[i % len(projects)]}: update {i % 997}",
            bodies[i % len(bodies)],
            None,
            mid,
            None,
            "urgent" if urgent else "normal",
            0,
            created,
            None,
            "verified",
        )
        read_at = created + 60 if state in ("read", "acked") else None
        acked_at = created + 120 if state == "acked" else None
        delivery = (recipient, seq, state, int(urgent), None, read_at, acked_at, None)
        yield message, delivery


def build(path: Path, n: int = N_MESSAGES) -> None:
    """`n` messages (at least 150,000: the reader's unread are its newest 1,000 of n / 100)."""
    sqlite.prepare_file(path)
    migrate.migrate_sqlite(path)  # the store's own migration path (Alembic, as on first start)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA cache_size=-1000000")  # 1 GB: the indexes are built in memory
        conn.execute("PRAGMA temp_store=MEMORY")
        conn.execute("BEGIN")
        deferred = conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND ("
            " (type = 'index' AND tbl_name IN ('messages', 'deliveries'))"
            " OR (type = 'trigger' AND name LIKE 'messages_fts_%'))"
        ).fetchall()
        for kind, name, _ in deferred:
            conn.execute(f"DROP {kind.upper()} {name}")
        now = time.time()
        conn.executemany(
            "INSERT INTO agents (name, description, project, capabilities, trust, created_at)"
            " VALUES (?, '', ?, '[]', 'verified', ?)",
            [(name, "bench", now - 31 * 86400) for name in _agents()],
        )
        batch_m: list[tuple[Any, ...]] = []
        batch_d: list[tuple[Any, ...]] = []

        def flush() -> None:
            conn.executemany(
                "INSERT INTO messages (seq, id, sender, recipients, channel, kind, subject, body,"
                " data, thread_id, reply_to, priority, must_read, created_at, expires_at, trust)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                batch_m,
            )
            conn.executemany(
                "INSERT INTO deliveries (recipient, message_seq, state, urgent, expires_at,"
                " read_at, acked_at, expired_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                batch_d,
            )
            batch_m.clear()
            batch_d.clear()

        for done, (message, delivery) in enumerate(_rows(now, n), 1):
            batch_m.append(message)
            batch_d.append(delivery)
            if len(batch_m) >= 50_000:
                flush()
                if done % 200_000 == 0:
                    log(NAME, f"  {done:,} rows")
        flush()
        log(NAME, "  indexes")
        for kind, _, sql in deferred:
            if kind == "index":
                conn.execute(sql)
        log(NAME, "  full-text index")
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")
        # A rebuilt index holds no word of wiped mail: nothing for the store to purge.
        conn.execute(
            "UPDATE messages_fts_cursor SET seq = (SELECT max(seq) FROM messages), purge = 0"
        )
        for kind, _, sql in deferred:
            if kind == "trigger":
                conn.execute(sql)
        conn.execute("COMMIT")
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")
        conn.execute("PRAGMA journal_mode=WAL")
        _check(conn, n)
    finally:
        conn.close()


def _check(conn: sqlite3.Connection, n: int) -> None:
    (messages,) = conn.execute("SELECT count(*) FROM messages").fetchone()
    (deliveries,) = conn.execute("SELECT count(*) FROM deliveries").fetchone()
    (unread,) = conn.execute(
        "SELECT count(*) FROM deliveries WHERE recipient = ? AND state = 'queued'", (READER,)
    ).fetchone()
    (hits,) = conn.execute(
        "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'rollback'"
    ).fetchone()
    (truth,) = conn.execute(
        "SELECT count(*) FROM messages WHERE ' ' || body || ' ' LIKE '% rollback %'"
    ).fetchone()
    if (messages, deliveries, unread) != (n, n, READER_UNREAD) or hits != truth:
        raise RuntimeError(f"bad build: {messages=} {deliveries=} {unread=} {hits=} {truth=}")


def _sql_floor(path: Path, calls: int) -> list[float]:
    """The page and the unread count in plain SQL (stdlib sqlite3): the floor under the services."""
    conn = sqlite3.connect(path, isolation_level=None)
    times = []
    try:
        for _ in range(calls):
            t0 = time.perf_counter()
            now = time.time()
            conn.execute("BEGIN")
            conn.execute(
                "SELECT m.*, d.state FROM messages m JOIN deliveries d ON d.message_seq = m.seq"
                " WHERE d.recipient = ? AND d.state IN ('queued')"
                " AND (d.expires_at IS NULL OR d.expires_at > ?)"
                " ORDER BY d.message_seq LIMIT ?",
                (READER, now, PAGE),
            ).fetchall()
            conn.execute(
                "SELECT count(*) FROM deliveries WHERE recipient = ? AND state = 'queued'"
                " AND (expires_at IS NULL OR expires_at > ?)",
                (READER, now),
            ).fetchall()
            conn.execute("COMMIT")
            times.append(time.perf_counter() - t0)
    finally:
        conn.close()
    return times


async def run() -> Report:
    report = Report(NAME, config=dict(RAISED_LIMITS))
    source = cached_database()
    with scratch_home(NAME) as home:
        t0 = time.perf_counter()
        db = home / "agentpost.db"
        shutil.copyfile(source, db)
        log(
            NAME,
            f"copied the database ({db.stat().st_size / 1e6:.0f} MB) in "
            f"{time.perf_counter() - t0:.1f} s",
        )
        floor = _sql_floor(db, PEEK_CALLS)
        office = await PostOffice.open(settings_for(home))
        try:
            caller = await office.presence.ensure_agent(READER)
            for _ in range(WARMUP):
                await office.mailbox.inbox(caller, limit=PAGE, peek=True)
            peek: list[float] = []
            for _ in range(PEEK_CALLS):
                t = time.perf_counter()
                page = await office.mailbox.inbox(caller, limit=PAGE, peek=True)
                peek.append(time.perf_counter() - t)
            expect(len(page.messages) == PAGE, f"a page of {len(page.messages)}")
            expect(page.unread == READER_UNREAD, f"{page.unread} unread")
            for _ in range(MARK_WARMUP):
                await office.mailbox.inbox(caller, limit=PAGE)
            marking: list[float] = []
            for _ in range(MARK_CALLS):
                t = time.perf_counter()
                page = await office.mailbox.inbox(caller, limit=PAGE)
                marking.append(time.perf_counter() - t)
                expect(len(page.messages) == PAGE, f"a page of {len(page.messages)}")
            left = READER_UNREAD - PAGE * (MARK_WARMUP + MARK_CALLS)
            expect(page.unread == left, f"{page.unread} unread, not {left}")
            stored = await office.store.read(
                lambda conn: conn.exec_driver_sql("SELECT count(*) FROM messages").scalar_one()
            )
        finally:
            await office.aclose()

    where = f"{stored:,} stored, {READER_UNREAD:,} unread"
    report.add(
        f"inbox page of {PAGE}, peek, services ({where})",
        f"≤ {ms(TARGET_S)} median",
        f"{ms(median(peek))} (p99 {ms(pct(peek, 99))})",
        median(peek) <= TARGET_S,
    )
    report.add(
        f"inbox page of {PAGE}, marking read, services (a write transaction)",
        f"≤ {ms(TARGET_S)} median",
        f"{ms(median(marking))} (p99 {ms(pct(marking, 99))})",
        median(marking) <= TARGET_S,
    )
    report.add(
        "the same page + unread count in plain sqlite3 (the floor)",
        "(reported)",
        f"{ms(median(floor))} (p99 {ms(pct(floor, 99))})",
    )
    report.notes.append(
        f"{N_MESSAGES:,} messages to {N_AGENTS} agents, cached in bench/.cache/; the reader "
        f"holds {N_MESSAGES // READER_EVERY:,}; medians of {PEEK_CALLS} peek and {MARK_CALLS} "
        "marking calls"
    )
    report.data = {"peek_s": peek, "marking_s": marking, "sql_floor_s": floor}
    return report
