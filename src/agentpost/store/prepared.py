"""Statements of the hot paths, compiled once and run without SQLAlchemy's execution machinery.

`Connection.execute` spends 20–40 µs of Python on a statement (its cache key, an execution
context, the result's wrapping) where SQLite needs a few µs for the statement itself, and a
send runs nine of them on the one writer thread every send of the process waits for. A
`Prepared` statement is compiled once per dialect; on SQLite it then goes straight to the
sqlite3 connection (`store.sqlite.Compiled`), elsewhere through `execute` as before. The SQL is
still written once, in Core, for both databases.

Rows are read by position or by column name, as SQLAlchemy's are; values are as the driver
returns them (a Boolean column reads 0 or 1 on SQLite). Errors are SQLAlchemy's, as from
`execute`, so callers catch the same exceptions on both paths.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy import BindParameter, Connection, bindparam
from sqlalchemy.sql import Executable

from agentpost.store import sqlite

T = TypeVar("T")
Params = Mapping[str, Any]
_NONE: Params = {}


NUMBERED_UP_TO = 200
"""The longest IN list worth a statement of its own (a page of mail); longer ones expand."""


def numbered(name: str, count: int) -> list[BindParameter[Any]]:
    """`count` parameters `name0`, `name1`, …, for an IN list of a fixed length: a statement
    built with them compiles once per length, where an expanding parameter is rendered anew on
    every execution (and cannot be prepared). Fill them with `numbered_values`."""
    return [bindparam(f"{name}{i}") for i in range(count)]


def numbered_values(name: str, values: Sequence[Any]) -> dict[str, Any]:
    return {f"{name}{i}": value for i, value in enumerate(values)}


EXPANDING_UP_TO = 10_000
"""The longest list one expanding IN is given. PostgreSQL's driver takes at most 32,767
parameters in a statement, fewer than a big channel has members: a longer list (a broadcast's
recipients) is asked for in parts of this many."""


def in_parts(values: Sequence[T]) -> list[list[T]]:
    """`values` in parts of at most `EXPANDING_UP_TO`, in order: one part for most lists."""
    return [list(values[i : i + EXPANDING_UP_TO]) for i in range(0, len(values), EXPANDING_UP_TO)]


class Prepared:
    """One statement, compiled for SQLite on first use. Build it once, at import time.

    `keys` names the columns an INSERT or UPDATE without `.values()` sets (as the keys of the
    parameters passed to `execute` would): the compiled form is fixed, so they are too.
    """

    __slots__ = ("_sqlite", "keys", "statement")

    def __init__(self, statement: Executable, *, keys: Sequence[str] | None = None) -> None:
        self.statement = statement
        self.keys = None if keys is None else list(keys)
        self._sqlite: sqlite.Compiled | None = None

    def _compiled(self, conn: Connection) -> sqlite.Compiled | None:
        """The SQLite form, or None on another database."""
        if conn.dialect.name != "sqlite":
            return None
        if self._sqlite is None:
            self._sqlite = sqlite.Compiled.of(self.statement, conn.dialect, self.keys)
        return self._sqlite

    def rows(self, conn: Connection, params: Params = _NONE) -> Sequence[Any]:
        compiled = self._compiled(conn)
        if compiled is not None:
            return compiled.rows(conn, params)
        return conn.execute(self.statement, dict(params)).all()

    def first(self, conn: Connection, params: Params = _NONE) -> Any:
        """The first row, or None."""
        found = self.rows(conn, params)
        return found[0] if found else None

    def scalar(self, conn: Connection, params: Params = _NONE) -> Any:
        """The first column of the first row; None without a row."""
        found = self.rows(conn, params)
        return found[0][0] if found else None

    def run(self, conn: Connection, params: Params = _NONE) -> None:
        """A statement that returns nothing."""
        compiled = self._compiled(conn)
        if compiled is not None:
            compiled.rows(conn, params)
        else:
            conn.execute(self.statement, dict(params))

    def run_many(self, conn: Connection, many: Sequence[Params]) -> None:
        """The statement once per parameter set (an INSERT of several rows), no results."""
        if len(many) == 1:
            self.run(conn, many[0])
            return
        compiled = self._compiled(conn)
        if compiled is not None:
            compiled.run_many(conn, many)
        else:
            conn.execute(self.statement, [dict(params) for params in many])
