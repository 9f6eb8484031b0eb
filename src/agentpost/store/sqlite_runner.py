"""The SQLite runner: where this process's transactions on the file run.

Writes use one connection per process, the writer's: each transaction opens with `BEGIN
IMMEDIATE`, so two processes never deadlock upgrading a read lock, and the writes asked for
together are committed together (one lock, one WAL append) with a savepoint each, so one refused
write never undoes its neighbours. A small transaction costs less than handing it to a thread
and back, so writes run right there on the event loop whenever the writer thread is idle and
the file's write lock is free at once: the first of a turn of the loop at once, within its
caller's step, the rest of that turn together, as one batch, once the turn is over. Otherwise,
and for writes that may take long, they go to the writer thread, as Datasette does it, which
waits for the lock without holding up the loop. Reads run on a few reader threads that each
keep one connection open, and never wait for the writer. Long-lived threads with their own
connections cost one hand-off per transaction, a fraction of a pool checkout on a fresh thread.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError, OperationalError

from agentpost.store import inbox_bounds, wakeups
from agentpost.store.checkpoints import Checkpoints
from agentpost.store.schema_watch import SchemaWatch
from agentpost.store.sqlite import (
    BUSY_TIMEOUT_MS,
    OpenedFile,
    busy,
    driver_of,
    make_engine,
    raw,
    transaction,
    unavailable,
)
from agentpost.store.sqlite_jobs import Job, Outcome, apply, closed, released, settle

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_BATCH = 64
READERS = 2
GLANCE_BUSY_MS = 50
CHECKPOINT_EVERY = 200
"""Commits between two WAL checkpoints, which run on a thread of their own (`store.checkpoints`);
a lengthy write's commit that changed anything has one of its own."""
HERE_UP_TO = 4
"""The most writes of one batch that run right there on the event loop (`_write_here`)."""
_LOOK = object()
"""On the writer's queue: look whether another process committed (see `look_for_foreign`)."""


class SqliteRunner:
    """Runs transactions: writes on the event loop or the writer thread, reads on the reader
    threads, and tiny reads (`glance`) on the event loop itself.

    After each commit the writer calls `on_commit` with whom the commit concerned (see
    `store.wakeups`); when it finds that another process committed, `on_foreign`. Both are
    called on the thread that ran the transaction, except `on_commit` when a `commit_loop` is
    given: then it runs on that loop, in the same turn that hands the batch's results back
    there, right after them. Only with a `commit_loop` do writes run on the loop (its own).

    `on_writer_busy` is told (on the commit loop) when the writer thread takes up writes of that
    loop, True, and when it has handed them all back, False: writes on the loop itself finish
    within one turn, those on the thread take several.

    Telling another process's commit from our own: `PRAGMA data_version` on the writer's own
    connection changes when any *other* connection commits, never for its own commits. The
    writer reads it inside each write transaction (under the write lock, so nothing commits
    in between) and whenever asked to look (`look_for_foreign`), so every foreign commit is
    seen by exactly one such read. The loop may take a look itself, right away, when the
    writer's connection is free (`look_here`, for `accounts_version`); `on_foreign` is then
    called on the loop. A look that sees another's commit also looks whether a newer agentpost
    migrated the file (`store.schema_watch`): from then on every call is refused, a write whose
    transaction has begun as well.
    """

    def __init__(
        self,
        path: Path,
        on_commit: Callable[[wakeups.Reach], None],
        on_foreign: Callable[[], None] = lambda: None,
        *,
        commit_loop: asyncio.AbstractEventLoop | None = None,
        on_writer_busy: Callable[[bool], None] | None = None,
    ) -> None:
        self.path = path
        self._on_commit = on_commit
        self._commit_loop = commit_loop
        self._on_writer_busy = on_writer_busy
        self._handed_over = 0
        """Writes of `commit_loop` on the writer thread's hands, results not yet handed back."""
        self._on_foreign = on_foreign
        self._data_version: int | None = None
        self._look_queued = False
        self.looks_begun = 0
        """How many looks the writer has begun (any thread may read it): one begun after some
        moment sees every commit of another process made before that moment."""
        self.batches_begun = 0
        """How many write transactions the writer has begun (any thread may read it): a change
        of the file while it grows is most likely one of them committing."""
        self.accounts_version = 0
        """Grows after each commit of a write that may touch accounts (keys, agents, sessions,
        lockouts) and whenever a look finds another process's commit, which may have; only
        while `_write_lock` is held (any thread may read it). See `look_here`."""
        self._write_engine = make_engine(path)
        self._read_engine = make_engine(path)
        self._glance_conn: Connection | None = None
        self._write_conn: Connection | None = self._write_engine.connect()
        """The writer's connection, for its thread and for the loop (`_write_here`), never for
        both at once: whoever uses it holds `_write_lock`, which the checkpointer holds too for a
        RESTART (`store.checkpoints`). None once the writer has stopped."""
        self._write_conn.exec_driver_sql("PRAGMA wal_autocheckpoint=0")
        inbox_bounds.keep(self._write_conn)  # it sees every other commit (below) before reading
        self._write_conn.commit()
        self._write_conn_waits = True
        """Whether the writer's connection waits out the busy timeout (`_waiting`)."""
        self._foreign_since_last_look(self._write_conn)  # the baseline
        # After it: a migration after the baseline is another process's commit, looked at later.
        self._schema = SchemaWatch(self._driver(self._write_conn))
        self._opened = OpenedFile(path)  # having read: the file's -wal and -shm are ours too
        self._write_lock = threading.Lock()
        self._here: list[Job] = []
        """Writes asked for during this turn of the event loop, for `_write_here`."""
        self._wrote_this_turn = False
        """A write already ran at once during this turn of the event loop (`_ask_here`)."""
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._reads: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self.checkpoints = Checkpoints(self._read_engine, self._write_lock)
        self._closing = False
        self._commits = 0
        self._threads = [
            threading.Thread(target=self._writer, name="agentpost-writer"),
            threading.Thread(target=self.checkpoints.run, name="agentpost-checkpointer"),
        ]
        self._threads += [
            threading.Thread(target=self._reader, name=f"agentpost-reader-{n}")
            for n in range(READERS)
        ]
        for thread in self._threads:
            thread.daemon = True
            thread.start()

    async def write(
        self,
        fn: Callable[[Connection], T],
        *,
        lengthy: bool = False,
        touches_accounts: bool = True,
    ) -> T:
        """Run `fn` in a write transaction, batched with the writes asked for meanwhile.

        Right here on the event loop when it can (see `_write_here`); a `lengthy` write (one
        that may take long, a sweep say) always runs on the writer thread, where it cannot
        hold up everything else the loop serves, in a transaction of its own (`_writer`).
        A write with `touches_accounts=False` leaves `accounts_version` as it was."""
        here = not lengthy and asyncio.get_running_loop() is self._commit_loop
        ask = self._ask_here if here else self._hand_over
        return await self._submit(ask, fn, touches_accounts=touches_accounts, lengthy=lengthy)

    def _ask_here(self, job: Job) -> None:
        """The first write of a turn of the loop runs at once, within its caller's step: put
        off to a callback, it would wait out the rest of the turn and the caller another turn
        for its answer, a third of an MCP `send`'s time over HTTP. The writes asked for later
        in that turn are concurrent ones, so they wait for the turn to end and are committed
        together, one transaction for all."""
        self._here.append(job)
        if len(self._here) > 1:
            return  # the batch this turn is gathering
        if self._wrote_this_turn:
            job.loop.call_soon(self._write_here)
            return
        self._wrote_this_turn = True
        job.loop.call_soon(self._turn_over)
        self._write_here()

    def _turn_over(self) -> None:
        self._wrote_this_turn = False

    def _write_here(self) -> None:
        """On the loop: the writes asked for (see `_ask_here`), as one batch, when they are
        few, nothing waits for the writer thread and the write lock is free at once. A
        hand-off to the thread and back would cost as much as a small transaction. Otherwise
        the thread takes them, in order, behind what it has: many writes at once (a
        broadcast's readers, say) come with much else for the loop to do, and the thread's
        SQLite work runs beside it."""
        batch, self._here = self._here, []
        if self._closing:
            apply([(job, None, closed()) for job in batch])
            return
        ran = False
        if (
            len(batch) <= HERE_UP_TO
            and self._jobs.empty()
            and self._write_lock.acquire(blocking=False)
        ):
            try:
                if self._write_conn is not None:
                    ran = self._run_batch(self._write_conn, batch, here=True)
            finally:
                self._write_lock.release()
        if not ran:
            for job in batch:
                self._hand_over(job)

    def _hand_over(self, job: Job) -> None:
        """Queue `job` for the writer thread. `on_writer_busy` hears (on the commit loop) when
        the thread takes that loop's first write, True, and when it hands the last one back."""
        if job.loop is self._commit_loop and self._on_writer_busy is not None:
            job.handed_back = self._handed_back
            self._handed_over += 1
            if self._handed_over == 1:
                self._on_writer_busy(True)
        self._jobs.put(job)

    def _handed_back(self) -> None:
        self._handed_over -= 1
        if self._handed_over == 0 and self._on_writer_busy is not None:
            self._on_writer_busy(False)

    async def read(self, fn: Callable[[Connection], T]) -> T:
        return await self._submit(self._reads.put, fn, touches_accounts=False)

    async def _submit(
        self,
        ask: Callable[[Job], None],
        fn: Callable[[Connection], T],
        *,
        touches_accounts: bool,
        lengthy: bool = False,
    ) -> T:
        self._refuse_when_unusable()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        ask(Job(fn, loop, future, touches_accounts=touches_accounts, lengthy=lengthy))
        return await future

    def look_for_foreign(self) -> None:
        """Have the writer look, after now, whether another process committed since its last
        look (`on_foreign` if so). Any thread; a look already queued covers this one too."""
        if not self._look_queued and not self._closing:
            self._look_queued = True
            self._jobs.put(_LOOK)  # type: ignore[arg-type]

    def _foreign_since_last_look(self, conn: Connection) -> bool:
        """With the writer's connection (`_write_lock` held): has another connection
        committed since the last call?"""
        self._look_queued = False  # a request from now on needs a look after this one
        self.looks_begun += 1
        driver = self._driver(conn)
        current = int(driver.execute("PRAGMA data_version").fetchone()[0])
        foreign = self._data_version is not None and current != self._data_version
        if foreign:  # a newer agentpost's migration is another process's commit
            inbox_bounds.forget(conn)
            self._schema.look(driver)  # if that fails, the next look sees this commit again
            self.accounts_version += 1
        self._data_version = current
        return foreign

    @staticmethod
    def _driver(conn: Connection) -> sqlite3.Connection:
        return driver_of(conn)

    def look_here(self) -> bool | None:
        """Look right now, on the calling thread, whether another process committed since the
        last look (`on_foreign` if so); None when the writer's connection is in use (or gone)
        and nobody can tell without waiting.

        With it `accounts_version` is exact at this moment: unchanged means no commit since
        it was read before could have changed an account, here or in another process."""
        if not self._write_lock.acquire(blocking=False):
            return None
        try:
            conn = self._write_conn
            if conn is None:
                return None
            try:
                self._waiting(conn, False)  # this is the event loop: never wait out the timeout
                foreign = self._foreign_since_last_look(conn)
            except (sqlite3.Error, DBAPIError):  # busy, say: the caller reads the store,
                self.look_for_foreign()  # and the writer takes the look that did not happen
                return None
        finally:
            self._write_lock.release()
        if foreign:
            self._on_foreign()
        return foreign

    def _refuse_when_unusable(self) -> None:
        if self._closing:  # no thread would ever take the job: refuse rather than wait forever
            raise closed()
        self._opened.check()
        self._schema.refuse()

    async def glance(self, fn: Callable[[Connection], T]) -> T:
        """Run a tiny indexed read right here on the event loop, on a connection of its own.

        For what every answer needs (the unread count, the newest delivery): a WAL read never
        waits for a writer, and handing it to a thread would cost more than the read itself.
        """
        self._refuse_when_unusable()
        if self._glance_conn is None:
            self._glance_conn = self._read_engine.connect()
            # Never hold the loop for long: a busy file sends the read to a reader thread.
            self._glance_conn.exec_driver_sql(f"PRAGMA busy_timeout={GLANCE_BUSY_MS}")
            self._glance_conn.commit()
        conn = self._glance_conn
        try:
            with transaction(conn):
                return fn(conn)
        except OperationalError:
            return await self.read(fn)
        except Exception as exc:
            raise released(exc) from None

    def _reader(self) -> None:
        """Connected at its first read, and again after a failed connect: a reader that died
        connecting (the file gone, the disk failing) would leave every later read waiting."""
        conn: Connection | None = None
        try:
            while (job := self._reads.get()) is not None:
                try:
                    if conn is None:
                        conn = self._read_engine.connect()
                    with transaction(conn):
                        result = job.fn(conn)
                except OperationalError as exc:
                    settle([(job, None, unavailable(exc))])
                except Exception as exc:  # the caller's error, raised where it awaits
                    settle([(job, None, released(exc))])
                else:
                    settle([(job, result, None)])
        finally:
            if conn is not None:
                conn.close()

    def _writer(self) -> None:
        """Commit the queued writes, in order, as many together as are queued; but a lengthy
        one alone: batched with it, the small writes beside it would be answered only once it
        commits (a purge's step behind two sends held them up for its whole merge)."""
        conn = self._write_conn
        assert conn is not None
        next_job: Job | None = None  # a lengthy write, found while gathering a batch
        with conn:
            while True:
                job, next_job = next_job or self._jobs.get(), None
                if job is None:
                    with self._write_lock:
                        self._write_conn = None
                    return
                if job is _LOOK:
                    with self._write_lock:
                        self._look(conn)
                    continue
                batch = [job]
                while not job.lengthy and len(batch) < MAX_BATCH:
                    try:
                        more = self._jobs.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        self._jobs.put(None)
                        break
                    if more is _LOOK:  # the batch's own look covers it (or re-asks)
                        continue
                    if more.lengthy:
                        next_job = more
                        break
                    batch.append(more)
                with self._write_lock:
                    self._run_batch(conn, batch)

    def _waiting(self, conn: Connection, wait: bool) -> None:
        """Whether statements on the writer's connection wait out another connection's lock
        (`BUSY_TIMEOUT_MS`, on the writer thread) or fail at once (0, on the event loop, which
        hands the write to the thread instead). A PRAGMA only when that changes: the loop,
        which takes the connection most often, leaves it as it needs it."""
        if wait != self._write_conn_waits:
            self._driver(conn).execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS if wait else 0}")
            self._write_conn_waits = wait

    def _look(self, conn: Connection) -> None:
        """A look of its own (`look_for_foreign`), between write transactions. Whatever fails
        here must not end the writer thread: every write of this process would wait forever."""
        try:
            self._waiting(conn, True)
            foreign = self._foreign_since_last_look(conn)
        except sqlite3.Error as exc:
            if busy(exc):  # busy past the timeout: look again
                self.look_for_foreign()
                return
            # Retrying at once could spin on a lasting fault; the next change of the file asks
            # again. Meanwhile nobody can rule out a foreign commit: every waiter looks.
            log.warning("could not tell whether another process committed", exc_info=True)
            foreign = True
        if foreign:
            self._on_foreign()

    def _run_batch(self, conn: Connection, batch: list[Job], *, here: bool = False) -> bool:
        """One write transaction for `batch`, its results handed back. `here`, on the event
        loop: only if the write lock is free at once; if not, False, and nothing done."""
        self.batches_begun += 1
        outcomes: list[Outcome] = []
        committed = None
        wakeups.take(conn)  # nothing left over from a failed batch
        looked = False
        raw = conn.connection.driver_connection
        changes_before = raw.total_changes if raw is not None else 0
        try:
            self._waiting(conn, not here)  # the loop never waits: the thread does, if it must
            with transaction(conn, immediate=True):
                foreign = self._foreign_since_last_look(conn)
                looked = True
                if foreign:
                    self._on_foreign()
                self._schema.refuse()  # migrated past us: nothing written with an old idea of it
                if len(batch) == 1:
                    job = batch[0]
                    outcomes.append((job, job.fn(conn), None))
                else:
                    for job in batch:
                        outcomes.append(self._run_in_savepoint(conn, job))
        except OperationalError as exc:
            if here and not looked:
                return False  # busy: the writer thread waits for the lock instead
            self._look_unless(looked)
            error = unavailable(exc)
            outcomes = [(job, None, error) for job in batch]
        except Exception as exc:  # a lone job failed: its transaction was rolled back
            self._look_unless(looked)
            outcomes = [(job, None, released(exc)) for job in batch]
        else:
            if any(err is None for _, _, err in outcomes):
                if any(job.touches_accounts for job in batch):
                    self.accounts_version += 1
                committed = self._committed(wakeups.take(conn))
                self._commits += 1
                # A lengthy write may write thousands of pages: it is not one commit of many.
                # One that changed nothing (a sweeper's look, once a minute) wrote none.
                large = batch[0].lengthy and raw is not None and raw.total_changes != changes_before
                if self._commits % CHECKPOINT_EVERY == 0 or large:
                    self.checkpoints.due()
        if here:  # on the results' loop: handed back now, in this very turn
            apply(outcomes, None if committed is None else committed[1])
        else:
            settle(outcomes, committed)
        return True

    def _committed(
        self, concerned: wakeups.Reach
    ) -> tuple[asyncio.AbstractEventLoop, Callable[[], None]] | None:
        """Tell `on_commit`: here, or, with a loop to call it on, along with the results."""
        if self._commit_loop is None:
            self._on_commit(concerned)
            return None
        return self._commit_loop, functools.partial(self._on_commit, concerned)

    def _look_unless(self, looked: bool) -> None:
        """A batch that never looked (it could not begin) may have swallowed a queued look:
        ask anew, or `_look_queued` would stay set and silence every later request."""
        if not looked:
            self._look_queued = False
            self.look_for_foreign()

    @staticmethod
    def _run_in_savepoint(conn: Connection, job: Job) -> Outcome:
        """One job of a batch: its failure undoes its own writes only.

        Plain SQL savepoints: SQLAlchemy's nested-transaction objects cost more than the SQL.
        An error inside leaves SQLAlchemy's connection usable: it never saw the savepoint.
        """
        raw(conn, "SAVEPOINT job")
        mark = wakeups.noted(conn)
        try:
            result = job.fn(conn)
        except Exception as exc:  # returned to that job's caller, raised where it awaits
            wakeups.forget_since(conn, mark)
            driver = conn.connection.driver_connection
            if driver is not None and not driver.in_transaction:
                raise  # SQLite undid the whole transaction (a full disk): the batch's failure
            raw(conn, "ROLLBACK TO job")
            raw(conn, "RELEASE job")
            return (job, None, released(exc))
        raw(conn, "RELEASE job")
        return (job, result, None)

    def _refuse_left_behind(self) -> None:
        """Refuse what was queued behind a thread's last job: a job let in by a look at
        `_closing` just before `close` set it (close runs on a thread of its own) would
        otherwise wait for an answer that never comes."""
        left: list[Outcome] = []
        for queued, takers in ((self._jobs, "agentpost-writer"), (self._reads, "agentpost-reader")):
            if any(t.is_alive() and t.name.startswith(takers) for t in self._threads):
                continue  # still at a last job past the join's timeout: it takes its marker yet
            while True:
                try:
                    job = queued.get_nowait()
                except queue.Empty:
                    break
                if isinstance(job, Job):
                    left.append((job, None, closed()))
        if left:
            settle(left)

    def close(self) -> None:
        self._closing = True
        self.checkpoints.close()
        self._jobs.put(None)
        for _ in range(READERS):
            self._reads.put(None)
        for thread in self._threads:
            thread.join(timeout=10)
        self._refuse_left_behind()
        if self._glance_conn is not None:
            self._glance_conn.close()
        self._write_engine.dispose()
        self._read_engine.dispose()
