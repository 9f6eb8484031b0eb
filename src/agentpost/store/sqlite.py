"""Everything SQLite-specific: the file, its pragmas, the one writer, full-text search.

Writes go through a single writer thread per process, as Datasette does: each transaction opens
with `BEGIN IMMEDIATE`, so two processes never deadlock upgrading a read lock, and concurrent
writes of this process are committed together (one lock, one WAL append) with a savepoint each,
so one refused write never undoes its neighbours. Reads run on a few reader threads that each
keep one connection open, and never wait for the writer. Long-lived threads with their own
connections cost one hand-off per transaction, a fraction of a pool checkout on a fresh thread.
"database is locked" is handled here only: a busy timeout waits, and what still fails reaches
callers as `unavailable`. The statements of the hot paths skip SQLAlchemy's execution machinery:
compiled once (`Compiled`, for `store.prepared`), they go straight to the sqlite3 connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import queue
import sqlite3
import threading
from collections import namedtuple
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DBAPIError, InvalidRequestError, OperationalError
from sqlalchemy.pool import NullPool
from sqlalchemy.sql import ColumnElement, Insert
from sqlalchemy.sql.schema import Table

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.store import wakeups
from agentpost.store.fulltext import search as search  # the dialect's matching

log = logging.getLogger(__name__)

T = TypeVar("T")

BUSY_TIMEOUT_MS = 30_000
MAX_BATCH = 64
READERS = 2
GLANCE_BUSY_MS = 50
CHECKPOINT_EVERY = 200
"""Commits between two WAL checkpoints, which run on a thread of their own."""


def database_path(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///")).expanduser()


def prepare_file(path: Path) -> None:
    """Create the folder (0700) and the file (0600) before SQLite does, so both stay private."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists():
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
        os.close(fd)
    os.chmod(path, 0o600)


def journal_mode(path: Path) -> str:
    with contextlib.closing(sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000)) as db:
        return str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower()


def ensure_wal(path: Path) -> None:
    """Put the file in WAL mode, once, under the caller's migration lock.

    WAL is a property of the file, so connections need not ask for it; asking on every connect
    races other processes for the exclusive lock the switch takes, and SQLite refuses such a
    race at once instead of waiting out the busy timeout."""
    with contextlib.closing(sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000)) as db:
        if str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
            db.execute("PRAGMA journal_mode=WAL")


def make_engine(path: Path, *, pooled: bool = True) -> Engine:
    """An engine whose connections leave transactions to us: say them with `transaction`."""
    engine = create_engine(
        f"sqlite:///{path}",
        connect_args={"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000},
        poolclass=None if pooled else NullPool,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we say BEGIN ourselves
        cursor = dbapi_connection.cursor()
        # No journal_mode here: `ensure_wal` set it on the file once.
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    return engine


@contextlib.contextmanager
def transaction(conn: Connection, *, immediate: bool = False) -> Iterator[None]:
    """A transaction, `BEGIN IMMEDIATE` for one that reads before it writes (the write lock
    first, so it never fails half-way for want of it).

    SQLAlchemy commits and rolls back; the BEGIN goes straight to sqlite3. Saying it from an
    engine "begin" event, the usual recipe, would make every statement on the engine pay for
    event dispatch (about a quarter of an insert's cost through SQLAlchemy).
    """
    with conn.begin():
        _raw(conn, "BEGIN IMMEDIATE" if immediate else "BEGIN")
        yield


def _raw(conn: Connection, sql: str) -> None:
    """Transaction control straight on the sqlite3 connection: through SQLAlchemy's execution
    machinery it costs ten times the statement, on every transaction and every job."""
    _execute(conn, sql, ())


def _execute(
    conn: Connection, sql: str, values: Sequence[Any], *, many: bool = False
) -> tuple[list[tuple[Any, ...]], Any]:
    """Run `sql` on the sqlite3 connection (`many`: once per row of `values`, no results): its
    rows, and the cursor's description of them."""
    driver: sqlite3.Connection | None = conn.connection.driver_connection
    assert driver is not None
    try:
        if many:
            driver.executemany(sql, values)
            return [], None
        cursor = driver.execute(sql, values)
        return cursor.fetchall(), cursor.description
    except sqlite3.Error as exc:  # as SQLAlchemy would say it ("database is locked": busy)
        raise DBAPIError.instance(sql, values, exc, sqlite3.Error) from exc


@dataclass
class _Job:
    fn: Callable[[Connection], Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]


Outcome = tuple[_Job, Any, BaseException | None]
_LOOK = object()
"""On the writer's queue: look whether another process committed (see `look_for_foreign`)."""


def _apply(outcomes: list[Outcome], before: Callable[[], None] | None = None) -> None:
    try:
        if before is not None:
            before()
    finally:  # whatever `before` raised (the loop logs it), the callers get their results
        for job, result, error in outcomes:
            if job.future.done():  # the caller gave up waiting; the write stands
                continue
            if error is not None:
                job.future.set_exception(error)
            else:
                job.future.set_result(result)


def _settle(
    outcomes: list[Outcome],
    first: tuple[asyncio.AbstractEventLoop, Callable[[], None]] | None = None,
) -> None:
    """Hand results back with one wake-up per event loop for a whole batch, not one per job;
    `first` runs on its loop before that loop's results are handed back, in the same wake-up."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Outcome]] = {}
    if first is not None:
        by_loop[first[0]] = []
    for outcome in outcomes:
        by_loop.setdefault(outcome[0].loop, []).append(outcome)
    for loop, items in by_loop.items():
        before = first[1] if first is not None and first[0] is loop else None
        with contextlib.suppress(RuntimeError):  # that loop has closed: nobody is waiting
            loop.call_soon_threadsafe(_apply, items, before)


def _busy(exc: sqlite3.Error) -> bool:
    """The file stayed locked past the busy timeout (extended codes keep the primary low byte).
    Errors the module raises itself (a closed connection) carry no code."""
    code: int | None = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _locked(exc: OperationalError) -> AgentpostError:
    return AgentpostError(ErrorCode.UNAVAILABLE, f"the database is busy, try again ({exc.orig})")


class SqliteRunner:
    """Runs transactions: writes on the writer thread, reads on the reader threads, and tiny
    reads (`glance`) on the event loop itself.

    After each commit the writer calls `on_commit` with whom the commit concerned (see
    `store.wakeups`); when it finds that another process committed, `on_foreign`. Both are
    called on the writer thread, except `on_commit` when a `commit_loop` is given: then it runs
    on that loop, in the same wake-up that hands the batch's results back there, before them.

    Telling another process's commit from our own: `PRAGMA data_version` on the writer's own
    connection changes when any *other* connection commits, never for its own commits. The
    writer reads it inside each write transaction (under the write lock, so nothing commits
    in between) and whenever asked to look (`look_for_foreign`), so every foreign commit is
    seen by exactly one such read.
    """

    def __init__(
        self,
        path: Path,
        on_commit: Callable[[wakeups.Reach], None],
        on_foreign: Callable[[], None] = lambda: None,
        *,
        commit_loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.path = path
        self._on_commit = on_commit
        self._commit_loop = commit_loop
        self._on_foreign = on_foreign
        self._data_version: int | None = None
        self._look_queued = False
        self.looks_begun = 0
        """How many looks the writer has begun (any thread may read it): one begun after some
        moment sees every commit of another process made before that moment."""
        self.batches_begun = 0
        """How many write transactions the writer has begun (any thread may read it): a change
        of the file while it grows is most likely one of them committing."""
        self._write_engine = make_engine(path)
        self._read_engine = make_engine(path)
        self._glance_conn: Connection | None = None
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._reads: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._checkpoint_due = threading.Event()
        self._closing = False
        self._commits = 0
        self._threads = [
            threading.Thread(target=self._writer, name="agentpost-writer"),
            threading.Thread(target=self._checkpointer, name="agentpost-checkpointer"),
        ]
        self._threads += [
            threading.Thread(target=self._reader, name=f"agentpost-reader-{n}")
            for n in range(READERS)
        ]
        for thread in self._threads:
            thread.daemon = True
            thread.start()

    async def write(self, fn: Callable[[Connection], T]) -> T:
        return await self._submit(self._jobs, fn)

    async def read(self, fn: Callable[[Connection], T]) -> T:
        return await self._submit(self._reads, fn)

    async def _submit(
        self, jobs: queue.SimpleQueue[_Job | None], fn: Callable[[Connection], T]
    ) -> T:
        self._refuse_when_closing()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        jobs.put(_Job(fn, loop, future))
        return await future

    def look_for_foreign(self) -> None:
        """Have the writer look, after now, whether another process committed since its last
        look (`on_foreign` if so). Any thread; a look already queued covers this one too."""
        if not self._look_queued and not self._closing:
            self._look_queued = True
            self._jobs.put(_LOOK)  # type: ignore[arg-type]

    def _foreign_since_last_look(self, conn: Connection) -> bool:
        """On the writer thread: has another connection committed since the last call?"""
        self._look_queued = False  # a request from now on needs a look after this one
        self.looks_begun += 1
        raw = conn.connection.driver_connection
        assert raw is not None
        current = int(raw.execute("PRAGMA data_version").fetchone()[0])
        seen, self._data_version = self._data_version, current
        return seen is not None and current != seen

    def _refuse_when_closing(self) -> None:
        if self._closing:  # no thread would ever take the job: refuse rather than wait forever
            raise AgentpostError(ErrorCode.UNAVAILABLE, "the post office is closing")

    async def glance(self, fn: Callable[[Connection], T]) -> T:
        """Run a tiny indexed read right here on the event loop, on a connection of its own.

        For what every answer needs (the unread count, the newest delivery): a WAL read never
        waits for a writer, and handing it to a thread would cost more than the read itself.
        """
        self._refuse_when_closing()
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

    def _reader(self) -> None:
        with self._read_engine.connect() as conn:
            while (job := self._reads.get()) is not None:
                try:
                    with transaction(conn):
                        result = job.fn(conn)
                except OperationalError as exc:
                    _settle([(job, None, _locked(exc))])
                except Exception as exc:  # the caller's error, raised where it awaits
                    _settle([(job, None, exc)])
                else:
                    _settle([(job, result, None)])

    def _checkpointer(self) -> None:
        """Copy the WAL back into the database off the write path.

        SQLite's automatic checkpoint runs inside the commit that crosses 1,000 pages, so one
        unlucky send would wait for it (hundreds of ms with an fsync). The writer connection
        turns it off and this thread does the same work, PASSIVE, beside the writer.
        """
        with self._read_engine.connect() as conn:
            while True:
                self._checkpoint_due.wait()
                self._checkpoint_due.clear()
                if self._closing:
                    return
                with contextlib.suppress(OperationalError):
                    conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")

    def _writer(self) -> None:
        with self._write_engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_autocheckpoint=0")
            conn.commit()
            self._foreign_since_last_look(conn)  # the baseline
            while True:
                job = self._jobs.get()
                if job is None:
                    return
                if job is _LOOK:
                    self._look(conn)
                    continue
                batch = [job]
                while len(batch) < MAX_BATCH:
                    try:
                        more = self._jobs.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        self._jobs.put(None)
                        break
                    if more is not _LOOK:  # the batch's own look covers it (or re-asks)
                        batch.append(more)
                self._run_batch(conn, batch)

    def _look(self, conn: Connection) -> None:
        """A look of its own (`look_for_foreign`), between write transactions. Whatever fails
        here must not end the writer thread: every write of this process would wait forever."""
        try:
            foreign = self._foreign_since_last_look(conn)
        except sqlite3.Error as exc:
            if _busy(exc):  # busy past the timeout: look again
                self.look_for_foreign()
                return
            # Retrying at once could spin on a lasting fault; the next change of the file asks
            # again. Meanwhile nobody can rule out a foreign commit: every waiter looks.
            log.warning("could not tell whether another process committed", exc_info=True)
            foreign = True
        if foreign:
            self._on_foreign()

    def _run_batch(self, conn: Connection, batch: list[_Job]) -> None:
        self.batches_begun += 1
        outcomes: list[Outcome] = []
        wakeups.take(conn)  # nothing left over from a failed batch
        looked = False
        try:
            with transaction(conn, immediate=True):
                foreign = self._foreign_since_last_look(conn)
                looked = True
                if foreign:
                    self._on_foreign()
                if len(batch) == 1:
                    job = batch[0]
                    outcomes.append((job, job.fn(conn), None))
                else:
                    for job in batch:
                        outcomes.append(self._run_in_savepoint(conn, job))
        except OperationalError as exc:
            self._look_unless(looked)
            error = _locked(exc)
            _settle([(job, None, error) for job in batch])
            return
        except Exception as exc:  # a lone job failed: its transaction was rolled back
            self._look_unless(looked)
            _settle([(job, None, exc) for job in batch])
            return
        committed = None
        if any(err is None for _, _, err in outcomes):
            committed = self._committed(wakeups.take(conn))
            self._commits += 1
            if self._commits % CHECKPOINT_EVERY == 0:
                self._checkpoint_due.set()
        _settle(outcomes, committed)

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
    def _run_in_savepoint(conn: Connection, job: _Job) -> Outcome:
        """One job of a batch: its failure undoes its own writes only.

        Plain SQL savepoints: SQLAlchemy's nested-transaction objects cost more than the SQL.
        An error inside leaves SQLAlchemy's connection usable: it never saw the savepoint.
        """
        _raw(conn, "SAVEPOINT job")
        mark = wakeups.noted(conn)
        try:
            result = job.fn(conn)
        except Exception as exc:  # returned to that job's caller, raised where it awaits
            wakeups.forget_since(conn, mark)
            _raw(conn, "ROLLBACK TO job")
            _raw(conn, "RELEASE job")
            return (job, None, exc)
        _raw(conn, "RELEASE job")
        return (job, result, None)

    def close(self) -> None:
        self._closing = True
        self._checkpoint_due.set()
        self._jobs.put(None)
        for _ in range(READERS):
            self._reads.put(None)
        for thread in self._threads:
            thread.join(timeout=10)
        if self._glance_conn is not None:
            self._glance_conn.close()
        self._write_engine.dispose()
        self._read_engine.dispose()


# -- statements compiled once (store.prepared) ---------------------------------------------------

_REQUIRED = object()


class Compiled:
    """A Core statement as SQLite's text and its parameters in order, run on the sqlite3
    connection under the caller's transaction (see `store.prepared`). Rows come back as named
    tuples, read by position or by column name as SQLAlchemy's rows are."""

    __slots__ = ("_row", "slots", "sql")

    def __init__(self, sql: str, slots: list[tuple[str, Any, Callable[[Any], Any] | None]]):
        self.sql = sql
        self.slots = slots
        """Each `?` in order: the parameter's name, its value when the caller gives none
        (`_REQUIRED` where the caller must), and the type's conversion, if it has one."""
        self._row: Callable[[tuple[Any, ...]], Any] | None = None

    @classmethod
    def of(cls, statement: Any, dialect: Any, keys: list[str] | None) -> Compiled:
        compiled = statement.compile(dialect=dialect, column_keys=keys)
        if compiled.insert_prefetch or compiled.update_prefetch:
            raise ValueError("a column default computed in Python cannot be prepared")
        slots = []
        for name in compiled.positiontup or ():
            bind = compiled.binds[name]
            if bind.expanding or bind.literal_execute:
                raise ValueError(f"parameter {name!r} is rendered per execution")
            value = _REQUIRED if bind.required else bind.effective_value
            slots.append((name, value, bind.type.bind_processor(dialect)))
        return cls(compiled.string, slots)

    def _values(self, params: Mapping[str, Any]) -> list[Any]:
        values = []
        for name, default, convert in self.slots:
            if default is _REQUIRED:
                if name not in params:  # in SQLAlchemy's words
                    raise InvalidRequestError(f"A value is required for bind parameter {name!r}")
                value = params[name]
            else:
                value = params.get(name, default)
            values.append(value if convert is None else convert(value))
        return values

    def rows(self, conn: Connection, params: Mapping[str, Any]) -> list[Any]:
        found, description = _execute(conn, self.sql, self._values(params))
        if not found:
            return found
        if self._row is None:  # the columns' names, from the first result
            names = [d[0] for d in description]
            self._row = namedtuple("Row", names, rename=True)._make  # type: ignore[attr-defined]
        make = self._row
        return [make(row) for row in found]

    def run_many(self, conn: Connection, many: Sequence[Mapping[str, Any]]) -> None:
        _execute(conn, self.sql, [self._values(params) for params in many], many=True)


# -- what SQL differs ---------------------------------------------------------------------------


def insert_ignore(table: Table) -> Insert:
    return sqlite_insert(table).on_conflict_do_nothing()


def upsert(
    table: Table,
    keys: list[str],
    values: dict[str, Any],
    update: dict[str, Any],
    where: ColumnElement[bool] | None = None,
) -> Insert:
    """Insert, or update the row that holds `keys` — only if `where` holds for it, if given."""
    stmt = sqlite_insert(table).values(**values)
    return stmt.on_conflict_do_update(index_elements=keys, set_=update, where=where)
