"""Cross-process change signal for the shared SQLite file, without a daemon.

Every agent session is its own process and they share one WAL-mode SQLite file, so a blocked
`wait` in one process must hear about a commit made by another. The truth is `PRAGMA
data_version` on a dedicated connection: SQLite changes it whenever *another* connection
commits, and only then, so reads never look like changes. Asking it is cheap but not free, so
we only ask when something suggests a commit may have happened:

* On Linux an inotify watch on the database's directory, registered with the event loop via
  `add_reader`, fires when the db file or its `-wal` file is written, created or renamed into
  place. An idle process therefore sleeps inside the event loop with no wake-ups at all. We
  watch the directory, not the files, because SQLite deletes and recreates `-wal` and a
  watch on a file dies with its inode.
* A commit writes its WAL frames (that is what inotify sees) and only *then* publishes them in
  the wal-index header in `-shm`, after an fsync when `synchronous=FULL`. The event can thus
  arrive before `data_version` moves, so after each event we re-check a few times on a short
  back-off (1 ms … ~0.4 s) instead of trusting the first look.
* A slow poll (1 s) backs this up, and is the only mechanism where inotify is missing (then
  every 50 ms). inotify cannot be trusted alone: `-shm` is mmap'd and writes through a mapping
  raise no events, so anything published only there is invisible; the event queue can
  overflow; writers on another host (network or FUSE filesystems) bypass the local kernel; and
  the watch vanishes if the directory is moved or removed.

Spurious wake-ups are harmless by design: a bump only means "look again". Callers take
`version` *before* reading the database and pass it to `wait_changed`, so a commit that lands
between their read and their wait is never lost.

The store (`on_change`) asks its writer connection whose commit a change was, and wakes its
waiters itself: all of them for another process's commit (`changed_elsewhere`), only those a
commit of its own concerns otherwise (`store.wakeups`). An event that follows a write of this
process is not read at once, only by the re-checks from 4 ms on: it is most likely that
commit, which the reading could not tell from another's anyway, and one reading then covers the
commits of those few ms, after their answers, not between a commit and its answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

if sys.platform == "linux":
    import inotify_simple
else:  # pragma: no cover - elsewhere only the poll watches
    inotify_simple = None

__all__ = ["ChangeSignal"]

log = logging.getLogger(__name__)

_POLL_WITH_INOTIFY_S = 1.0
_POLL_WITHOUT_INOTIFY_S = 0.05
# Gaps between re-checks after an inotify event (cumulative ≈ 1, 5, 20, 100, 400 ms); they span
# the window between a WAL write and the wal-index publish, fsync included.
_SETTLE_DELAYS_S = (0.001, 0.004, 0.015, 0.08, 0.3)
_OWN_FIRST_STEP = 1  # after this process's own write: from 4 ms on, the event itself unread
# data_version can be briefly busy (wal-index recovery); we never block the loop waiting for it.
_BUSY_RETRY_S = 0.005
_IN_MODIFY = 0x002
_IN_CLOSE_WRITE = 0x008
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_WATCH_MASK = _IN_MODIFY | _IN_CLOSE_WRITE | _IN_CREATE | _IN_MOVED_TO


class ChangeSignal:
    """Tells waiters in this process that the shared database may have changed.

    `version` is a local counter, not SQLite's number: it only grows, by one per observed
    change, whether another process committed or this one called `notify_local`. All methods
    belong to the event loop thread that called `start`, except `notify_local`, which any thread
    may call.
    """

    def __init__(
        self,
        db_path: Path,
        *,
        fallback_poll_s: float | None = None,
        use_inotify: bool = True,
        on_change: Callable[[bool], None] | None = None,
        own_writes: Callable[[], int] | None = None,
    ) -> None:
        """`on_change`, if given, is told of each change seen (on the loop; True when the
        reading most likely holds this process's own commit) instead of waking the waiters,
        who then wait for `notify_local` or `changed_elsewhere`.

        `own_writes`, if given, counts this process's write transactions begun. A file event
        that comes after it grew is most likely this process's commit: the file is not read
        then, but by the re-checks, from 4 ms on, and `on_change` hears True of the change
        they find (and of a poll's after such a write). One reading then covers the commits of
        those few ms, and it comes after the send's answer, not on its way. The re-checks
        stay for another process's commit that came with it; the owner's writer looks for
        such commits too, in each of its transactions."""
        if fallback_poll_s is not None and fallback_poll_s <= 0:
            raise ValueError("fallback_poll_s must be positive")
        self._db_path = Path(db_path)
        self._fallback_poll_s = fallback_poll_s
        self._want_inotify = use_inotify and inotify_simple is not None
        self._on_change = on_change
        self._own_writes = own_writes
        self._own_writes_seen = 0
        self._own_unread = False  # an event of this process's write, its change not read yet
        self._version = 0
        self._changed: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._conn: sqlite3.Connection | None = None
        self._data_version: int | None = None
        self._inotify: Any = None  # inotify_simple.INotify (untyped)
        self._watched_names: frozenset[str] = frozenset()
        self._poll_s = _POLL_WITHOUT_INOTIFY_S
        self._poll_handle: asyncio.TimerHandle | None = None
        self._settle_handle: asyncio.TimerHandle | None = None
        self._settle_step = 0
        self._retry_handle: asyncio.TimerHandle | None = None
        self._holding = False
        self._closed = False

    @property
    def version(self) -> int:
        return self._version

    @property
    def using_inotify(self) -> bool:
        """False means only the poll is watching, so cross-process latency is the poll period."""
        return self._inotify is not None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def start(self) -> None:
        if self._closed:
            raise RuntimeError("ChangeSignal is closed; create a new one")
        if self._loop is not None:
            return
        db = self._db_path.resolve()
        if not db.is_file():
            raise FileNotFoundError(
                f"database {db} does not exist; create it before starting its ChangeSignal"
            )
        loop = asyncio.get_running_loop()
        # mode=rw never creates the file; query_only guards against accidental writes; autocommit
        # (isolation_level=None) so no read transaction stays open and pins the WAL.
        self._conn = sqlite3.connect(
            db.as_uri() + "?mode=rw", uri=True, timeout=0.0, isolation_level=None
        )
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._changed = asyncio.Event()
        try:
            self._conn.execute("PRAGMA query_only = ON")
            # Watch first, then read the baseline: a commit in between is then seen, not lost.
            if self._want_inotify:
                self._start_inotify(db)
            self._poll_s = (
                self._fallback_poll_s
                if self._fallback_poll_s is not None
                else _POLL_WITH_INOTIFY_S
                if self._inotify is not None
                else _POLL_WITHOUT_INOTIFY_S
            )
            self._data_version = self._read_data_version()
            self._arm_poll()
        except BaseException:
            self._teardown()
            self._loop = self._loop_thread = self._changed = None
            raise

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._teardown()
        self._wake()  # blocked waiters return now, with an unchanged version

    def notify_local(self) -> None:
        """Called by this process after its own commit, so local waiters need not wait for
        the filesystem round trip."""
        loop = self._loop
        if loop is not None and threading.get_ident() != self._loop_thread:
            with contextlib.suppress(RuntimeError):  # loop already closed: nobody to wake
                loop.call_soon_threadsafe(self._local_change)
            return
        self._local_change()

    def hold_events(self, hold: bool) -> None:
        """Leave the file's events unread while this process's writer thread commits (True),
        and read them again after (False); on the loop.

        A commit appends its pages to the WAL one write at a time, and each write raised an
        event that woke the loop to look (about eight per send, each one contending for the GIL
        with the writer thread at work). Meanwhile the writer looks for other processes'
        commits itself, inside each transaction. The events stay queued in the kernel: once
        released they are read at once, so no commit of another process is missed.
        """
        if hold == self._holding:
            return
        self._holding = hold
        if self._inotify is None:  # none, or the watch was lost, or the signal closed
            return
        assert self._loop is not None
        if hold:
            self._loop.remove_reader(self._inotify.fileno())
        else:
            self._loop.add_reader(self._inotify.fileno(), self._on_inotify)

    def changed_elsewhere(self) -> None:
        """Another process committed (as `on_change`'s owner found out): wake the waiters.
        Called on the loop thread."""
        self._bump()

    async def wait_changed(self, since: int, timeout: float | None) -> int:
        """A timeout parameter (rather than the caller's cancel scope) lets a long-poll return
        the version it saw instead of raising."""
        if self._version > since:
            return self._version
        if self._loop is None:
            raise RuntimeError("ChangeSignal.start() has not been called")
        try:
            async with asyncio.timeout(timeout):
                while self._version <= since and not self._closed:
                    assert self._changed is not None
                    await self._changed.wait()
        except TimeoutError:
            pass
        return self._version

    # -- internals (all run on the loop thread) ------------------------------------------

    def _start_inotify(self, db: Path) -> None:
        assert inotify_simple is not None
        assert self._loop is not None
        try:
            ino = inotify_simple.INotify(nonblocking=True)
        except OSError as exc:  # e.g. fs.inotify.max_user_instances reached
            log.warning("inotify unavailable (%s); polling %s instead", exc, db)
            return
        try:
            ino.add_watch(db.parent, _WATCH_MASK)
            self._loop.add_reader(ino.fileno(), self._on_inotify)
        except (OSError, NotImplementedError) as exc:  # watch limit, or a loop without readers
            ino.close()
            log.warning("inotify watch failed (%s); polling %s instead", exc, db)
            return
        self._inotify = ino
        self._watched_names = frozenset({db.name, db.name + "-wal"})

    def _stop_inotify(self) -> None:
        ino, self._inotify = self._inotify, None
        if ino is None:
            return
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(ino.fileno())
        ino.close()

    def _teardown(self) -> None:
        for handle in (self._poll_handle, self._settle_handle, self._retry_handle):
            if handle is not None:
                handle.cancel()
        self._poll_handle = self._settle_handle = self._retry_handle = None
        self._stop_inotify()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _on_inotify(self) -> None:
        relevant = False
        lost_watch = False
        try:
            # One read takes all that is queued (a burst of writes, too): up to 64 KiB of
            # events. Any left keep the descriptor readable, and the loop calls again.
            data = os.read(self._inotify.fileno(), 65536)
        except BlockingIOError:
            return
        for event in inotify_simple.parse_events(data):
            mask: int = event.mask
            if mask & _IN_IGNORED:
                lost_watch = True
            elif mask & _IN_Q_OVERFLOW or event.name in self._watched_names:
                relevant = True
        if lost_watch:
            # The directory went away or was moved: inotify can tell us nothing more.
            log.warning("inotify watch on %s lost; polling instead", self._db_path.parent)
            self._stop_inotify()
            if self._fallback_poll_s is None:
                self._poll_s = _POLL_WITHOUT_INOTIFY_S
            self._arm_poll()
            relevant = True
        if relevant:
            own = self._after_own_write()
            if own:
                # Most likely our own commit, which this connection's reading cannot tell
                # from another process's (the owner's writer can): read it a little later.
                self._own_unread = True
            else:
                self._check(own=False)
            # A re-check due within 4 ms already covers this event; at a steady stream of
            # commits, restarting the series on each would only add timers.
            due = self._settle_handle is not None and self._settle_step <= _OWN_FIRST_STEP
            if not due:
                self._settle_step = _OWN_FIRST_STEP if own else 0
                self._arm_settle()

    def _after_own_write(self) -> bool:
        if self._own_writes is None:
            return False
        begun = self._own_writes()
        before, self._own_writes_seen = self._own_writes_seen, begun
        return begun != before

    def _arm_settle(self) -> None:
        if self._settle_handle is not None:
            self._settle_handle.cancel()
        assert self._loop is not None
        delay = _SETTLE_DELAYS_S[self._settle_step]
        self._settle_handle = self._loop.call_later(delay, self._settle_tick)

    def _settle_tick(self) -> None:
        self._settle_handle = None
        self._check()
        self._settle_step += 1
        if self._settle_step < len(_SETTLE_DELAYS_S):
            self._arm_settle()

    def _arm_poll(self) -> None:
        if self._poll_handle is not None:
            self._poll_handle.cancel()
        assert self._loop is not None
        self._poll_handle = self._loop.call_later(self._poll_s, self._poll_tick)

    def _poll_tick(self) -> None:
        self._poll_handle = None
        self._check(own=self._after_own_write() or self._own_unread)
        self._arm_poll()

    def _read_data_version(self) -> int | None:
        if self._conn is None:
            return None
        try:
            # fetchall() runs the statement to completion, so no read snapshot is left open.
            rows = self._conn.execute("PRAGMA data_version").fetchall()
        except sqlite3.OperationalError:  # SQLITE_BUSY during recovery: try again shortly
            if self._retry_handle is None and self._loop is not None and not self._closed:
                self._retry_handle = self._loop.call_later(_BUSY_RETRY_S, self._retry_tick)
            return None
        value: int = rows[0][0]
        return value

    def _retry_tick(self) -> None:
        self._retry_handle = None
        self._check()

    def _check(self, *, own: bool | None = None) -> None:
        """Read the file, and tell of a change. `own`: whether the reading most likely holds
        this process's commit; by default, whether an event of its write was left unread."""
        current = self._read_data_version()
        if current is None:
            return
        if own is None:
            own = self._own_unread
        self._own_unread = False
        if current == self._data_version:
            return
        self._data_version = current
        if self._on_change is not None:
            self._on_change(own)
        else:
            self._bump()

    def _local_change(self) -> None:
        # Without `on_change`, absorb our own commit into the baseline so it does not wake
        # everyone a second time; anything else absorbed here committed before the bump, so
        # woken readers still see it. With it, the reading is left to the re-checks after the
        # file event the commit raised (or the next poll), whose owner hears "most likely our
        # own" then: at most one reading of the file a commit, not two.
        if self._on_change is None:
            current = self._read_data_version()
            if current is not None:
                self._data_version = current
        self._bump()

    def _bump(self) -> None:
        self._version += 1
        self._wake()

    def _wake(self) -> None:
        old = self._changed
        if old is None:
            return
        self._changed = asyncio.Event()
        old.set()
