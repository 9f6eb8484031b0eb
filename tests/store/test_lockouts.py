"""Failed authentications per address: counted over a sliding window, and locks."""

from __future__ import annotations

import pytest
from sqlalchemy import Connection, text

from agentpost.store import lockouts
from agentpost.store.database import Store
from backends import FakeClock

pytestmark = pytest.mark.anyio

WINDOW = 900.0
FAILURES = 3


async def fail(store: Store, ip: str = "10.0.0.1") -> bool:
    """Whether this failure locked the address."""
    return (await failed(store, ip)).locks


async def failed(store: Store, ip: str = "10.0.0.1") -> lockouts.Counted:
    def tx(conn: Connection) -> lockouts.Counted:
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


async def test_failures_count_over_a_sliding_window_wherever_they_fall(
    store: Store, clock: FakeClock
) -> None:
    """Counted from a run's first failure, the first one falling out of the window reset
    the count, and FAILURES - 1 + FAILURES - 1 guesses came within a window unlocked."""
    await fail(store)
    clock.advance(WINDOW - 10)
    assert [await fail(store) for _ in range(FAILURES - 2)] == [False] * (FAILURES - 2)
    clock.advance(11)  # the first failure is out of the window; the others are in it
    assert await fail(store) is False
    assert await fail(store) is True


async def test_a_failure_a_whole_window_after_the_last_starts_the_count_afresh(
    store: Store, clock: FakeClock
) -> None:
    for _ in range(FAILURES - 1):
        await fail(store)
        clock.advance(WINDOW)
    assert await locked_at(store) is None


async def test_a_failure_while_locked_is_not_counted_and_says_how_long_is_left(
    store: Store, clock: FakeClock
) -> None:
    """A request in flight beside the one that locked: answered as locked out."""
    for _ in range(FAILURES):
        await fail(store)
    clock.advance(100)
    late = await failed(store)
    assert (late.locks, late.locked_for) == (False, WINDOW - 100)
    assert await locked_at(store) == clock.now - 100  # the lock was not moved on


async def test_an_address_keeps_no_more_rows_than_failures_lock(
    store: Store, clock: FakeClock
) -> None:
    """However many failures it ever had: each new one takes the oldest one's place."""
    for _ in range(10 * FAILURES):
        assert await fail(store) is False
        clock.advance(WINDOW / (FAILURES - 1))  # never FAILURES within a window
    rows = await store.read(
        lambda conn: conn.execute(text("SELECT key FROM rate_windows")).scalars().all()
    )
    assert len([key for key in rows if key.startswith("authfail:10.0.0.1|")]) == FAILURES


async def test_after_a_lock_the_count_starts_again(store: Store, clock: FakeClock) -> None:
    for _ in range(FAILURES):
        await fail(store)
    first_lock = clock.now
    clock.advance(WINDOW)
    assert [await fail(store) for _ in range(FAILURES)] == [False, False, True]
    assert await locked_at(store) == first_lock + WINDOW


@pytest.mark.parametrize(
    "addresses",
    [("10.0.0.1", "10.0.0.2", "10.0.0.10"), ("::1", "::1:5", "::1%a"), ("_", "%", "a/b")],
)
async def test_addresses_are_counted_apart(store: Store, addresses: tuple[str, ...]) -> None:
    """Even where one address begins another, or holds what a pattern would read as a
    wildcard."""
    for _ in range(FAILURES - 1):
        for ip in addresses:
            await fail(store, ip)
    for ip in addresses:
        assert await locked_at(store, ip) is None


async def test_purge_forgets_runs_and_locks_a_window_old_and_nothing_else(
    store: Store, clock: FakeClock
) -> None:
    for _ in range(FAILURES):
        await fail(store, "10.0.0.1")
    await fail(store, "10.0.0.2")
    clock.advance(1)
    await fail(store, "10.0.0.3")
    purged = await store.write(lambda conn: lockouts.purge(conn, clock.now - 1))
    assert purged == 2  # the lock of .1 and the failure of .2
    assert await locked_at(store, "10.0.0.1") is None
    assert await fail(store, "10.0.0.3") is False  # its run is still counting: 2 of 3
    assert await fail(store, "10.0.0.3") is True
