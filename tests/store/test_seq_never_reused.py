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


def typed_rows(db: sqlite3.Connection, table: str) -> list[tuple[Any, ...]]:
    """Each value with its storage class, as SQLite quotes it: 1, 1.0 and '1' stay apart."""
    columns = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
    values = ", ".join(f"typeof({c}), quote({c})" for c in columns)
    return db.execute(f"SELECT {values} FROM {table} ORDER BY 2, 4").fetchall()


def contents(path: Path) -> dict[str, Any]:
    """Every row of the tables the rebuild touches or leans on, and the indexes and triggers
    of the rebuilt ones, as SQLite holds them."""
    with opened(path) as db:
        rows = {
            table: typed_rows(db, table) for table in (*LOGS, "deliveries", "messages_fts_cursor")
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
    at_head = contents(path)
    # 0014 adds a column and remakes the index's triggers (0015 touches only tasks and their
    # history, and 0018 too; 0016 and 0017 agent_limits): the schema 0005 knew is 0013's.
    alembic_on(path, "downgrade", "0013")
    before = contents(path)
    assert len(before["deliveries"]) == 4
    assert len(before["events"]) >= 4

    alembic_on(path, "downgrade", "0004")  # foreign keys on, as on every store connection
    assert autoincrement(path) == {"messages": False, "events": False}
    assert contents(path) == before
    assert checks(path) == []

    alembic_on(path, "upgrade", "head")
    assert autoincrement(path) == {"messages": True, "events": True}
    assert contents(path) == at_head
    assert checks(path) == []

    store = await Store.open(f"sqlite:///{path}")
    try:
        assert [r.body for r in await search(store, "bob", ["words"])] == ["indexed words"]
        assert [r.body for r in await search(store, "bob", ["indexed"])] == ["indexed words"]
        assert [r.body for r in await search(store, "bob", ["pending"])] == ["still pending"]
    finally:
        await store.aclose()
    assert checks(path, all_indexed=True) == []


def with_cursors(path: Path, beyond: int, *, behind: int | None = None) -> tuple[int, int]:
    """Bob's session and webhook with cursors `beyond` the newest message and event (and a
    session `behind`, at that seq, if asked); returns the newest message's and event's seqs."""
    now = time.time()
    with opened(path) as db:
        newest_message = db.execute("SELECT max(seq) FROM messages").fetchone()[0]
        newest_event = db.execute("SELECT max(seq) FROM events").fetchone()[0]
        db.execute("INSERT INTO agents (name, created_at) VALUES ('bob', ?)", (now,))
        cursors = [("beyond", newest_message + beyond)]
        if behind is not None:
            cursors.append(("behind", behind))
        db.executemany(
            "INSERT INTO sessions (id, agent, transport, host, started_at, heartbeat_at, "
            "urgent_cursor) VALUES (?, 'bob', 'stdio', 'here', ?, ?, ?)",
            [(name, now, now, cursor) for name, cursor in cursors],
        )
        db.execute(
            "INSERT INTO webhooks (id, agent, url, events, secret, created_at, cursor) "
            "VALUES ('w1', 'bob', 'https://example.org/', '[]', 's', ?, ?)",
            (now, newest_event + beyond),
        )
    return newest_message, newest_event


async def test_the_upgrade_starts_beyond_every_cursor_the_database_holds(tmp_path: Path) -> None:
    """Rows purged under 0004 may have left a cursor beyond the newest row: new mail and events
    must come after it, or a session (a webhook) would never be told of them."""
    path = tmp_path / "agentpost.db"
    await a_post_office(path)
    alembic_on(path, "downgrade", "0004")
    # Say 40 messages and their events went since the cursors passed them.
    newest_message, newest_event = with_cursors(path, 40)
    migrate.migrate_sqlite(path)  # as the next start does

    store = await Store.open(f"sqlite:///{path}")
    try:
        _, seq = await put(store, "alice", ["bob"], "after the upgrade")
    finally:
        await store.aclose()
    assert seq == newest_message + 41
    with opened(path) as db:
        first_event = db.execute("SELECT min(seq) FROM events WHERE seq > ?", (newest_event,))
        assert first_event.fetchone()[0] == newest_event + 41


async def test_a_downgrade_moves_cursors_back_to_the_newest_row_left(tmp_path: Path) -> None:
    """Under 0004 SQLite takes max(seq) + 1 again: a cursor beyond the newest row would skip
    what comes next."""
    path = tmp_path / "agentpost.db"
    await a_post_office(path)
    newest_message, newest_event = with_cursors(path, 5, behind=1)
    alembic_on(path, "downgrade", "0004")
    with opened(path) as db:
        cursors = db.execute("SELECT id, urgent_cursor FROM sessions ORDER BY id").fetchall()
        assert cursors == [("behind", 1), ("beyond", newest_message)]
        assert db.execute("SELECT cursor FROM webhooks").fetchone()[0] == newest_event


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
