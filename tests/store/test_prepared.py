"""Prepared statements: compiled once, the same rows and errors as `execute`, on both databases."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Connection, bindparam, insert, select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from agentpost.store.database import Store
from agentpost.store.prepared import Prepared
from agentpost.store.schema import blocks, rate_windows

pytestmark = pytest.mark.anyio

_INSERT = Prepared(insert(rate_windows), keys=["key", "window_start", "count"])
_COUNT_OF = Prepared(
    select(rate_windows.c.key, rate_windows.c.count).where(rate_windows.c.key == bindparam("key"))
)
_ALL = Prepared(select(rate_windows.c.key).order_by(rate_windows.c.key))


def _window(key: str, count: int = 1) -> dict[str, Any]:
    return {"key": key, "window_start": 0.0, "count": count}


async def test_rows_read_by_position_and_by_column_name(store: Store) -> None:
    await store.write(lambda conn: _INSERT.run(conn, _window("a", 3)))

    row = await store.read(lambda conn: _COUNT_OF.first(conn, {"key": "a"}))

    assert (row[0], row[1]) == ("a", 3)
    assert (row.key, row.count) == ("a", 3)
    assert await store.read(lambda conn: _COUNT_OF.scalar(conn, {"key": "a"})) == "a"


async def test_no_row_reads_none(store: Store) -> None:
    assert await store.read(lambda conn: _COUNT_OF.first(conn, {"key": "none"})) is None
    assert await store.read(lambda conn: _COUNT_OF.scalar(conn, {"key": "none"})) is None
    assert await store.read(lambda conn: list(_ALL.rows(conn))) == []


async def test_run_many_inserts_every_row(store: Store) -> None:
    await store.write(lambda conn: _INSERT.run_many(conn, [_window("b"), _window("a")]))
    await store.write(lambda conn: _INSERT.run_many(conn, [_window("c")]))

    keys = await store.read(lambda conn: [row.key for row in _ALL.rows(conn)])

    assert keys == ["a", "b", "c"]


async def test_a_constraint_violation_raises_as_execute_would_and_stores_nothing(
    store: Store,
) -> None:
    await store.write(lambda conn: _INSERT.run(conn, _window("taken")))

    def twice(conn: Connection) -> None:
        _INSERT.run(conn, _window("fresh"))
        _INSERT.run(conn, _window("taken"))

    with pytest.raises(IntegrityError):
        await store.write(twice)
    keys = await store.read(lambda conn: [row.key for row in _ALL.rows(conn)])
    assert keys == ["taken"]


async def test_a_missing_parameter_is_refused(store: Store) -> None:
    with pytest.raises(SQLAlchemyError, match="A value is required for bind parameter 'key'"):
        await store.read(lambda conn: _COUNT_OF.rows(conn, {}))


async def test_a_statement_rendered_per_execution_cannot_be_prepared(lite: Store) -> None:
    expanding = Prepared(
        select(blocks.c.sender).where(blocks.c.recipient.in_(bindparam("names", expanding=True)))
    )

    with pytest.raises(ValueError, match="rendered per execution"):
        await lite.read(lambda conn: expanding.rows(conn, {"names": ["a"]}))
