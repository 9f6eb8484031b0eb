"""What retention may forget of an append-only table: the rows written before a moment, walked
by `seq` from the oldest up to the first row written since (the audit log stands for each)."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from agentpost.store import audit, schema
from agentpost.store.database import Connection, Store
from agentpost.store.retained import first_written_since

pytestmark = pytest.mark.anyio


async def written(store: Store, *times: float, action: str = "agent.created") -> None:
    """One audit row per time, in the order given."""

    def tx(conn: Connection) -> None:
        for at in times:
            audit.record(conn, at=at, actor="owner", action=action, target=f"at {at:g}")

    await store.write(tx)


async def forget(store: Store, before: float, limit: int = 500) -> int:
    """One batch of a sweep at `before`, as the first of a sweep: how many rows went."""
    return await store.write(
        lambda conn: audit.purge_before(conn, audit.written_before(conn, before), limit)
    )


async def left(store: Store) -> list[str | None]:
    rows = await store.read(lambda conn: audit.entries(conn, limit=100))
    return [row.target for row in reversed(rows)]


async def test_the_rows_written_before_the_moment_go_and_the_rest_stay(store: Store) -> None:
    await written(store, 1.0, 2.0, 3.0, 10.0, 11.0)
    assert await forget(store, 5.0) == 3
    assert await left(store) == ["at 10", "at 11"]


async def test_a_batch_forgets_the_oldest_rows_first(store: Store) -> None:
    await written(store, 1.0, 2.0, 3.0, 10.0)
    assert await forget(store, 5.0, 2) == 2
    assert await left(store) == ["at 3", "at 10"]
    assert await forget(store, 5.0, 2) == 1
    assert await left(store) == ["at 10"]


async def test_nothing_goes_when_every_row_is_newer_or_none_is_there(store: Store) -> None:
    assert await forget(store, 5.0) == 0
    await written(store, 6.0, 7.0)
    assert await forget(store, 5.0) == 0
    assert await left(store) == ["at 6", "at 7"]


async def test_a_row_written_after_a_newer_one_may_wait_for_a_later_sweep(store: Store) -> None:
    """Another process's clock a moment behind: its row is not where its time would put it."""
    await written(store, 1.0, 10.0, 2.0, 20.0)
    assert await forget(store, 5.0) == 1
    assert await left(store) == ["at 10", "at 2", "at 20"]
    assert await forget(store, 11.0) == 2
    assert await left(store) == ["at 20"]


async def test_the_end_of_the_rows_to_forget_is_found_without_walking_to_it(
    store: Store,
) -> None:
    times = [float(n) for n in range(1, 1001)]
    await written(store, *times)

    def ends(conn: Connection) -> list[int | None]:
        first = conn.execute(select(func.min(schema.audit.c.seq))).scalar_one()
        return [
            None if end is None else end - first
            for end in (
                first_written_since(conn, schema.audit.c.seq, schema.audit.c.at, before)
                for before in (0.5, 1.0, 1.5, 500.0, 999.9, 1000.0, 1000.5)
            )
        ]

    assert await store.read(ends) == [0, 0, 1, 499, 999, 999, None]


async def test_a_sweep_keeps_to_the_rows_written_before_it_began(store: Store) -> None:
    await written(store, 1.0, 2.0, 10.0)
    cutoff = await store.read(lambda conn: audit.written_before(conn, 5.0))
    await written(store, 3.0)  # meanwhile, by a clock behind: the next sweep's
    assert await store.write(lambda conn: audit.purge_before(conn, cutoff, 500)) == 2
    assert await left(store) == ["at 10", "at 3"]


async def test_forgetting_one_action_leaves_the_others_and_the_newer_rows(store: Store) -> None:
    await written(store, 1.0, action="message.sent")
    await written(store, 2.0, action="agent.created")
    await written(store, 3.0, 9.0, action="message.sent")
    assert await store.write(lambda conn: audit.purge(conn, "message.sent", 5.0)) == 2
    assert await left(store) == ["at 2", "at 9"]
