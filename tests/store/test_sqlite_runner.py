"""The SQLite runner: one writer connection that commits the writes asked for together, on
the event loop when it can and on its thread when it must, reads that never wait for it, and
no lock errors."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest
from sqlalchemy import Connection, select

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.store import sqlite_jobs, sqlite_runner
from agentpost.store.database import Store
from agentpost.store.schema import rate_windows
from agentpost.store.sqlite_runner import SqliteRunner

pytestmark = pytest.mark.anyio


def insert_key(key: str) -> Any:
    def tx(conn: Connection) -> Any:
        conn.execute(rate_windows.insert().values(key=key, window_start=0.0, count=1))
        return conn.get_transaction()

    return tx


async def stored_keys(store: Store) -> set[str]:
    return set(await store.read(lambda conn: conn.execute(select(rate_windows.c.key)).scalars()))


async def outcome(store: Store, fn: Callable[[Connection], Any]) -> Any:
    """What a write answered: its result, or the error it raised."""
    try:
        return await store.write(fn)
    except Exception as exc:
        return exc


@asynccontextmanager
async def writer_thread_held(
    store: Store, first: Callable[[Connection], None] = lambda conn: None
) -> AsyncIterator[None]:
    """The writer thread busy, inside a lengthy write (`first`, then a wait), until the block
    ends; the write then commits before the block is left."""
    started, release = threading.Event(), threading.Event()

    def held(conn: Connection) -> None:
        first(conn)
        started.set()
        release.wait(10)

    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(store.write, held, lengthy=True))
        await anyio.to_thread.run_sync(started.wait, 10)
        try:
            yield
        finally:
            release.set()


async def handed_over(store: Store, count: int) -> None:
    """Until `count` writes wait in the writer thread's queue. Their tasks block at once; the
    loop hands the turn's writes over in a callback after them, which `wait_all_tasks_blocked`
    may not wait for."""
    runner = store._sqlite
    assert runner is not None
    with anyio.fail_after(10):
        while runner._jobs.qsize() < count:
            await anyio.lowlevel.checkpoint()


async def test_concurrent_writes_are_committed_together_and_a_failure_undoes_only_itself(
    lite: Store,
) -> None:
    def failing(conn: Connection) -> None:
        conn.execute(rate_windows.insert().values(key="doomed", window_start=0.0, count=1))
        raise ValueError("refused")

    results: dict[int, Any] = {}

    async def write(i: int, fn: Any) -> None:
        results[i] = await outcome(lite, fn)

    async with anyio.create_task_group() as tg, writer_thread_held(lite):
        # the writer is busy: the rest queue up
        for i in range(20):
            tg.start_soon(write, i, failing if i == 7 else insert_key(f"k{i}"))
        await handed_over(lite, 20)

    assert isinstance(results[7], ValueError)
    assert await stored_keys(lite) == {f"k{i}" for i in range(20) if i != 7}
    transactions = {id(results[i]) for i in range(20) if i != 7}
    assert len(transactions) == 1  # one BEGIN IMMEDIATE … COMMIT for the whole batch


async def test_a_lone_failing_write_raises_its_error_and_leaves_nothing(lite: Store) -> None:
    def failing(conn: Connection) -> None:
        conn.execute(rate_windows.insert().values(key="doomed", window_start=0.0, count=1))
        raise LookupError("refused")

    with pytest.raises(LookupError, match="refused"):
        await lite.write(failing)
    assert await stored_keys(lite) == set()
    await lite.write(insert_key("next"))
    assert await stored_keys(lite) == {"next"}


async def test_reads_do_not_wait_for_a_busy_writer(lite: Store) -> None:
    def slow_write(conn: Connection) -> None:
        conn.execute(rate_windows.insert().values(key="slow", window_start=0.0, count=1))

    async with writer_thread_held(lite, slow_write):
        with anyio.fail_after(5):
            assert await stored_keys(lite) == set()  # the uncommitted row is not seen
    assert await stored_keys(lite) == {"slow"}


def thread_of(conn: Connection) -> int:
    return threading.get_ident()


async def test_a_small_write_runs_on_the_event_loop_when_the_writer_is_idle(lite: Store) -> None:
    """A hand-off to the writer thread and back would cost as much as the transaction."""
    assert await lite.write(thread_of) == threading.get_ident()


async def test_a_lengthy_write_runs_on_the_writer_thread(lite: Store) -> None:
    assert await lite.write(thread_of, lengthy=True) != threading.get_ident()


@pytest.mark.parametrize(
    ("later", "on_the_loop"),
    [(sqlite_runner.HERE_UP_TO, True), (sqlite_runner.HERE_UP_TO + 1, False)],
)
async def test_the_first_write_of_a_turn_runs_at_once_and_the_later_ones_together(
    lite: Store, later: int, on_the_loop: bool
) -> None:
    """The first, within its caller's step, on the loop; the writes asked for later in that
    turn wait for it to end, then run as one transaction: right there when they are few, on
    the writer thread, whose work runs beside the loop's, when they are more."""
    results: dict[int, tuple[Any, int]] = {}
    answered: list[int] = []

    def tx(key: str) -> Callable[[Connection], tuple[Any, int]]:
        return lambda conn: (insert_key(key)(conn), thread_of(conn))

    async def write(i: int) -> None:
        results[i] = await lite.write(tx(f"k{i}"))
        answered.append(i)

    async with anyio.create_task_group() as tg:
        for i in range(1 + later):
            tg.start_soon(write, i)
    assert await stored_keys(lite) == {f"k{i}" for i in range(1 + later)}
    assert answered[0] == 0
    first, first_thread = results.pop(0)
    assert first_thread == threading.get_ident()
    assert len({id(t) for t, _ in results.values()}) == 1  # one BEGIN IMMEDIATE … COMMIT
    assert id(first) not in {id(t) for t, _ in results.values()}
    assert {thread == threading.get_ident() for _, thread in results.values()} == {on_the_loop}


async def test_a_write_runs_at_once_within_its_callers_step(lite: Store) -> None:
    """Put off to a callback, it would wait out the rest of the turn, and its caller another
    turn for the answer."""
    ran: list[str] = []

    async def other() -> None:
        ran.append("other task")

    async with anyio.create_task_group() as tg:
        tg.start_soon(other)
        await anyio.wait_all_tasks_blocked()  # nothing pending: a fresh turn comes next
        tg.start_soon(other)
        await lite.write(insert_key("k"))
        ran.append("writer answered")
    assert ran == ["other task", "writer answered", "other task"]


async def test_a_write_while_another_connection_holds_the_lock_leaves_the_loop_free(
    lite: Store,
) -> None:
    """The writer thread waits for the lock instead; the loop goes on serving meanwhile."""
    assert lite.path is not None
    other = sqlite3.connect(lite.path, timeout=30, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        threads: list[int] = []

        def tx(conn: Connection) -> None:
            insert_key("k")(conn)
            threads.append(thread_of(conn))

        async with anyio.create_task_group() as tg:
            tg.start_soon(lite.write, tx)
            turned = time.monotonic()
            await anyio.sleep(0.1)
            # Held by a wait for the lock, the loop would have turned only after the busy
            # timeout (30 s).
            assert time.monotonic() - turned < 10
            assert threads == []
            other.execute("COMMIT")
        assert len(threads) == 1
        assert threads != [threading.get_ident()]
        assert await stored_keys(lite) == {"k"}
    finally:
        other.close()


async def test_the_writer_is_told_of_a_commit_so_local_waiters_wake(lite: Store) -> None:
    before = lite.version
    await lite.write(insert_key("x"))
    with anyio.fail_after(5):
        assert await lite.wait_changed(before, timeout=5) > before


async def test_its_owner_hears_while_the_writer_thread_holds_writes_of_its_loop(
    tmp_path: Path,
) -> None:
    """So the change signal leaves the file's events unread meanwhile: writes on the loop end
    within its turn, and tell nothing."""
    path = tmp_path / "agentpost.db"
    await (await Store.open(f"sqlite:///{path}")).aclose()  # the schema
    busy: list[bool] = []
    runner = SqliteRunner(
        path,
        on_commit=lambda _: None,
        commit_loop=asyncio.get_running_loop(),
        on_writer_busy=busy.append,
    )
    try:
        await runner.write(insert_key("here"))
        assert busy == []
        async with anyio.create_task_group() as tg:
            for key in ("a", "b"):
                tg.start_soon(partial(runner.write, insert_key(key), lengthy=True))
        assert busy == [True, False]
    finally:
        await anyio.to_thread.run_sync(runner.close)


@pytest.mark.parametrize("lengthy", [False, True])
async def test_a_write_that_committed_is_answered_as_done_when_telling_of_it_fails(
    tmp_path: Path, lengthy: bool
) -> None:
    """What fails after the commit (the wake-ups) goes to the loop's exception handler; told
    to the writer's caller, a stored message would look refused, and a retry store it twice."""
    path = tmp_path / "agentpost.db"
    await (await Store.open(f"sqlite:///{path}")).aclose()  # the schema
    loop = asyncio.get_running_loop()
    reported: list[BaseException] = []
    loop.set_exception_handler(lambda _, context: reported.append(context["exception"]))

    def on_commit(_: object) -> None:
        raise RuntimeError("a wake-up failed")

    runner = SqliteRunner(path, on_commit=on_commit, commit_loop=loop)
    try:
        await runner.write(insert_key("stored"), lengthy=lengthy)
        assert [str(e) for e in reported] == ["a wake-up failed"]
        keys = await runner.read(lambda conn: list(conn.execute(select(rate_windows.c.key))))
        assert [k for (k,) in keys] == ["stored"]
    finally:
        loop.set_exception_handler(None)
        await anyio.to_thread.run_sync(runner.close)


async def test_a_steady_stream_of_writes_keeps_the_wal_small(
    lite: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checkpoints must let the WAL start over, or it holds every page ever written: each
    commit appends at least one."""
    assert lite.path is not None
    monkeypatch.setattr(sqlite_runner, "CHECKPOINT_EVERY", 20)
    writes = 600
    for i in range(writes):
        await lite.write(insert_key(f"k{i}"))
    other = sqlite3.connect(lite.path)
    try:
        _busy, in_the_wal, _copied = other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    finally:
        other.close()
    assert in_the_wal < writes / 2


async def test_a_run_of_lengthy_writes_keeps_the_wal_small(lite: Store) -> None:
    """A lengthy write may write thousands of pages (a sweep's batch, a purge's step, a
    backlog's indexing): counted as one commit of the `CHECKPOINT_EVERY`, a run of them grew
    the WAL by all of them (885 MB for 100 batches of wiped bodies on 1,000,000 messages)."""
    assert lite.path is not None
    writes, rows = 30, 100

    def big(i: int) -> Callable[[Connection], None]:
        def tx(conn: Connection) -> None:
            for j in range(rows):
                key = f"{i}-{j}-" + "x" * 3000
                conn.execute(rate_windows.insert().values(key=key, window_start=0.0, count=1))

        return tx

    for i in range(writes):
        await lite.write(big(i), lengthy=True)
    other = sqlite3.connect(lite.path)
    try:
        _busy, in_the_wal, _copied = other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    finally:
        other.close()
    assert in_the_wal < writes * rows / 2  # each wrote over `rows` pages


async def test_a_lengthy_write_that_changed_nothing_asks_for_no_checkpoint(
    lite: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every process looks once a minute for mail and tasks falling due, in a lengthy write
    that mostly finds none: it wrote no page, and a checkpoint (RESTART holds writers off,
    other processes' too) would be for nothing. One that changed a row asks for one."""
    runner = lite._sqlite
    assert runner is not None
    asked = 0

    def due() -> None:
        nonlocal asked
        asked += 1

    monkeypatch.setattr(runner.checkpoints, "due", due)
    await lite.write(lambda conn: conn.execute(select(rate_windows.c.key)).all(), lengthy=True)
    assert asked == 0
    await lite.write(
        lambda conn: conn.execute(rate_windows.insert().values(key="k", window_start=0.0, count=1)),
        lengthy=True,
    )
    assert asked == 1


async def test_a_write_let_in_just_before_close_is_refused_not_left_waiting(
    tmp_path: Path,
) -> None:
    """`close` runs on a thread of its own: a write that passed its look at `_closing` a moment
    before lands in the queue behind the writer's last job, and must still be answered."""
    path = tmp_path / "agentpost.db"
    await (await Store.open(f"sqlite:///{path}")).aclose()  # the schema
    loop = asyncio.get_running_loop()
    runner = SqliteRunner(path, on_commit=lambda _: None, commit_loop=loop)
    late: asyncio.Future[Any] = loop.create_future()
    job = sqlite_jobs.Job(insert_key("late"), loop, late)
    runner._jobs.put(None)  # as close does: the writer thread takes its marker and ends
    writer = next(t for t in runner._threads if t.name == "agentpost-writer")
    await anyio.to_thread.run_sync(writer.join, 10)
    runner._jobs.put(job)  # the write that passed its look a moment before: behind the marker
    await anyio.to_thread.run_sync(runner.close)
    with anyio.fail_after(5), pytest.raises(AgentpostError) as refused:
        await late
    assert refused.value.code is ErrorCode.UNAVAILABLE


def filling_the_disk(conn: Connection) -> None:
    """A write that finds the disk full: the database may grow by no page (SQLite answers it
    as it answers a full disk, `SQLITE_FULL`)."""
    driver = conn.connection.driver_connection
    assert driver is not None
    pages = driver.execute("PRAGMA page_count").fetchone()[0]
    driver.execute(f"PRAGMA max_page_count={pages}")
    try:
        conn.execute(rate_windows.insert().values(key="big" * 50_000, window_start=0.0, count=1))
    finally:
        driver.execute("PRAGMA max_page_count=4294967294")


@pytest.mark.parametrize("alone", [True, False])
async def test_a_full_disk_is_unavailable_saying_so_not_busy(lite: Store, alone: bool) -> None:
    """Told "busy, try again", the owner waits for a database that will not free itself; told
    the disk is full, they free space. SQLite undoes the whole transaction of a full disk, so
    a batch's every write is refused for it, and none is kept; the next write is taken."""
    results: dict[int, Any] = {}

    async def write(i: int, fn: Any) -> None:
        results[i] = await outcome(lite, fn)

    if alone:
        await write(0, filling_the_disk)
    else:
        async with anyio.create_task_group() as tg, writer_thread_held(lite):
            for i in range(5):
                tg.start_soon(write, i, filling_the_disk if i == 2 else insert_key(f"k{i}"))
            await handed_over(lite, 5)
    for refused in results.values():
        assert isinstance(refused, AgentpostError)
        assert refused.code is ErrorCode.UNAVAILABLE
        assert "full" in refused.message
        assert "busy" not in refused.message
    assert await stored_keys(lite) == set()
    await lite.write(insert_key("next"))
    assert await stored_keys(lite) == {"next"}


async def test_a_reader_that_could_not_connect_answers_unavailable_and_connects_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read thread that died connecting (the file gone, the disk failing) left every read
    sent its way waiting for good."""
    path = tmp_path / "agentpost.db"
    await (await Store.open(f"sqlite:///{path}")).aclose()  # the schema
    failing = True
    made = sqlite_runner.make_engine

    def make_engine(at: Path) -> Any:
        engine = made(at)
        connect = engine.connect

        def connect_unless_failing() -> Connection:
            if failing and threading.current_thread().name.startswith("agentpost-reader"):
                raise sqlite_runner.OperationalError(
                    "connect", {}, sqlite3.OperationalError("disk I/O error")
                )
            return connect()

        engine.connect = connect_unless_failing  # type: ignore[method-assign]
        return engine

    monkeypatch.setattr(sqlite_runner, "make_engine", make_engine)
    runner = SqliteRunner(path, on_commit=lambda _: None, commit_loop=asyncio.get_running_loop())
    try:
        with anyio.fail_after(5):
            for _ in range(sqlite_runner.READERS):  # each reader tries, and fails, once
                with pytest.raises(AgentpostError) as caught:
                    await runner.read(lambda conn: conn.execute(select(rate_windows.c.key)).all())
                assert caught.value.code is ErrorCode.UNAVAILABLE
            failing = False
            for _ in range(sqlite_runner.READERS):
                assert (
                    await runner.read(lambda conn: conn.execute(select(rate_windows)).all()) == []
                )
    finally:
        await anyio.to_thread.run_sync(runner.close)


async def test_a_lengthy_write_commits_alone_never_holding_up_the_writes_beside_it(
    lite: Store,
) -> None:
    """A lengthy write (a purge's step, a sweep's batch) may hold the write lock for long: a
    small write queued beside it, before or after, commits in a transaction of its own, so
    it is answered without waiting for the lengthy one to commit too."""
    results: dict[str, Any] = {}

    async def write(key: str, lengthy: bool) -> None:
        results[key] = await lite.write(insert_key(key), lengthy=lengthy)

    async with anyio.create_task_group() as tg, writer_thread_held(lite):
        for i, (key, lengthy) in enumerate([("before", False), ("long", True), ("after", False)]):
            tg.start_soon(write, key, lengthy)
            await handed_over(lite, i + 1)

    assert await stored_keys(lite) == {"before", "long", "after"}
    assert id(results["long"]) not in {id(results["before"]), id(results["after"])}
