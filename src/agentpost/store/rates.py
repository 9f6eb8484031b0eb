"""Fixed-window counters kept in the store, so a limit holds across restarts and processes."""

from __future__ import annotations

from functools import cache
from types import ModuleType

from sqlalchemy import BindParameter, Connection, bindparam, case, delete, select

from agentpost.store.prepared import Prepared
from agentpost.store.schema import rate_windows


@cache
def _hit_statement(dialect: ModuleType) -> Prepared:
    table = rate_windows
    start: BindParameter[float] = bindparam("start")
    cost: BindParameter[int] = bindparam("cost")
    upsert = dialect.upsert(
        table,
        ["key"],
        {"key": bindparam("key"), "window_start": start, "count": cost},
        {
            "count": case((table.c.window_start == start, table.c.count + cost), else_=cost),
            "window_start": start,
        },
    )
    return Prepared(upsert.returning(table.c.count))


def hit(
    conn: Connection, dialect: ModuleType, key: str, now: float, window_s: float, cost: int = 1
) -> tuple[int, float]:
    """Count `cost` hits against `key`; returns (count in the window, seconds until it resets)."""
    start = now - (now % window_s)
    params = {"key": key, "start": start, "cost": cost}
    count = _hit_statement(dialect).scalar(conn, params)
    return int(count), start + window_s - now


def peek(conn: Connection, key: str, now: float, window_s: float) -> int:
    start = now - (now % window_s)
    row = conn.execute(
        select(rate_windows.c.window_start, rate_windows.c.count).where(rate_windows.c.key == key)
    ).first()
    if row is None:
        return 0
    window_start, count = row
    return int(count) if window_start == start else 0


def forget_ended(conn: Connection, prefix: str, until: float) -> int:
    """Forget the `prefix` windows that began at `until` or earlier (a window's length ago):
    a hit there starts a new window anyway. Keys carrying an address (`register:<ip>`) would
    otherwise pile up a row for every address that ever came."""
    result = conn.execute(
        delete(rate_windows).where(
            rate_windows.c.window_start <= until, rate_windows.c.key.startswith(prefix)
        )
    )
    return int(result.rowcount)
