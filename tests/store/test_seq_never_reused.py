"""Migration 0005: on SQLite a `seq` of the mail or of the event log is never handed out twice.

Before it, SQLite took max(seq) + 1, and mail stored after retention purged the newest mail
took seqs that cursors had already passed. The upgrade rebuilds both tables; these tests hold
it to losing nothing, to keeping every index and trigger, and to starting beyond every cursor.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.schema import CreateTable

from agentpost.store import mail, migrate, sqlite
from agentpost.store.database import Store
from agentpost.store.schema import events, messages
from store.test_fulltext import alembic_on, integrity_check
from store.test_mail import put, search

pytestmark = pytest.mark.anyio

LOGS = ("messages", "events")


@contextlib.contextmanager
def opened(path: Path) -> Iterator[sqlite3.Connection]:
    db = sqlite3.connect(path, isolation_level=None)
    try:
        yield db
    finally:
        db.close()


def contents(path: Path) -> dict[str, Any]:
    """Every row of the tables the rebuild touches or leans on, and the indexes and triggers
    of the rebuilt ones, as SQLite holds them."""
    with opened(path) as db:
        rows = {
            table: db.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
            for table in (*LOGS, "deliveries", "messages_fts_cursor")
        }
        rows["indexes and triggers"] = db.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master "
            "WHERE tbl_name IN ('messages', 'events') AND type IN ('index', 'trigger') "
            "ORDER BY name"
        ).fetchall()
        return rows


def autoincrement(path: Path) -> dict[str, bool]:
    with opened(path) as db:
        return {
            table: "AUTOINCREMENT"
            in db.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
            for table in LOGS
        }


def checks(path: Path, *, all_indexed: bool = False) -> list[Any]:
    """What SQLite finds wrong with the file: broken foreign keys or pages; and, once every
    message is indexed, a full-text index that differs from the messages."""
    with opened(path) as db:
        found = db.execute("PRAGMA foreign_key_check").fetchall()
        found += [row for row in db.execute("PRAGMA integrity_check") if row != ("ok",)]
    if not all_indexed:
        return found
    engine = create_engine(f"sqlite:///{path}")
    try:
        with engine.begin() as conn:
            integrity_check(conn)
    finally:
        engine.dispose()
    return found


async def a_post_office(path: Path) -> None:
    """Mail of several kinds at the head revision: read, acked, to many, indexed or not yet."""
    sqlite.prepare_file(path)
    store = await Store.open(f"sqlite:///{path}")
    try:
        first, _ = await put(store, "alice", ["bob", "carol"], "indexed words", subject="plan")
        await put(store, "carol", ["alice"], "urgent words", urgent=True, thread="t1")
        await store.index_for_search()
        await store.write(lambda c: mail.ack(c, "bob", [first], time.time()))
        await put(store, "bob", [], "to the channel", channel="general")
        await put(store, "alice", ["bob"], "still pending", ttl=3600)
    finally:
        await store.aclose()


async def test_the_schema_module_and_the_migrations_both_make_the_logs_autoincrement(
    tmp_path: Path,
) -> None:
    path = tmp_path / "agentpost.db"
    sqlite.prepare_file(path)
    migrate.migrate_sqlite(path)
    assert autoincrement(path) == {"messages": True, "events": True}
    for table in (messages, events):
        assert "AUTOINCREMENT" in str(CreateTable(table).compile(dialect=sqlite_dialect.dialect()))


async def test_a_downgrade_and_the_upgrade_keep_every_row_index_and_trigger(
    tmp_path: Path,
) -> None:
    path = tmp_path / "agentpost.db"
    await a_post_office(path)
    before = contents(path)
    assert len(before["deliveries"]) == 4
    assert len(before["events"]) >= 4

    alembic_on(path, "downgrade", "0004")  # foreign keys on, as on every store connection
    assert autoincrement(path) == {"messages": False, "events": False}
    assert contents(path) == before
    assert checks(path) == []

    alembic_on(path, "upgrade", "head")
    assert autoincrement(path) == {"messages": True, "events": True}
    assert contents(path) == before
    assert checks(path) == []

    store = await Store.open(f"sqlite:///{path}")
    try:
        assert [r.body for r in await search(store, "bob", ["words"])] == ["indexed words"]
        assert [r.body for r in await search(store, "bob", ["indexed"])] == ["indexed words"]
        assert [r.body for r in await search(store, "bob", ["pending"])] == ["still pending"]
    finally:
        await store.aclose()
    assert checks(path, all_indexed=True) == []


async def test_the_upgrade_starts_new_mail_beyond_every_sessions_cursor(tmp_path: Path) -> None:
    """Mail purged under 0004 may have left a cursor beyond the newest message: new mail must
    come after the cursor, or that session would never be told of it."""
    path = tmp_path / "agentpost.db"
    await a_post_office(path)
    alembic_on(path, "downgrade", "0004")
    now = time.time()
    with opened(path) as db:
        newest = db.execute("SELECT max(seq) FROM messages").fetchone()[0]
        db.execute("INSERT INTO agents (name, created_at) VALUES ('bob', ?)", (now,))
        db.execute(
            "INSERT INTO sessions (id, agent, transport, host, started_at, heartbeat_at, "
            "urgent_cursor) VALUES ('s1', 'bob', 'stdio', 'here', ?, ?, ?)",
            (now, now, newest + 40),  # it had seen 40 messages since purged
        )
    migrate.migrate_sqlite(path)  # as the next start does

    store = await Store.open(f"sqlite:///{path}")
    try:
        _, seq = await put(store, "alice", ["bob"], "after the upgrade")
    finally:
        await store.aclose()
    assert seq == newest + 41


async def test_mail_after_every_message_and_event_was_purged_comes_after_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "agentpost.db"
    sqlite.prepare_file(path)
    store = await Store.open(f"sqlite:///{path}")
    try:
        _, gone = await put(store, "alice", ["bob"], "purged soon")
        with opened(path) as db:
            last_event = db.execute("SELECT max(seq) FROM events").fetchone()[0]
        await store.write(lambda c: c.exec_driver_sql("DELETE FROM events"))
        await store.write(lambda c: c.exec_driver_sql("DELETE FROM deliveries"))
        await store.write(lambda c: c.exec_driver_sql("DELETE FROM messages"))
        _, seq = await put(store, "alice", ["bob"], "after the purge")
    finally:
        await store.aclose()
    assert seq == gone + 1
    with opened(path) as db:
        assert db.execute("SELECT min(seq) FROM events").fetchone()[0] > last_event
