"""Everything SQLite-specific but the runner (`store.sqlite_runner`): the file, its pragmas,
transactions, statements compiled once, full-text search, the SQL that differs.

"database is locked" is handled here and in the runner only: a busy timeout waits, and what
still fails reaches callers as `unavailable`. The statements of the hot paths skip SQLAlchemy's
execution machinery: compiled once (`Compiled`, for `store.prepared`), they go straight to the
sqlite3 connection.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import stat
from collections import namedtuple
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import URL, Connection, Engine, create_engine, event
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DBAPIError, InvalidRequestError, OperationalError
from sqlalchemy.pool import NullPool
from sqlalchemy.sql import ColumnElement, Insert
from sqlalchemy.sql.schema import Table

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.store.fulltext import search as search  # the dialect's matching

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 30_000


def database_path(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///")).expanduser()


def prepare_file(path: Path) -> None:
    """Create the folder (0700) and the file (0600) before SQLite does, so both stay private.
    A place that cannot hold them is `unavailable`, naming it, not a traceback; a path that
    names something other than a file (a folder, a device) is refused before it is touched."""
    with kept_at(path):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not path.exists():
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
            os.close(fd)
        if not path.is_file():
            raise AgentpostError(
                ErrorCode.INVALID_ARGUMENT,
                f"the database {path} is not a file",
                details={"path": str(path)},
            )
        os.chmod(path, stat.S_IMODE(path.stat().st_mode) & 0o600)  # never more than it had


@contextlib.contextmanager
def kept_at(path: Path) -> Iterator[None]:
    """What the file system or SQLite says when a place cannot hold the post office (a
    read-only folder, a full disk, a file that is no database) is `unavailable`, naming it."""
    try:
        yield
    except (OSError, sqlite3.Error, DBAPIError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else None
        raise AgentpostError(
            ErrorCode.UNAVAILABLE,
            f"cannot keep the post office at {path}: {reason or exc}",
            details={"path": str(path)},
        ) from None


def busy(exc: sqlite3.Error) -> bool:
    """The file stayed locked past the busy timeout (extended codes keep the primary low byte).
    Errors the module raises itself (a closed connection) carry no code."""
    code: int | None = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


_WHY = {
    sqlite3.SQLITE_FULL: "the disk that holds the database is full; free some space",
    sqlite3.SQLITE_READONLY: "the database cannot be written (read-only)",
    sqlite3.SQLITE_IOERR: "reading or writing the database failed (an I/O error)",
}
"""What SQLite's answer means for the owner, where "busy, try again" would mislead them."""


MIN_FREE_BYTES = 1 << 20
"""Free space below which the disk counts as full: a few sends' growth of the WAL."""


def refuses_writes(path: Path) -> str | None:
    """Why the file takes no writes now though it answers reads (None: it takes them): a
    write that then fails would be each caller's `unavailable`, so a replica says it first."""
    try:
        if not os.access(path, os.W_OK):
            return _WHY[sqlite3.SQLITE_READONLY]
        disk = os.statvfs(path)
    except OSError as exc:
        return f"{_WHY[sqlite3.SQLITE_IOERR]}: {exc.strerror}"
    if disk.f_flag & os.ST_RDONLY:
        return _WHY[sqlite3.SQLITE_READONLY]
    if disk.f_bavail * disk.f_frsize < MIN_FREE_BYTES:
        return _WHY[sqlite3.SQLITE_FULL]
    return None


def unavailable(exc: OperationalError) -> AgentpostError:
    """What SQLite refused, as `unavailable`: busy past the timeout, or something that waiting
    will not mend, said as such."""
    code: int | None = getattr(exc.orig, "sqlite_errorcode", None)
    why = _WHY.get(code & 0xFF if code is not None else -1, "the database is busy, try again")
    return AgentpostError(ErrorCode.UNAVAILABLE, f"{why} ({exc.orig})")


class OpenedFile:
    """The database file a process opened. Once its path names another (a user deleted it to
    start over, or moved a backup into place), every transaction is refused: work kept on in
    the old, unlinked file would be lost with the last process holding it, while new processes
    used the new one, two post offices that may even share a WAL.

    So for its `-wal` and `-shm`: while this process keeps a connection open, SQLite never
    removes them (only the last connection to close does), so either gone or another means a
    user deleted them, and a process started after keeps a log of its own on the same file.
    Make it once this process has read the file, so that its connection holds them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        files = [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]
        identities = [self._now(str(file)) for file in files]
        # A log never seen is not watched. Paths as text: each check stats all three, on
        # every transaction, and a Path would be turned into text each time.
        self._watched = [
            (str(file), identity)
            for file, identity in zip(files, identities, strict=True)
            if identity is not None or file is path
        ]
        self._told = False

    @staticmethod
    def _now(file: str) -> tuple[int, int] | None:
        try:
            found = os.stat(file)
        except OSError:
            return None
        return found.st_dev, found.st_ino

    def check(self) -> None:
        """`unavailable`, naming the file, once its path no longer names the file opened."""
        for file, identity in self._watched:
            if self._now(file) != identity:
                self._refuse(Path(file))

    def _refuse(self, file: Path) -> None:
        refusal = AgentpostError(
            ErrorCode.UNAVAILABLE,
            f"the database {file} was deleted or replaced while this process used it; "
            "restart agentpost (the MCP server, the service) to use the file there now",
            details={"path": str(file)},
        )
        if not self._told:
            self._told = True
            log.error("%s", refusal.message)
        raise refusal


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
        URL.create("sqlite", database=str(path)),  # a `?`, `#` or `%` in it is the path's own
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
        # What is deleted or overwritten is zeroed, not left in free space: a body cleared on
        # ack, or mail past retention, leaves no words in the file (see `store.fulltext`).
        cursor.execute("PRAGMA secure_delete=ON")
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
        raw(conn, "BEGIN IMMEDIATE" if immediate else "BEGIN")
        yield


def driver_of(conn: Connection) -> sqlite3.Connection:
    """The sqlite3 connection under `conn`: for a driver like sqlite3 the pool's
    `dbapi_connection` is it, one attribute away where `driver_connection` is three
    properties, on every statement."""
    driver: sqlite3.Connection | None = conn.connection.dbapi_connection  # type: ignore[assignment]
    assert driver is not None
    return driver


def raw(conn: Connection, sql: str) -> None:
    """Transaction control straight on the sqlite3 connection: through SQLAlchemy's execution
    machinery it costs ten times the statement, on every transaction and every job."""
    _execute(conn, sql, ())


def _execute(
    conn: Connection, sql: str, values: Sequence[Any], *, many: bool = False
) -> tuple[list[tuple[Any, ...]], Any]:
    """Run `sql` on the sqlite3 connection (`many`: once per row of `values`, no results): its
    rows, and the cursor's description of them."""
    driver = driver_of(conn)
    try:
        if many:
            driver.executemany(sql, values)
            return [], None
        cursor = driver.execute(sql, values)
        return cursor.fetchall(), cursor.description
    except sqlite3.Error as exc:  # as SQLAlchemy would say it ("database is locked": busy)
        raise DBAPIError.instance(sql, values, exc, sqlite3.Error) from exc


# -- statements compiled once (store.prepared) ---------------------------------------------------

_REQUIRED = object()


class Compiled:
    """A Core statement as SQLite's text and its parameters in order, run on the sqlite3
    connection under the caller's transaction (see `store.prepared`). Rows come back as named
    tuples, read by position or by column name as SQLAlchemy's rows are."""

    __slots__ = ("_converts", "_defaults", "_names", "_required", "_row", "sql")

    def __init__(self, sql: str, slots: list[tuple[str, Any, Callable[[Any], Any] | None]]):
        """`slots`: each `?` in order, as the parameter's name, its value when the caller
        gives none (`_REQUIRED` where the caller must), and the type's conversion, if any."""
        self.sql = sql
        self._names = [name for name, _, _ in slots]
        self._defaults = [None if value is _REQUIRED else value for _, value, _ in slots]
        self._required = frozenset(name for name, value, _ in slots if value is _REQUIRED)
        self._converts = [(i, convert) for i, (_, _, convert) in enumerate(slots) if convert]
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
        """The parameters in order, converted: one pass in C over the names (a statement
        of the send path sets up to 15), the few conversions (floats, booleans) after."""
        if not params.keys() >= self._required:
            missing = next(n for n in self._names if n in self._required and n not in params)
            raise InvalidRequestError(f"A value is required for bind parameter {missing!r}")
        values = list(map(params.get, self._names, self._defaults))
        for i, convert in self._converts:
            values[i] = convert(values[i])
        return values

    def rows(self, conn: Connection, params: Mapping[str, Any]) -> list[Any]:
        found, description = _execute(conn, self.sql, self._values(params))
        if not found:
            return found
        if self._row is None:  # the columns' names, from the first result
            names = [d[0] for d in description]
            self._row = namedtuple("Row", names, rename=True)._make  # type: ignore[attr-defined]
        return list(map(self._row, found))

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
