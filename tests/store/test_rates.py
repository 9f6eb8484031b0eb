"""Rate windows: fixed windows counted in the store, reset by the store's clock."""

from __future__ import annotations

import pytest
from sqlalchemy import Connection

from agentpost.store import rates
from agentpost.store.database import Store
from backends import FakeClock

pytestmark = pytest.mark.anyio

WINDOW = 60.0


async def hit(store: Store, key: str = "send:alice", cost: int = 1) -> tuple[int, float]:
    def tx(conn: Connection) -> tuple[int, float]:
        return rates.hit(conn, store.dialect, key, store.clock(), WINDOW, cost)

    return await store.write(tx)


async def peek(store: Store, key: str = "send:alice") -> int:
    return await store.read(lambda conn: rates.peek(conn, key, store.clock(), WINDOW))


@pytest.fixture
def window_start(clock: FakeClock) -> float:
    """Start the test exactly on a window boundary, so "seconds left" is easy to state."""
    clock.now = clock.now - clock.now % WINDOW
    return clock.now


@pytest.mark.usefixtures("window_start")
async def test_hits_in_one_window_add_up_and_say_when_it_resets(
    store: Store, clock: FakeClock
) -> None:
    assert await hit(store) == (1, 60.0)
    clock.advance(15)
    assert await hit(store) == (2, 45.0)
    assert await hit(store, cost=3) == (5, 45.0)
    assert await peek(store) == 5


@pytest.mark.usefixtures("window_start")
async def test_the_next_window_starts_counting_from_the_new_hit(
    store: Store, clock: FakeClock
) -> None:
    for _ in range(4):
        await hit(store)
    clock.advance(WINDOW)
    assert await peek(store) == 0
    assert await hit(store) == (1, 60.0)


async def test_keys_are_counted_apart(store: Store) -> None:
    await hit(store, "send:alice")
    await hit(store, "send:alice")
    await hit(store, "send:bob")
    assert await peek(store, "send:alice") == 2
    assert await peek(store, "send:bob") == 1
    assert await peek(store, "send:nobody") == 0
