"""ChangeSignal: commits made elsewhere wake local waiters; nothing else does.

Waits are bounded by `anyio.fail_after`, never by sleeping: a broken signal fails fast instead
of hanging, and a working one is never slowed down by a guessed delay.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from agentpost.store.signal import ChangeSignal

HAS_INOTIFY = sys.platform == "linux"
# With inotify on, a poll this slow cannot be what wakes a test, so inotify must have.
NO_POLL_S = 3600.0
WRITER = (
    "import sqlite3, sys\n"
    "conn = sqlite3.connect(sys.argv[1])\n"
    "conn.execute('INSERT INTO t (v) VALUES (1)')\n"
    "conn.commit()\n"
    "conn.close()\n"
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "post.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER)")
    conn.commit()
    conn.close()
    return path


def commit_here(db: Path) -> None:
    conn = sqlite3.connect(db)
    try:
        conn.execute("INSERT INTO t (v) VALUES (2)")
        conn.commit()
    finally:
        conn.close()


def wal_size(db: Path) -> int:
    return Path(f"{db}-wal").stat().st_size


async def commit_in_other_process(db: Path) -> None:
    await anyio.run_process([sys.executable, "-c", WRITER, str(db)])


async def wait_while(sig: ChangeSignal, trigger: Callable[[], Awaitable[None]]) -> tuple[int, int]:
    """Blocks a waiter first, then fires `trigger`, so the wake-up itself is what is tested."""
    since = sig.version
    got: list[int] = []
    ready = anyio.Event()

    async def waiter() -> None:
        ready.set()
        got.append(await sig.wait_changed(since, None))

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await ready.wait()  # the waiter runs into wait_changed before yielding back here
        await trigger()
    return since, got[0]


@pytest.mark.anyio
async def test_commit_from_another_process_wakes_waiter(db: Path) -> None:
    async with ChangeSignal(db, fallback_poll_s=NO_POLL_S if HAS_INOTIFY else None) as sig:
        assert sig.using_inotify is HAS_INOTIFY
        with anyio.fail_after(10):
            since, got = await wait_while(sig, lambda: commit_in_other_process(db))
        assert got > since
        assert sig.version == got


@pytest.mark.anyio
async def test_commit_from_another_connection_in_process_wakes_waiter(db: Path) -> None:
    async def trigger() -> None:
        commit_here(db)

    async with ChangeSignal(db, fallback_poll_s=NO_POLL_S if HAS_INOTIFY else None) as sig:
        with anyio.fail_after(5):
            since, got = await wait_while(sig, trigger)
        assert got == since + 1


@pytest.mark.anyio
async def test_a_commit_elsewhere_is_seen_while_this_process_writes_too(db: Path) -> None:
    """An event taken for this process's own write gets later re-checks only: another
    process's commit that came with it still wakes the waiters."""
    writes = 0

    def own_writes() -> int:
        nonlocal writes
        writes += 1  # as if this process began a write before every event
        return writes

    async with ChangeSignal(
        db, fallback_poll_s=NO_POLL_S if HAS_INOTIFY else None, own_writes=own_writes
    ) as sig:
        with anyio.fail_after(10):
            since, got = await wait_while(sig, lambda: commit_in_other_process(db))
        assert got > since


@pytest.mark.anyio
@pytest.mark.skipif(not HAS_INOTIFY, reason="file events come from Linux's inotify")
async def test_a_change_after_a_write_of_this_process_is_told_as_likely_its_own(db: Path) -> None:
    """Its owner then lets the writer's next transaction tell whose commit it was, rather than
    waking the writer just to look; a change with no such write is another process's."""
    writes = [0]
    heard: list[bool] = []
    told = anyio.Event()

    def on_change(own: bool) -> None:
        nonlocal told
        heard.append(own)
        told.set()

    async def next_change() -> None:
        nonlocal told
        with anyio.fail_after(10):
            await told.wait()
        told = anyio.Event()

    async with ChangeSignal(
        db, fallback_poll_s=NO_POLL_S, on_change=on_change, own_writes=lambda: writes[0]
    ):
        writes[0] += 1
        commit_here(db)  # on the loop: committed before the signal hears of it
        await next_change()
        commit_here(db)  # no write of this process began since
        await next_change()
    assert heard == [True, False]


@pytest.mark.anyio
@pytest.mark.skipif(not HAS_INOTIFY, reason="file events come from Linux's inotify")
async def test_an_owners_own_commit_wakes_at_once_and_is_told_once_as_likely_its_own(
    db: Path,
) -> None:
    """`notify_local` wakes the waiters without reading the file; the reading is the commit's
    file event's, one a commit."""
    writes = [0]
    heard: list[bool] = []
    told = anyio.Event()

    def on_change(own: bool) -> None:
        heard.append(own)
        told.set()

    async with ChangeSignal(
        db, fallback_poll_s=NO_POLL_S, on_change=on_change, own_writes=lambda: writes[0]
    ) as sig:

        async def own_commit() -> None:
            writes[0] += 1
            commit_here(db)
            sig.notify_local()

        with anyio.fail_after(10):
            since, got = await wait_while(sig, own_commit)
            assert got == since + 1
            await told.wait()
        await anyio.sleep(0.05)  # the re-checks that follow find nothing more
    assert heard == [True]


@pytest.mark.anyio
@pytest.mark.skipif(not HAS_INOTIFY, reason="file events come from Linux's inotify")
async def test_the_event_of_an_owners_own_write_is_read_only_by_a_later_re_check(
    db: Path,
) -> None:
    """Its reading could not tell that commit from another process's (the owner's writer
    can), and taken at the event it would fall between a send's commit and its answer: the
    re-checks read it, a few ms on, one reading for the commits meanwhile."""
    writes = [0]
    told = anyio.Event()
    told_after: list[float] = []

    def on_change(own: bool) -> None:
        assert own
        told_after.append(time.monotonic() - committed)
        told.set()

    async with ChangeSignal(
        db, fallback_poll_s=NO_POLL_S, on_change=on_change, own_writes=lambda: writes[0]
    ):
        writes[0] += 1
        commit_here(db)
        committed = time.monotonic()
        with anyio.fail_after(10):
            await told.wait()
        await anyio.sleep(0.05)  # the re-checks that follow find nothing more
    assert len(told_after) == 1
    assert told_after[0] >= 0.003  # the first own re-check is 4 ms after the event


@pytest.mark.anyio
@pytest.mark.skipif(not HAS_INOTIFY, reason="file events come from Linux's inotify")
async def test_a_commit_elsewhere_while_events_are_held_is_heard_once_they_are_released(
    db: Path,
) -> None:
    """While this process's writer thread commits, the file's events wait in the kernel (the
    writer looks for other commits itself); none of them is lost."""
    async with ChangeSignal(db, fallback_poll_s=NO_POLL_S) as sig:
        since = sig.version
        sig.hold_events(True)
        with anyio.fail_after(10):
            await commit_in_other_process(db)
        # Heard at once if the events were read: within a few ms, far from 0.3 s.
        assert await sig.wait_changed(since, 0.3) == since
        sig.hold_events(False)
        with anyio.fail_after(10):
            assert await sig.wait_changed(since, None) > since


@pytest.mark.anyio
async def test_notify_local_wakes_at_once(db: Path) -> None:
    async def trigger() -> None:
        sig.notify_local()
        assert sig.version == since + 1  # synchronous: no loop iteration needed

    async with ChangeSignal(db, fallback_poll_s=NO_POLL_S) as sig:
        since = sig.version
        with anyio.fail_after(1):
            _, got = await wait_while(sig, trigger)
        assert got == since + 1
        with anyio.fail_after(1):  # already past `since`: returns without waiting
            assert await sig.wait_changed(since, None) == since + 1


@pytest.mark.anyio
async def test_notify_local_from_a_worker_thread(db: Path) -> None:
    async def trigger() -> None:
        await anyio.to_thread.run_sync(sig.notify_local)

    async with ChangeSignal(db, fallback_poll_s=NO_POLL_S) as sig:
        with anyio.fail_after(2):
            since, got = await wait_while(sig, trigger)
        assert got == since + 1


@pytest.mark.anyio
async def test_wait_times_out_when_nothing_happens(db: Path) -> None:
    async with ChangeSignal(db) as sig:
        since = sig.version
        started = time.monotonic()
        with anyio.fail_after(5):
            got = await sig.wait_changed(since, 0.2)
        assert got == since == sig.version
        assert time.monotonic() - started >= 0.15


@pytest.mark.anyio
async def test_reads_by_another_connection_do_not_count(db: Path) -> None:
    async with ChangeSignal(db, fallback_poll_s=0.05) as sig:
        since = sig.version
        reader = sqlite3.connect(db)
        try:
            assert reader.execute("SELECT count(*) FROM t").fetchone() == (0,)
        finally:
            reader.close()
        with anyio.fail_after(5):
            # Long enough for inotify, the settle re-checks and several polls to have looked.
            assert await sig.wait_changed(since, 0.5) == since
            commit_here(db)
            # Exactly one more: the read above was not counted, the commit counted once.
            assert await sig.wait_changed(since, None) == since + 1
            assert await sig.wait_changed(since + 1, 0.5) == since + 1


@pytest.mark.anyio
async def test_poll_alone_sees_another_process(db: Path) -> None:
    async with ChangeSignal(db, use_inotify=False) as sig:
        assert not sig.using_inotify
        with anyio.fail_after(10):
            since, got = await wait_while(sig, lambda: commit_in_other_process(db))
        assert got > since


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd")
@pytest.mark.anyio
async def test_aclose_releases_reader_and_fds(db: Path) -> None:
    def open_fds() -> set[int]:
        return {int(name) for name in os.listdir("/proc/self/fd")}

    loop = asyncio.get_running_loop()
    before = open_fds()
    sig = ChangeSignal(db)
    await sig.start()
    await sig.start()  # idempotent: no second connection or watch
    opened = open_fds() - before
    assert opened  # the connection, and the inotify fd on Linux
    await sig.aclose()
    await sig.aclose()
    assert len(open_fds()) == len(before)
    assert not any(loop.remove_reader(fd) for fd in opened)  # nothing left registered
    with pytest.raises(RuntimeError):
        await sig.start()


@pytest.mark.anyio
async def test_aclose_releases_blocked_waiters(db: Path) -> None:
    sig = ChangeSignal(db)
    await sig.start()
    with anyio.fail_after(2):
        since, got = await wait_while(sig, sig.aclose)
    assert got == since


@pytest.mark.anyio
async def test_missing_database_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    with pytest.raises(FileNotFoundError, match="does not exist"):
        await ChangeSignal(missing).start()
    assert not missing.exists()


@pytest.mark.anyio
async def test_wait_before_start_is_an_error(db: Path) -> None:
    with pytest.raises(RuntimeError, match="start"):
        await ChangeSignal(db).wait_changed(0, 0.01)


@pytest.mark.anyio
async def test_signal_does_not_pin_the_wal(db: Path) -> None:
    """An open read snapshot would stop checkpoints and let the WAL grow without bound."""
    async with ChangeSignal(db) as sig:
        since = sig.version
        for _ in range(20):
            commit_here(db)
        with anyio.fail_after(5):
            await sig.wait_changed(since, None)
        conn = sqlite3.connect(db)
        try:
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            conn.close()
        assert busy == 0
        assert wal_size(db) == 0
