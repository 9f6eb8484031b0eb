"""Failed authentications per address: runs counted from their first failure, and locks."""

from __future__ import annotations

import pytest
from sqlalchemy import Connection

from agentpost.store import lockouts
from agentpost.store.database import Store
from backends import FakeClock

pytestmark = pytest.mark.anyio

WINDOW = 900.0
FAILURES = 3


async def fail(store: Store, ip: str = "10.0.0.1") -> bool:
    def tx(conn: Connection) -> bool:
        return lockouts.count_failure(conn, store.dialect, ip, store.clock(), WINDOW, FAILURES)

    return await store.write(tx)


async def locked_at(store: Store, ip: str = "10.0.0.1") -> float | None:
    return await store.read(lambda conn: lockouts.locked_at(conn, ip))


async def test_the_failure_that_reaches_the_count_locks_and_says_so(
    store: Store, clock: FakeClock
) -> None:
    assert [await fail(store) for _ in range(2)] == [False, False]
    assert await locked_at(store) is None
    clock.advance(10)
    assert await fail(store) is True
    assert await locked_at(store) == clock.now


async def test_a_run_counts_from_its_first_failure_and_ends_a_window_later(
    store: Store, clock: FakeClock
) -> None:
    await fail(store)
    clock.advance(WINDOW - 1)
    await fail(store)
    clock.advance(1)  # the run began a whole window ago: this failure starts a new one
    assert await fail(store) is False
    await fail(store)
    assert await fail(store) is True


async def test_after_a_lock_the_count_starts_again(store: Store, clock: FakeClock) -> None:
    for _ in range(FAILURES):
        await fail(store)
    first_lock = clock.now
    clock.advance(WINDOW)
    assert [await fail(store) for _ in range(FAILURES)] == [False, False, True]
    assert await locked_at(store) == first_lock + WINDOW


async def test_addresses_are_counted_apart(store: Store) -> None:
    for _ in range(FAILURES - 1):
        await fail(store, "10.0.0.1")
        await fail(store, "10.0.0.2")
    assert await locked_at(store, "10.0.0.1") is None
    assert await locked_at(store, "10.0.0.2") is None


async def test_purge_forgets_runs_and_locks_a_window_old_and_nothing_else(
    store: Store, clock: FakeClock
) -> None:
    for _ in range(FAILURES):
        await fail(store, "10.0.0.1")
    await fail(store, "10.0.0.2")
    clock.advance(1)
    await fail(store, "10.0.0.3")
    purged = await store.write(lambda conn: lockouts.purge(conn, clock.now - 1))
    assert purged == 2  # the lock of .1 and the run of .2
    assert await locked_at(store, "10.0.0.1") is None
    assert await fail(store, "10.0.0.3") is False  # its run is still counting: 2 of 3
    assert await fail(store, "10.0.0.3") is True
