"""Queries on file reservations, and the one definition of a live one.

A reservation is live while it is not released, its TTL has not passed, and its agent is
around: some session of the agent is online, or went offline within `offline_after_s`. A session
goes offline when it ends, or `offline_after_s` after its last heartbeat if that comes first (as
`who` sees it). So reservations lapse `offline_after_s` (45 s by default) after their agent's
last session went offline, twice that after the last heartbeat of one that fell silent, with no
write of their own; `release_lapsed` makes that final before anyone is granted a path.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    Connection,
    Row,
    and_,
    delete,
    exists,
    func,
    insert,
    not_,
    or_,
    select,
    update,
)

from agentpost.domain.models import Trust
from agentpost.domain.reservations import Reservation
from agentpost.store.schema import agents, reservations, sessions


def _agent_around(now: float, offline_after_s: float, agent: Any = reservations.c.agent) -> Any:
    # Went offline (ended, or heartbeat + offline_after_s: the earlier) after now - grace.
    grace = now - offline_after_s
    return exists().where(
        sessions.c.agent == agent,
        or_(sessions.c.ended_at.is_(None), sessions.c.ended_at > grace),
        sessions.c.heartbeat_at > grace - offline_after_s,
    )


def _unreleased(project: str, now: float) -> Any:
    return and_(
        reservations.c.project == project,
        reservations.c.released_at.is_(None),
        reservations.c.expires_at > now,
    )


def live(
    conn: Connection,
    project: str | None,
    now: float,
    offline_after_s: float,
    *,
    agent: str | None = None,
) -> list[Reservation]:
    """The project's live reservations (every project's: None), of `agent` only if given,
    oldest first."""
    # The holder's trust with each: a listing shows whose words its reason is.
    query = select(reservations, agents.c.trust.label("holder_trust"))
    query = query.outerjoin(agents, agents.c.name == reservations.c.agent).where(
        reservations.c.released_at.is_(None),
        reservations.c.expires_at > now,
        _agent_around(now, offline_after_s),
    )
    if project is not None:
        query = query.where(reservations.c.project == project)
    if agent is not None:
        query = query.where(reservations.c.agent == agent)
    rows = conn.execute(query.order_by(reservations.c.created_at, reservations.c.id))
    return [reservation_of(row) for row in rows]


def agent_around(conn: Connection, agent: str, now: float, offline_after_s: float) -> bool:
    """Whether `agent` has a session around, as its reservations need to be live."""
    return bool(conn.execute(select(_agent_around(now, offline_after_s, agent))).scalar_one())


def follow_name(conn: Connection, old: str, new: str, now: float, offline_after_s: float) -> None:
    """Hand `old`'s live claims to `new` when a session took that name and left `old` with no
    session around: they would lapse at once, under the session still editing those files."""
    if agent_around(conn, old, now, offline_after_s):
        return
    conn.execute(
        update(reservations)
        .where(
            reservations.c.agent == old,
            reservations.c.released_at.is_(None),
            reservations.c.expires_at > now,
        )
        .values(agent=new)
    )


def _or_never(at: float | None) -> float:
    return math.inf if at is None else at


def sessions_around(
    conn: Connection, agent: str, now: float, offline_after_s: float
) -> list[tuple[str, float]]:
    """The agent's sessions that keep its reservations live, each with when it goes offline
    (ended, or `offline_after_s` after its last heartbeat: the earlier) unless heard from."""
    grace = now - offline_after_s
    query = select(sessions.c.id, sessions.c.heartbeat_at, sessions.c.ended_at).where(
        sessions.c.agent == agent,
        or_(sessions.c.ended_at.is_(None), sessions.c.ended_at > grace),
        sessions.c.heartbeat_at > grace - offline_after_s,
    )
    return [
        (row.id, min(row.heartbeat_at + offline_after_s, _or_never(row.ended_at)))
        for row in conn.execute(query.order_by(sessions.c.id))
    ]


def live_count(conn: Connection, agent: str, now: float, offline_after_s: float) -> int:
    """How many live reservations `agent` holds, in every project."""
    query = select(func.count()).where(
        reservations.c.agent == agent,
        reservations.c.released_at.is_(None),
        reservations.c.expires_at > now,
        _agent_around(now, offline_after_s),
    )
    return int(conn.execute(query).scalar_one())


def release_lapsed(conn: Connection, project: str, now: float, offline_after_s: float) -> None:
    """Release the project's reservations whose agent went away, so that they stay lapsed
    when it comes back: by then someone else may hold what they claimed."""
    conn.execute(
        update(reservations)
        .where(_unreleased(project, now), not_(_agent_around(now, offline_after_s)))
        .values(released_at=now)
    )


def add(conn: Connection, reservation: Reservation, session_id: str | None) -> None:
    conn.execute(
        insert(reservations).values(
            id=reservation.id,
            project=reservation.project,
            agent=reservation.agent,
            session_id=session_id,
            worktree=reservation.worktree,
            pattern=reservation.path,
            exclusive=reservation.exclusive,
            reason=reservation.reason,
            created_at=reservation.created_at,
            expires_at=reservation.expires_at,
            ttl_s=reservation.ttl_s,
        )
    )


def change(conn: Connection, reservation_id: str, **values: Any) -> None:
    conn.execute(update(reservations).where(reservations.c.id == reservation_id).values(**values))


def release(conn: Connection, ids: Sequence[str], now: float) -> None:
    if ids:
        conn.execute(
            update(reservations)
            .where(reservations.c.id.in_(list(ids)), reservations.c.released_at.is_(None))
            .values(released_at=now)
        )


def forget_ended(conn: Connection, before: float) -> int:
    """Delete the reservations released or expired before `before`; returns how many went.
    Neither can be live again (renewing takes only a live one), and nothing reads them."""
    result = conn.execute(
        delete(reservations).where(
            or_(reservations.c.released_at < before, reservations.c.expires_at < before)
        )
    )
    return int(result.rowcount)


def forget_ended_of(conn: Connection, agent: str, now: float) -> None:
    """Delete `agent`'s reservations released or expired by `now`: with each new claim, so
    reserving and releasing in a loop leaves it no more rows than it holds live."""
    conn.execute(
        delete(reservations).where(
            reservations.c.agent == agent,
            or_(reservations.c.released_at.is_not(None), reservations.c.expires_at <= now),
        )
    )


def reservation_of(row: Row[Any]) -> Reservation:
    return Reservation(
        id=row.id,
        project=row.project,
        agent=row.agent,
        path=row.pattern,
        exclusive=bool(row.exclusive),
        reason=row.reason or "",
        created_at=row.created_at,
        expires_at=row.expires_at,
        worktree=row.worktree,
        trust=Trust(row.holder_trust or Trust.UNTRUSTED.value),
        ttl_s=row.ttl_s,
    )
