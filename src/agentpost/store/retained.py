"""Which rows of an append-only table the retention sweep may forget: those written before a
moment, found by `seq` rather than by an index on their time.

Rows are written in time order, so those written before `before` are the run of lowest `seq`
up to the first one written since. An index on the time would tell the same, at the price of
one more page written by every send (migration 0023); instead the sweep walks the table by its
primary key, from the oldest row to the first one still kept, and no further: the rows it
passes are the ones it is there to forget, or ones kept for another reason (unread mail), which
an index on time would have walked too. A row written with an earlier time than one before it
(another process's clock a moment behind) is kept until that one goes.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Connection, Exists, Select, and_, func, select

_PAST_EVERY_SEQ = 2**62


def written_before(seq: Any, written_at: Any, before: float) -> ColumnElement[bool]:
    """Rows whose `written_at` is before `before`, and which come before the first row that is
    not: a range of `seq` the database walks from its start."""
    first_kept = select(seq).where(written_at >= before).order_by(seq).limit(1).scalar_subquery()
    return and_(seq < func.coalesce(first_kept, _PAST_EVERY_SEQ), written_at < before)


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
