"""Waking only the waiters a commit concerns: per-agent watches, and everyone for other processes.

Waits are bounded by `anyio.fail_after`; "not woken" is read with `wait(0)`, which answers at
once whether a wake-up is pending, so no test sleeps to prove that nothing happened.
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from sqlalchemy import Connection

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.store import agents, database, mail, sqlite, wakeups
from agentpost.store.database import Store
from agentpost.store.schema import rate_windows
from agentpost.store.sqlite_runner import SqliteRunner
from agentpost.store.wakeups import Wakeups
from store.test_mail import insert, put
from store.test_sqlite_runner import insert_key

pytestmark = pytest.mark.anyio


# -- the registry ----------------------------------------------------------------------------------


async def test_news_for_an_agent_wakes_that_agents_watches_only() -> None:
    hub = Wakeups()
    bob, bob_too, carol = hub.watch("bob"), hub.watch("bob"), hub.watch("carol")
    hub.publish({"bob": 1, "dave": 1})
    assert await bob.wait(0) is True
    assert await bob_too.wait(0) is True
    assert await carol.wait(0) is False


async def test_a_wake_up_between_the_look_and_the_wait_is_not_lost() -> None:
    hub = Wakeups()
    with hub.watch("bob") as news:
        # the waiter has looked and found nothing; the news lands before it waits
        hub.publish({"bob": 1})
        with anyio.fail_after(5):
            assert await news.wait(None) is True


async def test_each_wake_up_ends_one_wait() -> None:
    hub = Wakeups()
    news = hub.watch("bob")
    hub.publish({"bob": 1})
    hub.publish({"bob": 1})
    assert await news.wait(0) is True
    assert await news.wait(0) is False


async def test_a_blocked_wait_returns_when_its_agent_has_news() -> None:
    hub = Wakeups()
    news = hub.watch("bob")
    woken: list[bool] = []

    async def waiter() -> None:
        woken.append(await news.wait(None))

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        hub.publish({"carol": 1})
        await anyio.wait_all_tasks_blocked()
        assert woken == []
        hub.publish({"bob": 1})
    assert woken == [True]


async def test_a_wait_that_times_out_says_it_was_not_woken() -> None:
    with Wakeups().watch("bob") as news, anyio.fail_after(5):
        assert await news.wait(0.01) is False


async def test_another_processs_commit_wakes_every_watch() -> None:
    hub = Wakeups()
    bob, carol, anyone = hub.watch("bob"), hub.watch("carol"), hub.watch(None)
    hub.wake_all()
    assert [await w.wait(0) for w in (bob, carol, anyone)] == [True, True, True]


async def test_a_watch_of_any_news_wakes_for_commits_that_concerned_someone() -> None:
    hub = Wakeups()
    anyone = hub.watch(None)
    hub.publish({})
    assert await anyone.wait(0) is False
    hub.publish({"bob": 1})
    assert await anyone.wait(0) is True


async def test_a_watch_of_any_news_keeps_whom_the_commits_since_its_last_look_concerned() -> None:
    hub = Wakeups()
    anyone = hub.watch(None)
    hub.publish({"bob": 1})
    hub.publish({"carol": 3, "bob": 2})
    assert anyone.reach() == {"bob": 2, "carol": 3}  # each with its newest event
    assert anyone.reach() == {}  # taken: starts afresh


async def test_after_another_processs_commit_a_watch_cannot_tell_whom_it_concerned() -> None:
    hub = Wakeups()
    anyone = hub.watch(None)
    hub.publish({"bob": 1})
    hub.wake_all()
    hub.publish({"carol": 1})
    assert anyone.reach() is None
    hub.publish({"carol": 1})
    assert anyone.reach() == {"carol": 1}


async def test_a_roused_agents_watches_wake_and_a_watch_of_any_news_hears_no_news() -> None:
    """A key revoked wakes what its agent holds open, to look at its standing; push and the
    webhooks, watching everyone's news, would else tell of news there is none of."""
    hub = Wakeups()
    alice, anyone = hub.watch("alice"), hub.watch(None)
    hub.publish({"alice": 0})  # what `rouse` notes
    assert await alice.wait(0) is True
    assert await anyone.wait(0) is False
    hub.publish({"alice": 0, "bob": 4})
    assert anyone.reach() == {"bob": 4}


async def test_a_closed_watch_is_forgotten() -> None:
    hub = Wakeups()
    with hub.watch("bob") as news:
        assert hub.watching("bob") == 1
    assert hub.watching("bob") == 0
    hub.publish({"bob": 1})
    assert await news.wait(0) is False


async def test_a_watch_following_a_session_hears_the_news_of_its_name_at_the_time() -> None:
    hub = Wakeups()
    name = ["session-1"]
    news = hub.watch_following(lambda: name[0])
    hub.publish({"bob": 1})
    assert await news.wait(0) is False
    name[0] = "bob"  # the session took another name
    hub.publish({"session-1": 1})
    assert await news.wait(0) is False
    hub.publish({"bob": 1})
    assert await news.wait(0) is True
    hub.wake_all()
    assert await news.wait(0) is True
    news.close()
    hub.publish({"bob": 1})
    assert await news.wait(0) is False


async def test_a_wait_is_bounded_by_the_poll_where_other_processes_go_unheard() -> None:
    with Wakeups(poll_s=0.01).watch("bob") as news, anyio.fail_after(5):
        assert await news.wait(None) is False


# -- the store -------------------------------------------------------------------------------------


async def test_a_delivery_wakes_its_recipients_and_nobody_else(store: Store) -> None:
    bob, carol, dave = store.watch("bob"), store.watch("carol"), store.watch("dave")
    anyone = store.watch(None)
    await put(store, "alice", ["bob", "carol"])
    assert [await w.wait(0) for w in (bob, carol, dave, anyone)] == [True, True, False, True]


async def test_reading_mail_wakes_its_sender_who_gets_the_receipt(store: Store) -> None:
    _, seq = await put(store, "alice", ["bob"])
    alice, bob = store.watch("alice"), store.watch("bob")
    await store.write(lambda c: mail.mark_read(c, "bob", [seq], store.clock()))
    assert await alice.wait(0) is True
    assert await bob.wait(0) is False


async def test_a_commit_without_news_wakes_no_watch_but_every_commit_waiters(
    store: Store,
) -> None:
    bob, anyone = store.watch("bob"), store.watch(None)
    before = store.version
    await store.write(lambda c: agents.create_agent(c, "bob", now=store.clock()))
    assert await bob.wait(0) is False
    assert await anyone.wait(0) is False
    with anyio.fail_after(5):
        assert await store.wait_changed(before, timeout=5) > before


async def test_a_refused_write_wakes_nobody_and_spares_its_neighbours(store: Store) -> None:
    class Refused(Exception):
        pass

    def refused(conn: Connection) -> None:
        wakeups.concern(conn, [("carol", 1)])
        raise Refused

    def delivered(conn: Connection) -> None:
        wakeups.concern(conn, [("bob", 1)])

    bob, carol = store.watch("bob"), store.watch("carol")
    refusals: list[Exception] = []

    async def attempt() -> None:
        try:
            await store.write(refused)
        except Refused as exc:
            refusals.append(exc)

    async with anyio.create_task_group() as tg:  # together, so SQLite's writer batches them
        for _ in range(3):
            tg.start_soon(attempt)
            tg.start_soon(store.write, delivered)
    assert len(refusals) == 3
    assert await bob.wait(0) is True
    assert await carol.wait(0) is False


async def test_a_write_answers_its_caller_before_it_wakes_the_watches(store: Store) -> None:
    """The caller's answer is on the way first; a push its commit set off queues behind it."""
    order: list[str] = []
    bob = store.watch("bob")

    async def watching() -> None:
        await bob.wait(10)
        order.append("watch woken")

    async def writing() -> None:
        await put(store, "alice", ["bob"])
        order.append("writer answered")

    async with anyio.create_task_group() as tg:
        tg.start_soon(watching)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(writing)
    assert order == ["writer answered", "watch woken"]


# -- other processes (SQLite: the file is shared) -----------------------------------------------

INSERT_KEY = "INSERT INTO rate_windows (key, window_start, count) VALUES (?, 0, 1)"
FOREIGN_COMMIT = (
    "import sqlite3, sys\n"
    "conn = sqlite3.connect(sys.argv[1], timeout=30)\n"
    f"conn.execute({INSERT_KEY!r}, (sys.argv[2],))\n"
    "conn.commit()\n"
)


def commit_elsewhere(path: Path, key: str) -> None:
    subprocess.run([sys.executable, "-c", FOREIGN_COMMIT, str(path), key], check=True)


async def test_a_commit_of_another_process_wakes_every_watch(lite: Store) -> None:
    assert lite.path is not None
    bob, carol = lite.watch("bob"), lite.watch("carol")
    await anyio.to_thread.run_sync(commit_elsewhere, lite.path, "elsewhere")
    with anyio.fail_after(10):
        assert await bob.wait(None) is True
        assert await carol.wait(None) is True


async def test_a_foreign_commit_taken_in_with_a_local_one_still_wakes_everyone(
    lite: Store,
) -> None:
    """The race: another process commits between this process's commit and the moment the
    change signal reads the file for it. The signal's reading then takes in both commits as
    this process's own; the writer's look for foreign commits must still wake everyone. (The
    window is widest when the commit is the writer thread's: it is handed to the loop after.)"""
    assert lite.path is not None
    carol = lite.watch("carol")  # the local commit concerns bob only
    raw = sqlite3.connect(lite.path, timeout=30)

    def local(conn: Connection) -> None:
        insert(conn, lite.clock(), "alice", ["bob"], "hello")

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(lite.write, local, lengthy=True))
            await anyio.wait_all_tasks_blocked()  # submitted: the writer commits on its own
            # Hold the event loop (no await) until the local commit is in the file, so the
            # loop handles that commit's wake-ups only after the foreign commit below.
            deadline = time.monotonic() + 10
            while not raw.execute("SELECT count(*) FROM messages").fetchone()[0]:
                assert time.monotonic() < deadline, "the local commit never landed"
            time.sleep(0.05)  # noqa: ASYNC251 - the writer hands the commit to the loop right after
            raw.execute(INSERT_KEY, ("x",))
            raw.commit()
        with anyio.fail_after(10):
            assert await carol.wait(None) is True
    finally:
        raw.close()


async def test_a_stream_of_own_commits_looks_for_other_commits_only_once_it_stops(
    lite: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each write looks for other processes' commits itself; a look between two of them would
    only be work done twice. Once the stream stops, a look covers the last commit's reading of
    the file, once that is LOOK_AFTER_S old."""
    asked: list[float] = []
    look_there, look_here = SqliteRunner.look_for_foreign, SqliteRunner.look_here

    def counted_there(runner: SqliteRunner) -> None:
        asked.append(time.monotonic())
        look_there(runner)

    def counted_here(runner: SqliteRunner) -> bool | None:
        asked.append(time.monotonic())
        return look_here(runner)

    monkeypatch.setattr(SqliteRunner, "look_for_foreign", counted_there)
    monkeypatch.setattr(SqliteRunner, "look_here", counted_here)
    monkeypatch.setattr(database, "LOOK_AFTER_S", 0.2)
    await put(lite, "alice", ["bob"])
    await anyio.sleep(0.5)  # whatever the opening and the first write asked for is done
    asked.clear()
    for _ in range(15):  # 0.3 s of writes, never 0.2 s apart
        await put(lite, "alice", ["bob"])
        await anyio.sleep(0.02)
    stopped = time.monotonic()
    assert asked == []
    await anyio.sleep(0.5)
    assert asked  # (the full-text indexing's own commit may ask for one more)
    assert asked[0] >= stopped + 0.15


async def test_a_commit_elsewhere_while_a_write_here_waits_for_the_lock_wakes_every_watch(
    lite: Store,
) -> None:
    """Meanwhile the file's events wait (`ChangeSignal.writing`): the write's own look for
    other commits is what wakes everyone."""
    assert lite.path is not None
    carol = lite.watch("carol")  # the local commit concerns bob only
    raw = sqlite3.connect(lite.path, timeout=30, isolation_level=None)
    try:
        raw.execute("BEGIN IMMEDIATE")
        raw.execute(INSERT_KEY, ("elsewhere",))
        async with anyio.create_task_group() as tg:
            tg.start_soon(put, lite, "alice", ["bob"])
            await anyio.wait_all_tasks_blocked()  # the write waits for the lock
            raw.execute("COMMIT")
        with anyio.fail_after(10):
            assert await carol.wait(None) is True
    finally:
        raw.close()


async def test_the_writer_tells_another_connections_commit_from_its_own(tmp_path: Path) -> None:
    path = tmp_path / "agentpost.db"
    await (await Store.open(f"sqlite:///{path}")).aclose()  # the schema
    concerned: list[wakeups.Reach] = []
    foreign = threading.Event()
    runner = SqliteRunner(path, on_commit=concerned.append, on_foreign=foreign.set)
    raw = sqlite3.connect(path, timeout=30)

    def local(key: str) -> Callable[[Connection], None]:
        def tx(conn: Connection) -> None:
            conn.execute(rate_windows.insert().values(key=key, window_start=0.0, count=1))
            wakeups.concern(conn, [("bob", 1)])

        return tx

    try:
        await runner.write(local("a"))
        assert concerned == [{"bob": 1}]
        runner.look_for_foreign()
        await runner.write(local("b"))  # queued behind the look: the look is done by then
        assert not foreign.is_set()  # our own commits are not another process's

        raw.execute(INSERT_KEY, ("c",))
        raw.commit()
        runner.look_for_foreign()
        assert await anyio.to_thread.run_sync(foreign.wait, 10)

        foreign.clear()
        raw.execute(INSERT_KEY, ("d",))
        raw.commit()
        await runner.write(local("e"))  # the next write transaction looks too
        assert foreign.is_set()
    finally:
        raw.close()
        await anyio.to_thread.run_sync(runner.close)


async def schema_file(tmp_path: Path) -> Path:
    path = tmp_path / "agentpost.db"
    await (await Store.open(f"sqlite:///{path}")).aclose()
    return path


async def test_a_batch_that_cannot_begin_leaves_the_look_for_foreign_commits_working(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch takes in the looks queued behind its first write (its own look covers them).
    When another process holds the write lock past the busy timeout, the batch never begins and
    never looks: a foreign commit after that must still be seen."""
    path = await schema_file(tmp_path)
    monkeypatch.setattr(sqlite, "BUSY_TIMEOUT_MS", 100)  # a begin is refused in 0.1 s
    foreign, resume = threading.Event(), threading.Event()

    def on_foreign() -> None:
        foreign.set()
        resume.wait(10)  # holds the writer: what is queued meanwhile is taken in as one batch

    runner = SqliteRunner(path, on_commit=lambda _: None, on_foreign=on_foreign)
    raw = sqlite3.connect(path, timeout=30, isolation_level=None)
    refused: list[ErrorCode] = []

    async def refused_write() -> None:
        with pytest.raises(AgentpostError) as caught:
            await runner.write(insert_key("refused"))
        refused.append(caught.value.code)

    try:
        await runner.write(insert_key("local"))  # the writer has its baseline: it looked
        raw.execute(INSERT_KEY, ("first",))
        runner.look_for_foreign()
        assert await anyio.to_thread.run_sync(foreign.wait, 10)  # the writer is held now
        foreign.clear()
        raw.execute("BEGIN IMMEDIATE")  # another process takes the write lock
        async with anyio.create_task_group() as tg:
            tg.start_soon(refused_write)
            await anyio.wait_all_tasks_blocked()  # the write is queued
            runner.look_for_foreign()  # queued behind it: its batch takes the look in
            resume.set()
        assert refused == [ErrorCode.UNAVAILABLE]
        raw.execute(INSERT_KEY, ("second",))
        raw.execute("COMMIT")
        runner.look_for_foreign()
        assert await anyio.to_thread.run_sync(foreign.wait, 10)
    finally:
        resume.set()
        raw.close()
        await anyio.to_thread.run_sync(runner.close)


async def test_a_look_that_fails_wakes_everyone_and_the_writer_carries_on(tmp_path: Path) -> None:
    path = await schema_file(tmp_path)
    foreign = threading.Event()
    runner = SqliteRunner(path, on_commit=lambda _: None, on_foreign=foreign.set)
    refusals: list[str] = []

    def refuse_one_look(action: int, arg1: str | None, *_: object) -> int:
        if action == sqlite3.SQLITE_PRAGMA and arg1 == "data_version" and not refusals:
            refusals.append(arg1)
            return sqlite3.SQLITE_DENY  # the look raises sqlite3.DatabaseError, not busy
        return sqlite3.SQLITE_OK

    def install(conn: Connection) -> None:
        raw = conn.connection.driver_connection
        assert isinstance(raw, sqlite3.Connection)
        raw.set_authorizer(refuse_one_look)

    try:
        await runner.write(install)
        runner.look_for_foreign()
        # Nobody can rule out a foreign commit: every waiter looks again.
        assert await anyio.to_thread.run_sync(foreign.wait, 10)
        assert refusals == ["data_version"]
        foreign.clear()
        with anyio.fail_after(10):
            await runner.write(insert_key("after"))  # the writer lives on
        await anyio.to_thread.run_sync(commit_elsewhere, path, "elsewhere")
        runner.look_for_foreign()
        assert await anyio.to_thread.run_sync(foreign.wait, 10)
    finally:
        await anyio.to_thread.run_sync(runner.close)


async def test_a_commit_is_told_on_the_loop_before_the_writer_hears_back(tmp_path: Path) -> None:
    path = tmp_path / "agentpost.db"
    await (await Store.open(f"sqlite:///{path}")).aclose()  # the schema
    loop = asyncio.get_running_loop()
    told: list[tuple[wakeups.Reach, int]] = []

    def on_commit(concerned: wakeups.Reach) -> None:
        told.append((concerned, threading.get_ident()))
        if concerned.get("carol"):
            raise RuntimeError("a broken listener")

    runner = SqliteRunner(path, on_commit=on_commit, commit_loop=loop)

    def tx(agent: str, key: str) -> Callable[[Connection], str]:
        def write(conn: Connection) -> str:
            conn.execute(rate_windows.insert().values(key=key, window_start=0.0, count=1))
            wakeups.concern(conn, [(agent, 1)])
            return key

        return write

    try:
        assert await runner.write(tx("bob", "a")) == "a"
        assert told == [({"bob": 1}, threading.get_ident())]  # on the loop, already
        # A listener that fails is the loop's to report; the write is answered all the same.
        reported: list[BaseException] = []
        loop.set_exception_handler(lambda _, context: reported.append(context["exception"]))
        with anyio.fail_after(10):
            assert await runner.write(tx("carol", "b")) == "b"
        assert [str(e) for e in reported] == ["a broken listener"]
    finally:
        loop.set_exception_handler(None)
        await anyio.to_thread.run_sync(runner.close)
