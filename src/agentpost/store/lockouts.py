"""Failed authentications per client address, and the lockouts they lead to.

Kept in `rate_windows`, so a lockout holds across restarts and replicas. Each failure is a row
of its own, so the count is exact over a sliding window: `failures` within `window_s` of each
other always lock, and never more are let through, wherever they fall. The lock is a row of its
own: it lasts `window_s` from the failure that set it, and the count starts afresh.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from sqlalchemy import (
    Connection,
    ScalarSelect,
    bindparam,
    delete,
    func,
    insert,
    select,
)

from agentpost.store.schema import rate_windows

_LOCK_OF = select(rate_windows.c.window_start).where(rate_windows.c.key == bindparam("key"))
# A prefix, not a range of keys: PostgreSQL's collation need not order them byte by byte. The
# table holds a row per agent and per recent failure or registration, so a scan stays short.
_IN_RUN = rate_windows.c.key.like(bindparam("run"), escape="/")
_RUN_COUNT = select(func.count()).where(_IN_RUN, rate_windows.c.window_start > bindparam("since"))


@dataclass(frozen=True, slots=True)
class Counted:
    locks: bool = False
    """This failure reached the count: the address is locked from now on."""
    locked_for: float | None = None
    """The address was locked already, by a failure in flight beside this one: the seconds
    left. This failure was not counted, and is answered as a locked-out address is."""


def _run(ip: str) -> str:
    """What the keys of the address's failures begin with (`authfail:<ip>|<random>`)."""
    return f"authfail:{ip}|"


def _run_pattern(ip: str) -> dict[str, str]:
    """`_IN_RUN`'s pattern: the address's keys and no other (`%` and `_` taken literally)."""
    literal = _run(ip).replace("/", "//").replace("%", "/%").replace("_", "/_")
    return {"run": literal + "%"}


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
    conn.execute(
        insert(rate_windows),
        {"key": _run(ip) + secrets.token_hex(8), "window_start": now, "count": 1},
    )
    params = {**_run_pattern(ip), "since": now - window_s}
    count = int(conn.execute(_RUN_COUNT, params).scalar_one())
    if count < failures:
        return Counted()
    lock = {"key": lock_key(ip), "window_start": now, "count": count}
    conn.execute(dialect.upsert(rate_windows, ["key"], lock, {"window_start": now, "count": count}))
    conn.execute(delete(rate_windows).where(_IN_RUN), _run_pattern(ip))
    return Counted(locks=True)


def purge(conn: Connection, until: float) -> int:
    """Forget failures and locks that began at `until` or earlier: they no longer count."""
    result = conn.execute(
        delete(rate_windows).where(
            rate_windows.c.window_start <= until,
            rate_windows.c.key.like("authfail:%") | rate_windows.c.key.like("authlock:%"),
        )
    )
    return int(result.rowcount)
