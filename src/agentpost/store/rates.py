"""Rate counters kept in the store, so a limit holds across restarts and processes: fixed
windows (`hit`), or a window that slides by the minute (`hit_sliding`)."""

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


SLIDE_STEP_S = 60.0
"""How finely `hit_sliding` slides: it counts whole minutes."""


def _slide_slots(key: str, window_s: float) -> list[str]:
    return [f"{key}|{n}" for n in range(_slide_steps(window_s))]


def _slide_steps(window_s: float) -> int:
    return max(1, int(-(-window_s // SLIDE_STEP_S)))


def hit_sliding(
    conn: Connection, dialect: ModuleType, key: str, now: float, window_s: float, limit: int
) -> float | None:
    """Count one hit against `key` over the last `window_s` (to the minute), unless `limit`
    hits are counted there already: then nothing is counted and the answer is the seconds
    until one of them stops counting. A minute's hits share a row (`<key>|<minute mod
    steps>`), so a key costs at most a window's minutes of rows, whatever the limit. The
    minute's row is written first: a hit in flight beside this one waits for it, and counts
    it."""
    steps = _slide_steps(window_s)
    start = now - (now % SLIDE_STEP_S)
    slot = f"{key}|{int(start // SLIDE_STEP_S) % steps}"
    _hit_statement(dialect).scalar(conn, {"key": slot, "start": start, "cost": 1})
    kept = conn.execute(
        select(rate_windows.c.window_start, rate_windows.c.count)
        .where(rate_windows.c.key.in_(_slide_slots(key, window_s)))
        .where(rate_windows.c.window_start > now - window_s)
        .order_by(rate_windows.c.window_start)
    ).all()
    total = sum(int(count) for _, count in kept)
    if total <= limit:
        return None
    for began, count in kept:  # the oldest minutes stop counting first
        total -= int(count)
        if total <= limit:  # this hit would fit
            return float(began) + window_s - now
    return window_s  # unreachable: the newest minute ends the loop


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
