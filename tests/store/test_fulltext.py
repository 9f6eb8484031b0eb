"""SQLite's full-text index: taken up in batches after the sends, complete before every search."""

from __future__ import annotations

import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlalchemy import Connection, create_engine, text

from agentpost.store import clearing, database, fulltext, mail, migrate, sqlite
from agentpost.store.database import Store
from store.test_mail import insert, put, search

pytestmark = pytest.mark.anyio


def integrity_check(conn: Connection) -> None:
    """FTS5 compares its index with the messages and raises "malformed" where they differ."""
    conn.exec_driver_sql(
        "INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)"
    )


def test_the_full_text_query_quotes_every_word() -> None:
    assert fulltext.fts_query(['say"hi', "AND", "("]) == '"say""hi" "AND" "("'


async def test_a_send_is_not_indexed_inside_its_own_transaction(lite: Store) -> None:
    _, seq = await put(lite, "alice", ["bob"], "pending words")
    assert await lite.read(fulltext.indexed_up_to) < seq
    assert [r.seq for r in await search(lite, "bob", ["pending"])] == [seq]
    assert await lite.read(fulltext.indexed_up_to) == seq


async def test_mail_is_indexed_soon_after_it_is_sent_without_a_search(lite: Store) -> None:
    _, seq = await put(lite, "alice", ["bob"], "words")
    with anyio.fail_after(10):  # the indexing commits, which wakes whoever waits for any commit
        while True:
            version = lite.version
            if await lite.read(fulltext.indexed_up_to) >= seq:
                break
            await lite.wait_changed(version, timeout=None)
    await lite.write(integrity_check)


async def test_a_search_with_nothing_new_to_index_never_waits_for_the_write_lock(
    lite: Store, tmp_path: Path
) -> None:
    _, seq = await put(lite, "alice", ["bob"], "indexed words")
    await lite.index_for_search()
    other = sqlite3.connect(tmp_path / "agentpost.db", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process writing, for as long as it likes
        with anyio.fail_after(5):  # well short of the 30 s busy timeout a write would wait
            assert [r.seq for r in await search(lite, "bob", ["indexed"])] == [seq]
    finally:
        other.close()


async def test_a_long_backlog_is_indexed_in_several_transactions(
    lite: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fulltext, "BATCH", 2)
    seqs = [(await put(lite, "alice", ["bob"], f"backlog {i}"))[1] for i in range(5)]
    assert await lite.write(fulltext.index_new) is True
    assert await lite.read(fulltext.indexed_up_to) == seqs[1]
    assert len(await search(lite, "bob", ["backlog"])) == 5
    assert await lite.write(fulltext.index_new) is False
    await lite.write(integrity_check)


async def test_mail_stored_after_every_message_was_purged_is_indexed(
    lite: Store,
) -> None:
    """The cursor went back to the newest message left; the next `seq` is beyond both."""
    mid, seq = await put(lite, "alice", ["bob"], "purged words")
    await lite.index_for_search()
    await lite.write(lambda c: mail.ack(c, "bob", [mid], time.time()))
    assert (
        await lite.write(
            lambda c: mail.purge_handled(
                c, mail.written_before(c, time.time() + 1), 100, time.time()
            )
        )
        == 1
    )
    _, again = await put(lite, "alice", ["bob"], "words after the purge")
    assert again > seq  # never handed out again
    assert [r.body for r in await search(lite, "bob", ["words"])] == ["words after the purge"]
    await lite.write(integrity_check)


SEND_AND_EXIT = """
import anyio, sys
sys.path.insert(0, sys.argv[2])
from agentpost.store.database import Store
from store.test_mail import put

async def main():
    store = await Store.open(sys.argv[1])
    await put(store, "alice", ["bob"], "sent by a process that is gone")
    await store.aclose()

anyio.run(main)
"""


async def test_mail_of_a_process_that_exited_before_indexing_it_is_found(lite: Store) -> None:
    tests = Path(__file__).parents[1]
    with anyio.fail_after(60):
        await anyio.run_process([sys.executable, "-c", SEND_AND_EXIT, lite.url, str(tests)])
    found = await search(lite, "bob", ["gone"])
    assert [r.body for r in found] == ["sent by a process that is gone"]


def alembic_on(path: Path, verb: str, revision: str) -> None:
    """Alembic's `verb` to `revision`, on a connection as the store makes them (foreign keys
    on), in one `BEGIN IMMEDIATE` transaction as on start."""
    engine = sqlite.make_engine(path, pooled=False)
    try:
        with engine.connect() as conn, sqlite.transaction(conn, immediate=True):
            getattr(migrate, verb)(conn, revision)
    finally:
        engine.dispose()


def _matches(path: Path, word: str) -> list[int]:
    engine = create_engine(f"sqlite:///{path}")
    try:
        with engine.begin() as conn:
            integrity_check(conn)
            query = text("SELECT rowid FROM messages_fts WHERE messages_fts MATCH :w ORDER BY 1")
            return list(conn.execute(query, {"w": word}).scalars())
    finally:
        engine.dispose()


async def test_mail_indexed_before_the_upgrade_stays_found_and_follows_edits(
    tmp_path: Path,
) -> None:
    path = tmp_path / "agentpost.db"
    sqlite.prepare_file(path)
    sqlite.ensure_wal(path)
    alembic_on(path, "upgrade", "0003")
    old = _store_directly(path, "older words")
    assert _matches(path, "older") == [old]  # the insert trigger of 0001 indexed it

    store = await Store.open(f"sqlite:///{path}")  # upgraded to the head here
    try:
        assert await store.read(migrate.current_revision) == migrate.SCHEMA_HEAD
        assert await store.read(fulltext.indexed_up_to) == old
        await store.write(
            lambda c: c.exec_driver_sql(f"UPDATE messages SET body = 'edited' WHERE seq = {old}")
        )
        _, new = await put(store, "alice", ["bob"], "newer words")
        assert [r.seq for r in await search(store, "bob", ["edited"])] == [old]
        assert [r.seq for r in await search(store, "bob", ["words"])] == [new]
    finally:
        await store.aclose()
    assert _matches(path, "older") == []


async def test_a_downgrade_indexes_what_the_cursor_had_not_reached(tmp_path: Path) -> None:
    path = tmp_path / "agentpost.db"
    sqlite.prepare_file(path)
    migrate.migrate_sqlite(path)
    seq = _store_directly(path, "unindexed words")
    alembic_on(path, "downgrade", "0003")
    assert _matches(path, "unindexed") == [seq]
    newer = _store_directly(path, "newer words")  # and the insert trigger is back
    assert _matches(path, "newer") == [newer]


def _store_directly(path: Path, body: str) -> int:
    """One message stored by plain SQL, as a process of another revision would."""
    engine = sqlite.make_engine(path, pooled=False)
    try:
        with engine.connect() as conn, sqlite.transaction(conn, immediate=True):
            _, seq = insert(conn, time.time(), "alice", ["bob"], body)
        return seq
    finally:
        engine.dispose()


def database_bytes(path: Path) -> bytes:
    """Every byte of the database: its file, and its WAL and shared memory if any are left."""
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))


async def test_words_of_wiped_and_purged_mail_leave_the_database_file(tmp_path: Path) -> None:
    """Searches stopped finding them at once, but FTS5 kept them in its older segments (and in
    its deletion markers), and SQLite in the free space of the pages: a privacy leak for an
    owner who asked for them to be wiped (`clear_on_ack`) or purged (retention)."""
    path = tmp_path / "agentpost.db"
    store = await Store.open(f"sqlite:///{path}")
    try:
        wiped, _ = await put(store, "alice", ["bob"], "zanzibarwiped words " * 1000)
        purged, _ = await put(store, "alice", ["bob"], "quetzalpurged words " * 1000)
        for n in range(50):
            await put(store, "alice", ["bob"], f"other words {n}")
        await store.index_for_search()
        now = time.time()
        await store.write(lambda c: mail.ack(c, "bob", [purged], now))
        assert (
            await store.write(
                lambda c: mail.purge_handled(c, mail.written_before(c, now + 1), 10, now)
            )
            == 1
        )
        await store.write(lambda c: mail.ack(c, "bob", [wiped], now))
        assert await store.write(lambda c: clearing.clear_handled(c, [wiped], now)) == 1
        assert await search(store, "bob", ["zanzibarwiped"]) == []
        await store.purge_wiped()
        assert not await store.read(fulltext.wiped)
        await store.write(integrity_check)
        assert len(await search(store, "bob", ["other"], limit=100)) == 50
    finally:
        await store.aclose()
    held = database_bytes(path)
    assert b"words" in held  # what is kept stays
    assert (held.count(b"zanzibarwiped"), held.count(b"quetzalpurged")) == (0, 0)


async def wiped_words_purged(store: Store) -> None:
    """Until the background has merged every wiped word out of the index."""
    with anyio.fail_after(10):  # the purge commits, which wakes whoever waits for any commit
        while True:
            version = store.version
            if not await store.read(fulltext.wiped):
                return
            await store.wait_changed(version, timeout=None)


async def test_wiped_words_leave_the_index_soon_after_the_wipe_without_a_search(
    lite: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ack that wiped them is news for the sender: the background indexing purges too,
    at most every PURGE_EVERY_S (each purge rewrites the index), then at once when that is up."""
    monkeypatch.setattr(database, "PURGE_EVERY_S", 2.0)  # past INDEX_AFTER_S: throttled
    mid, _ = await put(lite, "alice", ["bob"], "words to wipe")
    await wiped_words_purged(lite)  # a new file is marked as holding some; this was news

    def ack_and_wipe(conn: Connection) -> None:
        mail.ack(conn, "bob", [mid], lite.clock())
        clearing.clear_handled(conn, [mid], lite.clock())

    await lite.write(ack_and_wipe)
    assert await lite.read(fulltext.wiped)
    await wiped_words_purged(lite)  # by the timer, 2 s after the last purge
    await lite.write(integrity_check)


async def test_wiped_words_leave_the_wal_too_while_the_store_stays_open(tmp_path: Path) -> None:
    """A WAL started over keeps the older copies of pages past what is written again: after
    a purge the checkpointer cuts it to nothing, without waiting for the file to be closed."""
    path = tmp_path / "agentpost.db"
    store = await Store.open(f"sqlite:///{path}")
    try:
        mid, _ = await put(store, "alice", ["bob"], "xylophonewiped words " * 1000)
        await store.index_for_search()

        def ack_and_wipe(conn: Connection) -> None:
            mail.ack(conn, "bob", [mid], store.clock())
            clearing.clear_handled(conn, [mid], store.clock())

        held = partial(database_bytes, path)
        await store.write(ack_and_wipe)
        assert b"xylophonewiped" in await anyio.to_thread.run_sync(held)
        await store.purge_wiped()
        with anyio.fail_after(10):
            # The checkpointer's thread tells no one it ran: polled, briefly.
            while b"xylophonewiped" in await anyio.to_thread.run_sync(held):  # noqa: ASYNC110
                await anyio.sleep(0.02)
        assert len(await search(store, "bob", ["words"])) == 0
    finally:
        await store.aclose()


async def test_another_process_writes_between_the_steps_of_a_long_purge(
    lite: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each step of a purge holds the write lock of every process. SQLite has another
    process's writer, waiting for it, try again every so often (at most every 100 ms): with
    the steps back to back it all but never found the lock free, and waited out the whole
    purge (a second on a 200,000-message index, up to its busy timeout on a larger one)."""
    most = 20
    steps: list[float] = []
    first_step, other_wrote = threading.Event(), threading.Event()

    def long_step(conn: Connection) -> bool:  # a step of a large index's merge
        steps.append(time.monotonic())
        first_step.set()
        time.sleep(0.1)
        return len(steps) < most and not other_wrote.is_set()

    def other_process() -> None:
        first_step.wait(10)
        other = sqlite3.connect(tmp_path / "agentpost.db", timeout=30, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("COMMIT")
        finally:
            other.close()
        other_wrote.set()

    monkeypatch.setattr(fulltext, "purge_step", long_step)
    assert await lite.read(fulltext.wiped)  # a new file is marked as holding some
    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(anyio.to_thread.run_sync, other_process))
        await lite.purge_wiped()
    assert len(steps) < most  # it wrote while steps were left


async def test_a_purge_asked_for_while_one_runs_waits_for_it_and_takes_no_step_of_its_own(
    lite: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hourly sweep purges after retention, the background after new mail: at the same
    time, their steps would alternate, each in the other's pause, and another process's
    writer would find the lock taken again whenever it tried."""
    steps: list[str] = []
    in_step, release = threading.Event(), threading.Event()
    real_step = fulltext.purge_step

    def held_step(conn: Connection) -> bool:
        steps.append("step")
        if len(steps) == 1:
            in_step.set()
            release.wait(10)
            return True
        return real_step(conn)

    monkeypatch.setattr(fulltext, "purge_step", held_step)
    runner = lite._sqlite
    assert runner is not None
    assert await lite.read(fulltext.wiped)  # a new file is marked as holding some
    async with anyio.create_task_group() as tg:
        tg.start_soon(lite.purge_wiped)
        await anyio.to_thread.run_sync(in_step.wait, 10)
        tg.start_soon(lite.purge_wiped)  # while the first one's step runs
        for _ in range(50):  # half a second for a step of the second one to be queued
            if runner._jobs.qsize():
                break
            await anyio.sleep(0.01)
        queued = runner._jobs.qsize()
        release.set()
    assert queued == 0
    assert not await lite.read(fulltext.wiped)
    assert len(steps) == 2  # the first purge's two


async def test_an_indexing_asked_for_while_one_runs_waits_for_it_and_takes_no_step_of_its_own(
    lite: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search and the background (or two searches) ask at once: run together, their steps
    would fill each other's pauses, and another process's writer would find the lock taken
    again whenever it tried."""
    monkeypatch.setattr(database, "INDEX_AFTER_S", 3600.0)  # no background indexing meanwhile
    monkeypatch.setattr(fulltext, "BATCH", 2)
    seqs = [(await put(lite, "alice", ["bob"], f"backlog {i}"))[1] for i in range(5)]
    asked: list[str] = []  # the steps asked of the writer, as they are asked
    in_step, release = threading.Event(), threading.Event()
    real_step = fulltext.index_new

    def held_step(conn: Connection) -> bool:
        if not in_step.is_set():
            in_step.set()
            release.wait(10)
        return real_step(conn)

    runner = lite._sqlite
    assert runner is not None
    write = runner.write

    async def asking(fn: Callable[[Connection], Any], **options: Any) -> Any:
        asked.append(getattr(fn, "__name__", ""))
        return await write(fn, **options)

    monkeypatch.setattr(fulltext, "index_new", held_step)
    monkeypatch.setattr(runner, "write", asking)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lite.index_for_search)
        await anyio.to_thread.run_sync(in_step.wait, 10)
        tg.start_soon(lite.index_for_search)  # while the first one's step runs
        for _ in range(50):  # half a second for the second one to ask for a step, if it would
            if len(asked) > 1:
                break
            await anyio.sleep(0.01)
        asked_meanwhile = len(asked)
        release.set()
    assert asked_meanwhile == 1
    assert asked == ["held_step"] * 3  # one indexing of five messages, two at a time
    assert await lite.read(fulltext.indexed_up_to) == seqs[-1]
    await lite.write(integrity_check)


SEND_WHEN_TOLD = """
import anyio, sys
sys.path.insert(0, sys.argv[2])
from agentpost.store.database import Store
from store.test_mail import put

async def main():
    store = await Store.open(sys.argv[1])
    print("ready", flush=True)
    sys.stdin.readline()
    await put(store, "carol", ["bob"], "sent while a backlog was indexed")
    await store.aclose()

anyio.run(main)
"""


async def test_another_process_sends_between_the_steps_of_a_long_backlog_indexing(
    lite: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each step holds the write lock of every process: with the steps back to back, another
    process's send, trying again every so often, all but never found the lock free and
    waited out the whole backlog. The index ends complete, that send's mail in it too."""
    monkeypatch.setattr(database, "INDEX_AFTER_S", 3600.0)  # only the indexing asked for here
    for i in range(3):
        await put(lite, "alice", ["bob"], f"backlog {i}")
    most = 20
    steps: list[bool] = []  # each step: whether the other process's mail was stored before it
    first_step = threading.Event()
    real_step = fulltext.index_new
    sent_before = text("SELECT EXISTS (SELECT 1 FROM messages WHERE sender = 'carol')")

    def long_step(conn: Connection) -> bool:  # a step of a long backlog, BATCH messages
        sent = bool(conn.execute(sent_before).scalar_one())
        steps.append(sent)
        first_step.set()
        if sent or len(steps) == most:
            return real_step(conn)  # the rest of the backlog, and that mail
        time.sleep(0.1)
        return True

    monkeypatch.setattr(fulltext, "index_new", long_step)
    tests = Path(__file__).parents[1]
    command = [sys.executable, "-c", SEND_WHEN_TOLD, lite.url, str(tests)]
    with anyio.fail_after(60):
        async with await anyio.open_process(command) as other:
            assert other.stdin is not None
            assert other.stdout is not None
            assert b"ready" in await other.stdout.receive()
            async with anyio.create_task_group() as tg:
                tg.start_soon(lite.index_for_search)
                await anyio.to_thread.run_sync(first_step.wait, 10)
                await other.stdin.send(b"send\n")
            assert await other.wait() == 0
    assert steps[-1]  # the other process sent between two steps,
    assert len(steps) < most  # while steps were left
    assert await lite.read(fulltext.indexed_up_to) == await lite.read(mail.newest_seq)
    found = await search(lite, "bob", ["backlog"])
    assert len(found) == 4
    await lite.write(integrity_check)
