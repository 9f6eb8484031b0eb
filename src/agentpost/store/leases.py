"""Leases: named locks with a fencing term, held while the holder's session is live.

A lease has no expiry of its own. It is held while its holder's session has not ended and has
heartbeat within `ttl_s` (the settings' `offline_after_s`): every heartbeat renews it, and a
stopped session or a dead local process (whose session is ended at once) lets it lapse. Claiming
is one upsert whose condition is checked by the database on the row it locks, so of many
claimants exactly one wins, with no read-back; the term grows with every new holder.

A lease nobody has held for the retention is forgotten (`forget_lapsed`); the greatest term it
handed out is kept in the row `TERMS_FLOOR`, and a new lease's first term is above it, so no
term is ever handed out twice under one name.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from sqlalchemy import Connection, Row, and_, case, delete, exists, or_, select, update
from sqlalchemy.sql import ColumnElement

from agentpost.store.schema import by_code_point, leases, sessions

TERMS_FLOOR = "terms:forgotten"
"""The row keeping the greatest term of any lease forgotten: never a lease of anyone's (a
leader's lease is `leader:<project>`)."""

ASIDE_PREFIX = "aside:"
"""`aside:<session_id>`: the session's word that it takes no free seat by itself (it stepped
down, or was minted without `auto_lead`) until it claims one. Kept here, not in a process's
memory, so every replica and a restarted one keep it; it lives while the session does, and is
forgotten with the session's other leases (`forget_lapsed`)."""


@dataclass(frozen=True, slots=True)
class Holding:
    """A lease's row joined with its holder's session, as the store sees it now: the last
    holder stays named after the lease lapsed (`live` says whether it holds)."""

    name: str
    holder: str | None
    session_id: str | None
    term: int
    acquired_at: float
    live: bool
    heartbeat_at: float | None
    host: str | None
    pid: int | None
    pid_start: str | None
    branch: str | None
    worktree: str | None


def _session_live(cutoff: float) -> ColumnElement[bool]:
    return exists().where(
        sessions.c.id == leases.c.session_id,
        sessions.c.ended_at.is_(None),
        sessions.c.heartbeat_at > cutoff,
    )


def claim(
    conn: Connection,
    dialect: ModuleType,
    name: str,
    *,
    holder: str,
    session_id: str,
    now: float,
    ttl_s: float,
    force: bool = False,
) -> int | None:
    """Take the lease for `session_id`; its term, or None while another live session holds it.

    The lease belongs to the session: already holding it renews nothing and keeps the term (a
    heartbeat is what renews), whatever name the session goes by now; a new holder, `force`
    included, gets the next term.
    """
    mine = and_(leases.c.session_id == session_id, leases.c.holder.is_not(None))
    held = conn.execute(select(leases.c.term).where(leases.c.name == name, mine)).first()
    if held is not None and _is_live(conn, name, now - ttl_s):
        return int(held.term)
    free: ColumnElement[bool] = or_(leases.c.holder.is_(None), ~_session_live(now - ttl_s))
    floor = conn.execute(select(leases.c.term).where(leases.c.name == TERMS_FLOOR)).scalar()
    values = {
        "name": name,
        "holder": holder,
        "session_id": session_id,
        "term": 1 + (floor or 0),
        "acquired_at": now,
    }
    change = {
        "holder": holder,
        "session_id": session_id,
        "term": leases.c.term + 1,
        "acquired_at": now,
    }
    stmt = dialect.upsert(leases, ["name"], values, change, where=None if force else free)
    row = conn.execute(stmt.returning(leases.c.term, leases.c.session_id)).first()
    if row is None or row.session_id != session_id:
        return None
    return int(row.term)


def forget_lapsed(
    conn: Connection, dialect: ModuleType, *, before: float, now: float, ttl_s: float, limit: int
) -> int:
    """Retention: delete up to `limit` leases taken before `before` and not held since (freed,
    or their holder's session silent since then); returns how many went. The greatest term
    among them goes to `TERMS_FLOOR` first."""
    held_since = exists().where(
        sessions.c.id == leases.c.session_id, sessions.c.heartbeat_at >= before
    )
    held_now = and_(leases.c.holder.is_not(None), _session_live(now - ttl_s))
    found = list(
        conn.execute(
            select(leases.c.name, leases.c.term)
            .where(
                leases.c.name != TERMS_FLOOR,
                leases.c.acquired_at < before,
                or_(leases.c.holder.is_(None), ~held_since),
                ~held_now,
            )
            .order_by(leases.c.acquired_at)
            .limit(limit)
        )
    )
    if not found:
        return 0
    top = max(int(row.term) for row in found)
    keep = {"name": TERMS_FLOOR, "holder": None, "session_id": None, "term": top}
    greater = case((leases.c.term < top, top), else_=leases.c.term)
    conn.execute(dialect.upsert(leases, ["name"], {**keep, "acquired_at": now}, {"term": greater}))
    conn.execute(delete(leases).where(leases.c.name.in_([row.name for row in found])))
    return len(found)


def _is_live(conn: Connection, name: str, cutoff: float) -> bool:
    query = select(leases.c.name).where(
        leases.c.name == name, leases.c.holder.is_not(None), _session_live(cutoff)
    )
    return conn.execute(query).first() is not None


def release(
    conn: Connection, name: str, *, now: float, session_ids: list[str] | None = None
) -> bool:
    """Clear the holder (only if one of `session_ids` holds it, when given); True if cleared.
    `acquired_at` becomes the release's time: retention counts from when it was last held."""
    stmt = update(leases).where(leases.c.name == name, leases.c.holder.is_not(None))
    if session_ids is not None:
        stmt = stmt.where(leases.c.session_id.in_(session_ids))
    return bool(conn.execute(stmt.values(holder=None, session_id=None, acquired_at=now)).rowcount)


def stand_aside(
    conn: Connection, dialect: ModuleType, session_id: str, agent: str, now: float
) -> None:
    """Record that `session_id` stands aside (`ASIDE_PREFIX`)."""
    values = {
        "name": ASIDE_PREFIX + session_id,
        "holder": agent,
        "session_id": session_id,
        "term": 0,
        "acquired_at": now,
    }
    conn.execute(dialect.upsert(leases, ["name"], values, {"acquired_at": now}))


def stands_aside(conn: Connection, session_id: str) -> bool:
    query = select(leases.c.name).where(leases.c.name == ASIDE_PREFIX + session_id)
    return conn.execute(query).first() is not None


def stand_again(conn: Connection, session_id: str) -> None:
    """`session_id` claimed a seat: it stands for free seats by itself again."""
    conn.execute(delete(leases).where(leases.c.name == ASIDE_PREFIX + session_id))


_HOLDING = select(
    leases,
    sessions.c.agent.label("session_agent"),
    sessions.c.ended_at,
    sessions.c.heartbeat_at,
    sessions.c.host,
    sessions.c.pid,
    sessions.c.pid_start,
    sessions.c.branch,
    sessions.c.worktree,
).select_from(leases.outerjoin(sessions, sessions.c.id == leases.c.session_id))


def _holding(row: Row[Any], cutoff: float) -> Holding:
    live = (
        row.holder is not None
        and row.ended_at is None
        and row.heartbeat_at is not None
        and row.heartbeat_at > cutoff
    )
    return Holding(
        name=row.name,
        # The session's agent now: a session that took another name keeps its seat.
        holder=row.session_agent if row.holder is not None and row.session_agent else row.holder,
        session_id=row.session_id,
        term=int(row.term),
        acquired_at=row.acquired_at,
        live=live,
        heartbeat_at=row.heartbeat_at,
        host=row.host,
        pid=row.pid,
        pid_start=row.pid_start,
        branch=row.branch,
        worktree=row.worktree,
    )


def holding(conn: Connection, name: str, *, now: float, ttl_s: float) -> Holding | None:
    """The lease `name` as it stands: None if it was never taken; `live` False once lapsed."""
    row = conn.execute(_HOLDING.where(leases.c.name == name)).first()
    return None if row is None else _holding(row, now - ttl_s)


def holdings(conn: Connection, prefix: str, *, now: float, ttl_s: float) -> list[Holding]:
    """Every lease whose name starts with `prefix`, by name."""
    query = _HOLDING.where(leases.c.name.startswith(prefix, autoescape=True)).order_by(
        by_code_point(leases.c.name)
    )
    return [_holding(row, now - ttl_s) for row in conn.execute(query)]


def holder_of(conn: Connection, name: str, *, now: float, ttl_s: float) -> str | None:
    """The agent holding `name` now, if any."""
    found = holding(conn, name, now=now, ttl_s=ttl_s)
    return found.holder if found is not None and found.live else None
