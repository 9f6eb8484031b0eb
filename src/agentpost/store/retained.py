"""Which rows of an append-only table the retention sweep may forget: those written before a
moment, found by `seq` rather than by an index on their time.

Rows are written in time order, so those written before `before` are the run of lowest `seq`
up to the first one written since. An index on the time would tell the same, at the price of
one more page written by every send (migration 0023). Instead a sweep finds, once, where the
run ends by halving the table's range of `seq` (`first_written_since`: a few dozen reads of one
row by the primary key), and each of its batches walks the run from its start: the rows it
passes are the ones it is there to forget, or ones kept for another reason (unread mail), which
an index on time would have walked too. Each batch walking to the end of the run instead would
pass all that is left of the backlog: the events' sweep of a post office of 100,000 messages
took 7 s where the index by time took 2.6 s, and halving in every batch 5 s on PostgreSQL
(docs/BENCHMARKS.md, "The retention sweep on PostgreSQL").

A row written with an earlier time than one before it (another process's clock a moment
behind) may stay past the end found for it, until a later sweep's end passes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Connection, Exists, Select, and_, func, select


def first_written_since(conn: Connection, seq: Any, written_at: Any, before: float) -> int | None:
    """The `seq` of the first row written at or after `before` (None: every row is older),
    the rows taken to be in time order."""
    low, high = conn.execute(select(func.min(seq), func.max(seq))).one()
    if high is None or conn.execute(select(written_at).where(seq == high)).scalar_one() < before:
        return None
    # The smallest x whose first row at or after it was written since: that row is the one.
    first = high
    while low < high:
        middle = (low + high) // 2
        found, at = conn.execute(
            select(seq, written_at).where(seq >= middle).order_by(seq).limit(1)
        ).one()
        if at >= before:
            first, high = found, middle
        else:
            low = found + 1  # every x up to `found` comes to this row
    return int(first)


@dataclass(frozen=True, slots=True)
class Cutoff:
    """The rows of one table written before `before`: those before `end`, the first row
    written since (None: every row is older), whose time is before `before`.

    Found once for a whole sweep: the end for a later moment is never earlier, so the batches
    of a sweep keep to the first one found, and what was written in the seconds the sweep
    takes waits for the next."""

    before: float
    end: int | None

    @classmethod
    def find(cls, conn: Connection, seq: Any, written_at: Any, before: float) -> Cutoff:
        return cls(before, first_written_since(conn, seq, written_at, before))

    def rows(self, seq: Any, written_at: Any) -> ColumnElement[bool]:
        """Those rows: a range of `seq` the database walks from its start."""
        older = written_at < self.before
        return older if self.end is None else and_(seq < self.end, older)


def asked_row_by_row(query: Select[Any]) -> Exists:
    """EXISTS of `query`, a subquery correlated to the row the walk is at, asked afresh for
    each row it passes, through an index: a batch then reads about as many rows of the other
    table as it looks at rows of its own, as on SQLite.

    Left to itself, PostgreSQL may flatten a NOT EXISTS into an anti join, or hash the
    subquery, and for a sweep it picks plans that read a whole table in every batch: a merge
    join that walks `ix_deliveries_message` from its start to the next open delivery (past
    every acked delivery of the old mail, the state being in the table, not the index), or a
    hashed subplan built from every open delivery to answer for a few responses. A subquery
    with an OFFSET, even of nothing, is one it may neither flatten nor hash.
    """
    return query.offset(0).exists()


def walked_without_jit(conn: Connection) -> None:
    """Have PostgreSQL run this transaction's statements as planned, not compiled (JIT).

    It compiles a statement whose planned cost passes `jit_above_cost` (100,000), and plans a
    walk with subqueries asked row by row as if it went through a third of its table: past
    some 200,000 messages, each batch of the sweep spent as long compiling as running (36 ms
    to run, 72 ms with the compiling, 500 of 200,000), though a batch ends after `limit` rows.
    """
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("SET LOCAL jit = off")
