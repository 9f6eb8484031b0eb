"""Failed authentications per client address, and the lockouts they lead to.

Kept in `rate_windows`, so a lockout holds across restarts and replicas. An address's newest
failures are kept, each in a slot of its own (`authfail:<ip>|<n>`, as many slots as failures
lock), so the count is exact over a sliding window: `failures` within `window_s` of each other
always lock, and never more are let through, wherever they fall. Every read and write is by
key: an address costs at most that many rows, whatever others do. The lock is a row of its own:
it lasts `window_s` from the failure that set it, and the count starts afresh.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from sqlalchemy import BindParameter, Connection, ScalarSelect, bindparam, delete, select

from agentpost.store.schema import rate_windows

_LOCK_OF = select(rate_windows.c.window_start).where(rate_windows.c.key == bindparam("key"))
_SLOTS: BindParameter[list[str]] = bindparam("slots", expanding=True)
_SLOTS_OF = select(rate_windows.c.key, rate_windows.c.window_start).where(
    rate_windows.c.key.in_(_SLOTS)
)


@dataclass(frozen=True, slots=True)
class Counted:
    locks: bool = False
    """This failure reached the count: the address is locked from now on."""
    locked_for: float | None = None
    """The address was locked already, by a failure in flight beside this one: the seconds
    left. This failure was not counted, and is answered as a locked-out address is."""


def _slots(ip: str, failures: int) -> list[str]:
    return [f"authfail:{ip}|{n}" for n in range(failures)]


def lock_key(ip: str) -> str:
    """The row of the address's lock (bind it where `locked_at_subquery` wants it)."""
    return f"authlock:{ip}"


def locked_at_subquery() -> ScalarSelect[Any]:
    """`locked_at` as a subquery, for a read that wants it beside other things: bind the
    address's `lock_key` as `key`."""
    return _LOCK_OF.scalar_subquery()


def locked_at(conn: Connection, ip: str) -> float | None:
    """When the address was last locked out (the caller compares with the lock's length)."""
    return conn.execute(_LOCK_OF, {"key": lock_key(ip)}).scalar()


def count_failure(
    conn: Connection, dialect: ModuleType, ip: str, now: float, window_s: float, failures: int
) -> Counted:
    """Count one failure from `ip`, unless the address is locked already."""
    locked = conn.execute(_LOCK_OF, {"key": lock_key(ip)}).scalar()
    if locked is not None and locked + window_s > now:
        return Counted(locked_for=locked + window_s - now)
    slots = _slots(ip, failures)
    kept: dict[str, float] = dict(conn.execute(_SLOTS_OF, {"slots": slots}).all())
    recent = sum(1 for at in kept.values() if at > now - window_s)
    if recent + 1 >= failures:
        lock = {"key": lock_key(ip), "window_start": now, "count": recent + 1}
        conn.execute(dialect.upsert(rate_windows, ["key"], lock, {"window_start": now}))
        conn.execute(delete(rate_windows).where(rate_windows.c.key.in_(_SLOTS)), {"slots": slots})
        return Counted(locks=True)
    free = [key for key in slots if key not in kept]
    slot = free[0] if free else min(kept, key=lambda key: kept[key])  # the oldest failure's
    failure = {"key": slot, "window_start": now, "count": 1}
    conn.execute(dialect.upsert(rate_windows, ["key"], failure, {"window_start": now}))
    return Counted()


def purge(conn: Connection, until: float) -> int:
    """Forget failures and locks that began at `until` or earlier: they no longer count."""
    result = conn.execute(
        delete(rate_windows).where(
            rate_windows.c.window_start <= until,
            rate_windows.c.key.like("authfail:%") | rate_windows.c.key.like("authlock:%"),
        )
    )
    return int(result.rowcount)
