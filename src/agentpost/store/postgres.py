"""Everything PostgreSQL-specific: the asyncpg engine, upserts and text search.

Transactions run the same synchronous query functions as on SQLite, through SQLAlchemy's
`run_sync` bridge over asyncpg, so there is one set of queries for both databases.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import Connection, func, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.sql import ColumnElement, Insert, Select
from sqlalchemy.sql.schema import Table

from agentpost.config import POSTGRES_SCHEMES
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.limits import not_unicode
from agentpost.store import schema, wakeups

T = TypeVar("T")

_WRITE_LOCK = text(f"SELECT pg_advisory_xact_lock({0x61676E7477726974})")  # "agntwrit"


def async_url(url: str) -> str:
    for prefix in POSTGRES_SCHEMES:
        if url.startswith(prefix):
            return "postgresql+asyncpg://" + url.removeprefix(prefix)
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


@contextmanager
def unavailable_when_unreachable() -> Iterator[None]:
    """A server that is down, restarting or dropped the connection: `unavailable`, try again.
    Text the database cannot hold: `invalid_argument`.

    Errors of our own SQL (constraint violations, bad queries) stay what they are: bugs.
    """
    try:
        yield
    except (OperationalError, InterfaceError, OSError) as exc:
        raise AgentpostError(ErrorCode.UNAVAILABLE, f"the database is unreachable ({exc})") from exc
    except DBAPIError as exc:
        if exc.connection_invalidated:
            raise AgentpostError(ErrorCode.UNAVAILABLE, "database connection lost") from exc
        if getattr(exc.orig, "sqlstate", None) in _UNSTORABLE_TEXT:
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


def _collecting(conn: Connection, fn: Callable[[Connection], T]) -> tuple[T, wakeups.Reach]:
    """`fn`'s result and whom its writes concerned (`store.wakeups`). The connection returns
    to the pool afterwards, so what an earlier, failed transaction noted is dropped first."""
    wakeups.take(conn)
    result = fn(conn)
    return result, wakeups.take(conn)


class PostgresRunner:
    def __init__(self, url: str, on_commit: Callable[[wakeups.Reach], None]) -> None:
        self.engine: AsyncEngine = create_async_engine(async_url(url), pool_size=10)
        self._on_commit = on_commit

    async def write(self, fn: Callable[[Connection], T]) -> T:
        with unavailable_when_unreachable():
            async with self.engine.begin() as conn:
                # PostgreSQL's BEGIN IMMEDIATE: the services read, then write (caps, free names,
                # new agents), so write transactions take turns, as on SQLite.
                await conn.execute(_WRITE_LOCK)
                result, concerned = await conn.run_sync(_collecting, fn)
        self._on_commit(concerned)
        return result

    async def read(self, fn: Callable[[Connection], T]) -> T:
        with unavailable_when_unreachable():
            async with self.engine.connect() as conn:
                return await conn.run_sync(fn)

    async def aclose(self) -> None:
        await self.engine.dispose()


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


def search(select: Select[Any], table: Table, words: list[str]) -> Select[Any]:
    """Unindexed `to_tsvector` matching: correct now; the index arrives with scale-out."""
    document = func.to_tsvector("simple", table.c.subject + " " + table.c.body)
    query = func.plainto_tsquery("simple", " ".join(words))
    return select.where(document.op("@@")(query))
