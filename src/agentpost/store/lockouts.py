"""Failed authentications per client address, and the lockouts they lead to.

Kept in `rate_windows`, so a lockout holds across restarts and replicas. Failures are counted
from the first one of a run (not in windows aligned to the clock), so `failures` within
`window_s` of each other always lock, wherever the clock's boundaries fall. The lock is a row
of its own: it lasts `window_s` from the failure that set it, and the count starts afresh.
"""

from __future__ import annotations

from functools import cache
from types import ModuleType
from typing import Any

from sqlalchemy import BindParameter, Connection, ScalarSelect, bindparam, case, delete, select

from agentpost.store.schema import rate_windows

_NOW: BindParameter[float] = bindparam("now")
_SINCE: BindParameter[float] = bindparam("since")
_LOCK_OF = select(rate_windows.c.window_start).where(rate_windows.c.key == bindparam("key"))


def _fail_key(ip: str) -> str:
    return f"authfail:{ip}"


def lock_key(ip: str) -> str:
    """The row of the address's lock (bind it where `locked_at_subquery` wants it)."""
    return f"authlock:{ip}"


@cache
def _count_statement(dialect: ModuleType) -> Any:
    table = rate_windows
    in_run = table.c.window_start > _SINCE
    return dialect.upsert(
        table,
        ["key"],
        {"key": bindparam("key"), "window_start": _NOW, "count": 1},
        {
            "count": case((in_run, table.c.count + 1), else_=1),
            "window_start": case((in_run, table.c.window_start), else_=_NOW),
        },
    ).returning(table.c.count)


def locked_at_subquery() -> ScalarSelect[Any]:
    """`locked_at` as a subquery, for a read that wants it beside other things: bind the
    address's `lock_key` as `key`."""
    return _LOCK_OF.scalar_subquery()


def locked_at(conn: Connection, ip: str) -> float | None:
    """When the address was last locked out (the caller compares with the lock's length)."""
    return conn.execute(_LOCK_OF, {"key": lock_key(ip)}).scalar()


def count_failure(
    conn: Connection, dialect: ModuleType, ip: str, now: float, window_s: float, failures: int
) -> bool:
    """Count one failure from `ip`; True when it is the one that locks the address out."""
    params = {"key": _fail_key(ip), "now": now, "since": now - window_s}
    count = int(conn.execute(_count_statement(dialect), params).scalar_one())
    if count < failures:
        return False
    lock = {"key": lock_key(ip), "window_start": now, "count": count}
    conn.execute(dialect.upsert(rate_windows, ["key"], lock, {"window_start": now, "count": count}))
    conn.execute(delete(rate_windows).where(rate_windows.c.key == _fail_key(ip)))
    return True


def purge(conn: Connection, until: float) -> int:
    """Forget failures and locks that began at `until` or earlier: they no longer count."""
    result = conn.execute(
        delete(rate_windows).where(
            rate_windows.c.window_start <= until,
            rate_windows.c.key.like("authfail:%") | rate_windows.c.key.like("authlock:%"),
        )
    )
    return int(result.rowcount)
