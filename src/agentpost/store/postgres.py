"""Everything PostgreSQL-specific: the asyncpg engine, upserts, text search, and hearing the
other replicas' commits.

Transactions run the same synchronous query functions as on SQLite, through SQLAlchemy's
`run_sync` bridge over asyncpg, so there is one set of queries for both databases.

Replicas share no file to watch. Each write transaction announces whom it concerned with
`NOTIFY` (delivered only once it commits, and only if it does), and each replica `LISTEN`s
on one connection of its own, so a long-poll on one replica wakes for a send made through
another as it would for its own (`store.wakeups`). A migration announces itself on the same
channel, and a replica older than it then refuses every call (`store.schema_watch`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import asyncpg
from sqlalchemy import Connection, event, func, literal, literal_column, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import DBAPIError, DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.sql import ColumnElement, Insert, Select
from sqlalchemy.sql.schema import Table

from agentpost.config import POSTGRES_SCHEMES
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.limits import not_unicode
from agentpost.store import schema, wakeups
from agentpost.store.schema_watch import NewerSchema

log = logging.getLogger(__name__)

T = TypeVar("T")

NEWS_CHANNEL = "agentpost_commits"
"""The `LISTEN/NOTIFY` channel of commits; channels are the database's own, so two post
offices on two databases of one server never hear each other."""
MAX_ANNOUNCEMENT_BYTES = 7_900
"""PostgreSQL refuses a payload of 8,000 bytes or more: a commit concerning more agents than
fit (a broadcast to a big channel) is announced in several NOTIFYs."""
MAX_ANNOUNCEMENTS = 16
"""Beyond this many NOTIFYs (some 4,000 agents), one without names, which wakes every waiter."""
LISTENER_NAME = "agentpost-listener"
"""The `application_name` of each replica's listening connection."""
LISTEN_RETRY_S = 0.25
LISTEN_RETRY_MAX_S = 5.0
LISTEN_STEADY_S = 10.0
"""A listening connection that lasted this long was a good one: the next loss retries at
once again, rather than after the backoff that connections lost as soon as opened earn."""
PG_POLL_S = 1.0
"""While the other replicas' commits cannot be heard, how often each waiter looks anyway."""
HEARING_POLL_S = 30.0
"""While they are heard, how often each waiter looks all the same: a safety net for a
notification that never comes (a pooler in transaction mode, which drops LISTEN)."""
LISTEN_CHECK_S = 2.0
"""How long a listening connection may stay quiet before it is asked the schema's revision (and
how long that may take): one dropped without a word (a network gone) is found out within twice
this, and a migration whose announcement went unheard within this."""

_ANNOUNCE = text("SELECT pg_notify(:channel, :payload)")
_MIGRATED = '{"migrated":'
"""How a migration's announcement begins (`announce_migration`)."""
WRITE_LOCK = text(f"SELECT pg_advisory_xact_lock({0x61676E7477726974})")  # "agntwrit"
"""Taken first by every write transaction, held till it ends: writes take turns, as on SQLite."""


def libpq_url(url: str) -> str:
    """The URL as libpq spells it, for asyncpg's own parser: it reads the options a PostgreSQL
    URL carries (`sslmode`, `application_name`, `connect_timeout`, …), where SQLAlchemy's
    would hand each to `asyncpg.connect` as a keyword it does not take."""
    for prefix in POSTGRES_SCHEMES:
        if url.startswith(prefix):
            return "postgresql://" + url.removeprefix(prefix)
    raise ValueError(f"not a PostgreSQL URL: {url}")


def _partial_indexes_alike() -> None:
    """Each partial index of the schema holds the same rows here as on SQLite, whose keyword
    alone `store.schema` names (it would load this dialect into every process otherwise)."""
    for table in schema.metadata.tables.values():
        for index in table.indexes:
            where = index.dialect_options["sqlite"]["where"]
            if where is not None:
                index.dialect_options["postgresql"]["where"] = where


_partial_indexes_alike()


_UNSTORABLE_TEXT = frozenset({"22021", "22P05"})
"""SQLSTATEs of text PostgreSQL cannot hold (a NUL character): the caller's input, not a bug."""
_BUSY = frozenset({"55P03", "57014", "53300"})
"""Waited too long for a lock or a statement, or no connection slot free: busy, try again."""
_READ_ONLY = "25006"
"""A write in a read-only transaction: the database takes none (a standby server, which a
failover may leave the URL naming, or a database set `default_transaction_read_only`)."""
_SHORT_OF_RESOURCES = ("53", "58")
"""SQLSTATE classes of a server out of disk, memory or some limit, or whose own I/O failed."""
_REFUSED_CONNECTION = ("28", "3D", "55000")
"""SQLSTATEs of a connection refused as it opens (no statement of ours ran): a password or
role refused, a database that is not there, one closed to connections."""
_ENCODING_AND_CTYPE = text(
    # Whether a letter beyond ASCII is a letter is asked of the database itself: with the
    # ICU or builtin provider, `datctype` says nothing of it.
    "SELECT pg_encoding_to_char(encoding), datctype, 'é' ~ '[[:alpha:]]' FROM pg_database"
    " WHERE datname = current_database()"
)
_GONE_CLASSES = ("08", "57P")
"""SQLSTATE classes of a connection lost or a server shutting down or starting up."""
LOCK_TIMEOUT_S = 10
"""How long a transaction waits for a lock (the write lock above all) before it answers
`unavailable`: a replica that froze holding the write lock holds up the others no longer."""
IDLE_IN_TRANSACTION_S = 15
"""How long PostgreSQL lets a transaction sit idle before it ends the session: a replica that
froze mid-transaction (a paused VM, a network gone) releases the write lock after this."""
_GENERATION = "agentpost.generation"
"""Where a pooled connection keeps the number of listening connections lost before it opened."""


_TAKES_WRITES = text(
    "SELECT pg_is_in_recovery(), current_setting('default_transaction_read_only') = 'on'"
)


def refuses_writes(conn: Connection) -> str | None:
    """Why the server takes no writes though it answers reads (None: it takes them): a
    standby, or a database set `default_transaction_read_only`."""
    standby, read_only = conn.execute(_TAKES_WRITES).one()
    if standby:
        return "the database is read-only: a standby server (in recovery)"
    if read_only:
        return "the database is read-only (default_transaction_read_only is on)"
    return None


@contextmanager
def unavailable_when_unreachable() -> Iterator[None]:
    """A server that is down, restarting, refusing connections or writes, short of disk or
    memory, busy past the lock timeout, or dropped the connection: `unavailable`, try again.
    Text the database cannot hold: `invalid_argument`.

    The caller hears a fixed sentence: the driver's own message quotes the statement and its
    parameters (a key's digest, an address), which are the server log's to keep.
    Errors of our own SQL (constraint violations, bad queries) stay what they are: bugs.
    """
    try:
        yield
    except PoolTimeout as exc:
        log.warning("no database connection free in time: %s", exc)
        raise AgentpostError(ErrorCode.UNAVAILABLE, "the database is busy; try again") from exc
    except (OperationalError, InterfaceError, OSError) as exc:
        log.warning("the database is unreachable: %s", exc)
        raise AgentpostError(ErrorCode.UNAVAILABLE, "the database is unreachable") from exc
    except DBAPIError as exc:
        state = str(getattr(exc.orig, "sqlstate", None) or "")
        if exc.statement is None and state.startswith(_REFUSED_CONNECTION):
            log.warning("the database refused the connection: %s", exc)
            raise AgentpostError(ErrorCode.UNAVAILABLE, "the database is unreachable") from exc
        if exc.connection_invalidated or state.startswith(_GONE_CLASSES):
            log.warning("database connection lost: %s", exc)
            raise AgentpostError(ErrorCode.UNAVAILABLE, "database connection lost") from exc
        if state in _BUSY:
            log.warning("the database is busy: %s", exc)
            raise AgentpostError(ErrorCode.UNAVAILABLE, "the database is busy; try again") from exc
        if state == _READ_ONLY:
            log.warning("the database takes no writes: %s", exc.orig)
            raise AgentpostError(
                ErrorCode.UNAVAILABLE,
                "the database is read-only (a standby server?); try again once it takes writes",
            ) from exc
        if state.startswith(_SHORT_OF_RESOURCES):
            log.warning("the database server cannot do it now: %s", exc.orig)
            raise AgentpostError(
                ErrorCode.UNAVAILABLE,
                "the database server is out of disk, memory or another resource; try again",
            ) from exc
        if state in _UNSTORABLE_TEXT:
            raise AgentpostError(
                ErrorCode.INVALID_ARGUMENT, "text may not contain NUL characters"
            ) from exc
        if _caused_by_encoding(exc):  # asyncpg could not encode a parameter as UTF-8
            raise not_unicode("a value") from exc
        raise


def _caused_by_encoding(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, UnicodeEncodeError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def announcements(replica: str, concerned: wakeups.Reach) -> list[str]:
    """The payloads of a commit's NOTIFYs: who committed, and whom it concerned, as many to a
    payload as fit (one naming nobody when they are too many to name). ASCII JSON: a
    character is a byte."""

    def payload(chunk: dict[str, int] | None) -> str:
        return json.dumps([replica, chunk], separators=(",", ":"))

    empty = len(payload({}))
    payloads: list[str] = []
    chunk: dict[str, int] = {}
    size = empty
    for agent, seq in concerned.items():
        entry = len(json.dumps(agent)) + len(str(seq)) + 2  # "name":seq,
        if chunk and size + entry > MAX_ANNOUNCEMENT_BYTES:
            payloads.append(payload(chunk))
            chunk, size = {}, empty
        chunk[agent] = seq
        size += entry
    if chunk or not payloads:
        payloads.append(payload(chunk))
    if len(payloads) > MAX_ANNOUNCEMENTS or any(len(p) > MAX_ANNOUNCEMENT_BYTES for p in payloads):
        return [payload(None)]
    return payloads


def announce_migration(conn: Connection, revision: str) -> None:
    """Tell the replicas running on the database, once the migration's transaction commits,
    that it was migrated: one older than `revision` then reads the revision and refuses every
    call. A replica of a release before this announcement takes it for a commit of unknown
    reach (`heard`), and only looks again."""
    payload = json.dumps({"migrated": revision}, separators=(",", ":"))
    conn.execute(_ANNOUNCE, {"channel": NEWS_CHANNEL, "payload": payload})


def heard(payload: str) -> tuple[str | None, wakeups.Reach | None]:
    """Who committed and whom it concerned, from a NOTIFY's payload. One this module did not
    write (anyone who may connect can NOTIFY) concerns everyone: waiters look again."""
    try:
        replica, concerned = json.loads(payload)
        if isinstance(concerned, dict) and all(
            isinstance(a, str) and type(s) is int for a, s in concerned.items()
        ):
            return str(replica), concerned
        return str(replica), None
    except (ValueError, TypeError, RecursionError):
        return None, None


class PostgresRunner:
    """The engine, and this replica's ear for the others (`listen`).

    `on_commit(reach)` hears this replica's commits; `on_foreign(reach)` another replica's (None:
    it cannot be told whom it concerned); `on_hearing(bool)` whether the others are heard now.
    All three are called on the event loop.

    Once the database is found migrated past what this code knows (`saw_schema`), every call
    is refused, a write that waited for the write lock meanwhile as well."""

    def __init__(
        self,
        url: str,
        on_commit: Callable[[wakeups.Reach], None],
        on_foreign: Callable[[wakeups.Reach | None], None],
        on_hearing: Callable[[bool], None],
    ) -> None:
        settings = {
            "lock_timeout": str(LOCK_TIMEOUT_S * 1000),
            "idle_in_transaction_session_timeout": str(IDLE_IN_TRANSACTION_S * 1000),
        }
        dsn = libpq_url(url)

        async def connect() -> asyncpg.Connection:
            return await asyncpg.connect(dsn, server_settings=settings)

        self.engine: AsyncEngine = create_async_engine(
            "postgresql+asyncpg://", async_creator=connect, pool_size=10
        )
        self.replica = secrets.token_hex(8)
        self.schema = NewerSchema()
        self._closed = False
        self._generation = 0
        """Listening connections lost so far: a pooled connection opened before the latest
        loss is replaced as it is next taken from the pool (`_deaf`)."""
        pool_events = self.engine.sync_engine
        event.listen(pool_events, "connect", self._opened)
        event.listen(pool_events, "checkout", self._taken)
        self._on_commit = on_commit
        self._on_foreign = on_foreign
        self._on_hearing = on_hearing

    def _refuse_when_unusable(self) -> None:
        """Closed, the engine would open new connections for whoever still asks; on a schema
        newer than it knows, this code would read and write with its old idea of it."""
        if self._closed:
            raise AgentpostError(ErrorCode.UNAVAILABLE, "the post office is closing")
        self.schema.refuse()

    def saw_schema(self, revision: str | None) -> None:
        """The revision the database holds, as just read: one newer than this code knows
        refuses every call from now on, and the waiters look again, to hear so."""
        if self.schema.found(revision):
            self._on_foreign(None)

    async def write(self, fn: Callable[[Connection], T]) -> T:
        self._refuse_when_unusable()
        with unavailable_when_unreachable():
            conn = await self._locked()
            try:
                result, concerned = await conn.run_sync(self._run_announced, fn)
                await conn.commit()
            finally:
                await conn.close()
        self._on_commit(concerned)
        return result

    async def _locked(self) -> AsyncConnection:
        """A connection in a transaction that holds the write lock: PostgreSQL's BEGIN
        IMMEDIATE, since the services read, then write (caps, free names, new agents), so write
        transactions take turns, as on SQLite.

        A pooled connection the server ended meanwhile (a restart, an idle timeout, a pooler)
        fails this first statement, before anything was done: the pool, told so, opens fresh
        ones, and the lock is asked for once more on one of them."""
        for last_try in (False, True):
            conn = await self.engine.connect()
            try:
                await conn.execute(WRITE_LOCK)
            except BaseException as exc:  # cancelled too: the connection goes back either way
                await conn.close()
                if last_try or not (isinstance(exc, DBAPIError) and exc.connection_invalidated):
                    raise
            else:
                return conn
        raise AssertionError("unreachable")

    def _run_announced(
        self, conn: Connection, fn: Callable[[Connection], T]
    ) -> tuple[T, wakeups.Reach]:
        """`fn`'s result and whom its writes concerned (`store.wakeups`), announced to the
        other replicas. The connection returns to the pool afterwards, so what an earlier,
        failed transaction noted is dropped first."""
        wakeups.take(conn)
        self.schema.refuse()  # found out while this waited for the lock: write nothing
        result = fn(conn)
        concerned = wakeups.take(conn)
        for payload in announcements(self.replica, concerned):
            conn.execute(_ANNOUNCE, {"channel": NEWS_CHANNEL, "payload": payload})
        return result, concerned

    async def read(self, fn: Callable[[Connection], T]) -> T:
        self._refuse_when_unusable()
        with unavailable_when_unreachable():
            try:
                async with self.engine.connect() as conn:
                    return await conn.run_sync(fn)
            except DBAPIError as exc:
                if not exc.connection_invalidated:
                    raise
            # A pooled connection the server ended meanwhile (see `_locked`): a read changes
            # nothing, so it is asked once more, on a fresh connection.
            async with self.engine.connect() as conn:
                return await conn.run_sync(fn)

    async def listen(self, first_try: asyncio.Event) -> None:
        """Forever (until cancelled): hear the other replicas' commits on a connection of its
        own, opened again whenever it is lost. `first_try` is set once the first attempt
        is over, heard or not. Whatever fails here is logged and tried again: meanwhile
        every wait ends within `PG_POLL_S`, so nothing goes unseen for long."""
        delay = LISTEN_RETRY_S
        while True:
            opened_at: float | None = None
            try:
                async with self._listening() as listening:
                    opened_at = time.monotonic()
                    self._on_hearing(True)
                    first_try.set()
                    try:
                        await self._until_lost(listening)
                    finally:
                        await self._deaf()
                log.warning("lost the connection that hears the other replicas; opening another")
            except Exception as exc:
                log.warning(
                    "cannot hear the other replicas (%s); meanwhile each waiter looks again "
                    "every %s s",
                    exc,
                    PG_POLL_S,
                )
            first_try.set()
            if opened_at is not None and time.monotonic() - opened_at >= LISTEN_STEADY_S:
                delay = LISTEN_RETRY_S
            await asyncio.sleep(delay)
            delay = min(delay * 2, LISTEN_RETRY_MAX_S)

    async def _deaf(self) -> None:
        """The listening connection is gone. Most likely the server restarted, and the pool's
        connections are as dead as it: each is replaced as it is next taken, before the
        waiters, woken to look again, would each fail on one of them.

        In the pool, one by one, not by a new pool: the connections in use meanwhile would go
        back to the discarded pool, and stay open there beside their replacements until
        garbage collection (when only the listening connection was lost, as a network's idle
        timeout does, they all still work)."""
        self._generation += 1
        self._on_hearing(False)

    def _opened(self, _driver: object, record: Any) -> None:
        record.info[_GENERATION] = self._generation

    def _taken(self, _driver: object, record: Any, _proxy: object) -> None:
        """Opened before the listening connection was lost: the pool closes it (at once, not
        waiting for a server that may be gone) and opens another in its place."""
        if record.info.get(_GENERATION) != self._generation:
            raise DisconnectionError("opened before the listening connection was lost")

    @contextlib.asynccontextmanager
    async def _listening(self) -> AsyncIterator[_Listening]:
        """A pooled connection set aside to LISTEN; thrown away after, never pooled again."""
        with unavailable_when_unreachable():
            conn = await self.engine.connect()
        try:
            raw = await conn.get_raw_connection()
            driver: asyncpg.Connection = raw.driver_connection
            listening = _Listening(driver)
            driver.add_termination_listener(lambda _conn: listening.end())
            # Named for whoever reads pg_stat_activity; the connection is never pooled again.
            await driver.execute(f"SET application_name = '{LISTENER_NAME}'")
            await driver.add_listener(NEWS_CHANNEL, self._heard_on(listening))
            yield listening
        finally:
            with unavailable_when_unreachable():
                await conn.invalidate()
                await conn.close()

    async def _until_lost(self, listening: _Listening) -> None:
        """Read the schema's revision as soon as the connection listens (a migration while
        none did went unheard), whenever a migration is announced, and as the keep-alive."""
        # `asyncio.timeout`, not `wait_for`: on Python 3.11 `wait_for` drops a cancellation
        # that comes as what it waits for is done, and this loop would then outlive `aclose`.
        while not listening.lost:
            async with asyncio.timeout(LISTEN_CHECK_S):
                revision = await _revision(listening.driver)
            self.saw_schema(revision)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(LISTEN_CHECK_S):
                    await listening.stirred.wait()
            listening.stirred.clear()

    def _heard_on(self, listening: _Listening) -> Callable[[object, int, str, str], None]:
        def on_notify(_conn: object, _pid: int, _channel: str, payload: str) -> None:
            if payload.startswith(_MIGRATED):
                listening.stirred.set()  # the revision is read from the database, not this
                return
            replica, concerned = heard(payload)
            if replica != self.replica:
                self._on_foreign(concerned)

        return on_notify

    async def check_database(self) -> None:
        """Refuse a database not in the UTF8 encoding, before anything is written to it: it
        cannot hold every message (an emoji), and search folds text with `normalize`, which
        PostgreSQL performs only there. Log one whose character type is `C` or `POSIX`:
        there PostgreSQL takes only ASCII letters for letters, and a search breaks words at
        every other one (`øre` finds `re`); it is served all the same."""
        with unavailable_when_unreachable():
            async with self.engine.connect() as conn:
                encoding, ctype, letters = (await conn.execute(_ENCODING_AND_CTYPE)).one()
        if encoding != "UTF8":
            raise AgentpostError(
                ErrorCode.UNAVAILABLE,
                f"the database's encoding is {encoding}; agentpost needs UTF8"
                " (CREATE DATABASE … ENCODING 'UTF8')",
            )
        if not letters:
            log.warning(
                "the database's LC_CTYPE is %s: PostgreSQL takes only ASCII letters for letters,"
                " so a search breaks words at every other one; create the database with a"
                " UTF-8 LC_CTYPE (C.UTF-8, en_US.UTF-8) for search to match SQLite's",
                ctype,
            )

    async def aclose(self) -> None:
        self._closed = True
        await self.engine.dispose()


async def _revision(driver: asyncpg.Connection) -> str | None:
    try:
        found = await driver.fetchval("SELECT version_num FROM alembic_version")
    except asyncpg.UndefinedTableError:  # no agentpost schema there: not a newer one
        return None
    return None if found is None else str(found)


class _Listening:
    """The listening connection; `stirred` is set when it is lost, or a migration announced."""

    __slots__ = ("driver", "lost", "stirred")

    def __init__(self, driver: asyncpg.Connection) -> None:
        self.driver = driver
        self.lost = False
        self.stirred = asyncio.Event()

    def end(self) -> None:
        self.lost = True
        self.stirred.set()


def insert_ignore(table: Table) -> Insert:
    return pg_insert(table).on_conflict_do_nothing()


def upsert(
    table: Table,
    keys: list[str],
    values: dict[str, Any],
    update: dict[str, Any],
    where: ColumnElement[bool] | None = None,
) -> Insert:
    """Insert, or update the row that holds `keys` — only if `where` holds for it, if given."""
    stmt = pg_insert(table).values(**values)
    return stmt.on_conflict_do_update(index_elements=keys, set_=update, where=where)


_ONE_MARK_ON_A_LATIN_LETTER = r"E'([A-Za-z])[\\u0300-\\u036f](?![\\u0300-\\u036f])'"
"""A letter and one combining mark, as an E'' string: the same whatever the server's
`standard_conforming_strings`."""


def _sql(constant: str) -> Any:
    """A constant written into the statement, not bound: the document's expression must be
    the very one migration 0011 indexes, which a parameter is not to the planner."""
    return literal_column(constant)


def _without_diacritics(value: Any) -> Any:
    """Text as SQLite's index folds it (`unicode61`, `remove_diacritics=1`): a Latin letter
    with one diacritic is the letter alone (`é` is `e`, `Å` is `A`, spelt as one character
    or as letter and mark), and nothing else changes: `ø`, `ß`, `æ` stay letters of their
    own, Greek and Cyrillic keep their accents, as do letters with two (`ǖ`). Built in, where
    the `unaccent` extension, which also maps `ß` to `ss`, would have to be installed."""
    decomposed = func.normalize(value, _sql("NFD"))
    bare = func.regexp_replace(
        decomposed, _sql(_ONE_MARK_ON_A_LATIN_LETTER), _sql(r"E'\\1'"), _sql("'g'")
    )
    return func.normalize(bare, _sql("NFC"))


def _split(value: Any) -> Any:
    """Text as SQLite's index reads it (`unicode61`): runs of letters and digits, whatever
    stands between them, without their diacritics. PostgreSQL's parser keeps a path, an
    address or a URL as one word (`src/app/store.py`), where a search for `store` is to
    find it."""
    return func.regexp_replace(
        _without_diacritics(value), _sql("'[^[:alnum:]]+'"), _sql("' '"), _sql("'g'")
    )


def document(table: Table) -> Any:
    """A message's words as search reads them: the expression migration 0011 indexes."""
    text_ = table.c.subject + _sql("' '") + table.c.body
    return func.to_tsvector(_sql("'simple'::regconfig"), _split(text_))


def search(select: Select[Any], table: Table, words: list[str]) -> Select[Any]:
    """Each word matched as FTS5 matches a quoted word (`store.fulltext`): the runs of letters
    and digits it holds, in a row, in any case and with or without diacritics. The index of
    migration 0011 finds the messages that hold every word; the phrases are checked on them."""
    phrases = [
        func.phraseto_tsquery(_sql("'simple'::regconfig"), _split(literal(word))) for word in words
    ]
    return select.where(document(table).op("@@")(_all_of(phrases)))


def _all_of(queries: list[Any]) -> Any:
    """The queries joined by `&&` as a balanced tree: the longest query's 250 words nest eight
    levels deep, where a chain of them exceeds Python's recursion limit when compiled."""
    if len(queries) == 1:
        return queries[0]
    half = len(queries) // 2
    return _all_of(queries[:half]).op("&&")(_all_of(queries[half:]))
