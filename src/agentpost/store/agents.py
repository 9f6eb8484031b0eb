"""Queries on agents and their sessions (presence)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from typing import Any

from sqlalchemy import (
    Connection,
    Row,
    and_,
    bindparam,
    case,
    delete,
    func,
    insert,
    or_,
    select,
    update,
)

from agentpost.domain.limits import never_stored
from agentpost.domain.models import SessionInfo, Status, Trust
from agentpost.store.prepared import Prepared, in_parts, numbered, numbered_values
from agentpost.store.schema import agents, by_code_point, sessions

_GET_AGENT = select(agents).where(agents.c.name == bindparam("name"))
_AGENT_TRUST = select(agents.c.trust).where(agents.c.name == bindparam("name"))


@cache
def _agents_enabled(count: int) -> Prepared:
    """One statement per list length: an expanding IN would be re-rendered on every send."""
    names = numbered("n", count)
    return Prepared(
        select(agents.c.name, agents.c.disabled_at, agents.c.trust).where(agents.c.name.in_(names))
    )


def get_agent(conn: Connection, name: str) -> Row[Any] | None:
    return conn.execute(_GET_AGENT, {"name": name}).first()


def agent_trust(conn: Connection, name: str) -> Trust | None:
    """The agent's trust as the owner last set it; None for no such agent."""
    trust = conn.execute(_AGENT_TRUST, {"name": name}).scalar()
    return None if trust is None else Trust(trust)


def trust_of(conn: Connection, names: Sequence[str]) -> dict[str, Trust]:
    """name -> trust, for those of `names` that exist."""
    rows = conn.execute(select(agents.c.name, agents.c.trust).where(agents.c.name.in_(names)))
    return {name: Trust(trust) for name, trust in rows}


def existing_names(conn: Connection, names: Sequence[str]) -> dict[str, bool]:
    """name -> enabled, for those of `names` that exist."""
    rows = _agents_enabled(len(names)).rows(conn, numbered_values("n", names))
    return {name: disabled_at is None for name, disabled_at, _trust in rows}


def create_agent(
    conn: Connection,
    name: str,
    *,
    now: float,
    project: str | None = None,
    description: str = "",
    trust: str = "verified",
    capabilities: Sequence[str] = (),
) -> None:
    conn.execute(
        insert(agents).values(
            name=name,
            project=project,
            description=description,
            capabilities=capabilities_json(capabilities),
            trust=trust,
            created_at=now,
        )
    )


def capabilities_json(capabilities: Sequence[str]) -> str:
    """How the `capabilities` column keeps a list: JSON, with its letters as they are."""
    return json.dumps(list(capabilities), ensure_ascii=False)


def update_agent(conn: Connection, name: str, **values: Any) -> None:
    if values:
        conn.execute(update(agents).where(agents.c.name == name).values(**values))


def enabled_agent_names(conn: Connection) -> list[str]:
    rows = conn.execute(
        select(agents.c.name)
        .where(agents.c.disabled_at.is_(None))
        .order_by(by_code_point(agents.c.name))
    )
    return [row.name for row in rows]


def project_agent_names(conn: Connection, project: str) -> list[str]:
    rows = conn.execute(
        select(agents.c.name).where(agents.c.project == project, agents.c.disabled_at.is_(None))
    )
    return [row.name for row in rows]


def projects(conn: Connection) -> list[str]:
    rows = conn.execute(
        select(agents.c.project)
        .where(agents.c.project.is_not(None), agents.c.disabled_at.is_(None))
        .distinct()
    )
    return sorted(row.project for row in rows)


# -- sessions ------------------------------------------------------------------------------------


def live_condition(now: float, offline_after_s: float) -> Any:
    return and_(sessions.c.ended_at.is_(None), sessions.c.heartbeat_at > now - offline_after_s)


def open_session(
    conn: Connection,
    session: SessionInfo,
    *,
    derived_name: bool,
    pid_start: str | None = None,
    says: bool = True,
) -> None:
    """`says`: whether opening it says what the agent is doing (see `presence_rows`)."""
    conn.execute(
        insert(sessions).values(
            id=session.id,
            agent=session.agent,
            transport=session.transport,
            host=session.host,
            pid=session.pid,
            pid_start=pid_start,
            project=session.project,
            worktree=session.worktree,
            branch=session.branch,
            objective=session.objective,
            status=session.status.value,
            derived_name=derived_name,
            started_at=session.started_at,
            heartbeat_at=session.heartbeat_at,
            said_at=session.started_at if says else None,
        )
    )


def make_room_for_http_session(
    conn: Connection, agent: str, limit: int, quiet_for_s: float, now: float
) -> bool:
    """Keep the agent's sessions over HTTP under `limit` before another is minted, by deleting
    those that ended, the longest ended first, then those silent for `quiet_for_s`, the
    longest silent first; False when that is not enough (the rest may still be in use: a
    session silent for a while comes back with its next request)."""
    found = conn.execute(
        select(sessions.c.id, sessions.c.ended_at, sessions.c.heartbeat_at).where(
            sessions.c.agent == agent, sessions.c.transport == "http"
        )
    ).all()
    excess = len(found) - limit + 1
    if excess <= 0:
        return True
    ended = sorted((r for r in found if r.ended_at is not None), key=lambda r: (r.ended_at, r.id))
    silent = sorted(
        (r for r in found if r.ended_at is None and r.heartbeat_at <= now - quiet_for_s),
        key=lambda r: (r.heartbeat_at, r.id),
    )
    gone = [r.id for r in [*ended, *silent]]
    if len(gone) < excess:
        return False
    for part in in_parts(gone[:excess]):
        conn.execute(delete(sessions).where(sessions.c.id.in_(part)))
    return True


def live_sessions(
    conn: Connection, now: float, offline_after_s: float, *, agent: str | None = None
) -> list[Row[Any]]:
    query = select(sessions).where(live_condition(now, offline_after_s))
    if agent is not None:
        query = query.where(sessions.c.agent == agent)
    return list(conn.execute(query))


def sessions_the_owner_ended(conn: Connection) -> list[Row[Any]]:
    """Local sessions that ended as the owner disabled their agent, enabled again since or
    not: a process may still run in one, and what it runs must not pass for the owner's."""
    query = select(sessions).where(
        sessions.c.ended_by_owner.is_(True), sessions.c.transport == "stdio"
    )
    return list(conn.execute(query))


_GET_SESSION = select(sessions).where(sessions.c.id == bindparam("session_id"))


def get_session(conn: Connection, session_id: str) -> Row[Any] | None:
    if never_stored(session_id):
        return None
    return conn.execute(_GET_SESSION, {"session_id": session_id}).first()


def beat_sessions(conn: Connection, session_ids: list[str], now: float) -> None:
    """Many sessions' heartbeats in one statement. An ended session takes none: a stream
    still open for it after `DELETE /v1/sessions/{id}` would keep its "last seen" fresh."""
    conn.execute(
        update(sessions)
        .where(sessions.c.id.in_(session_ids), sessions.c.ended_at.is_(None))
        .values(heartbeat_at=now)
    )


def update_session(conn: Connection, session_id: str, **values: Any) -> None:
    conn.execute(update(sessions).where(sessions.c.id == session_id).values(**values))


def advance_urgent_cursor(conn: Connection, session_id: str, newest: int) -> int | None:
    """Move the session's urgent cursor forward to `newest`; returns where it was, None when
    it already was there. What lies up to that was told by whoever moved it there: a caller
    that looked before the move may have seen some of it too."""
    before = conn.execute(
        select(sessions.c.urgent_cursor).where(sessions.c.id == session_id)
    ).scalar()
    if before is None or before >= newest:
        return None
    conn.execute(update(sessions).where(sessions.c.id == session_id).values(urgent_cursor=newest))
    return int(before)


def end_sessions(conn: Connection, session_ids: Sequence[str], now: float) -> None:
    if session_ids:
        conn.execute(
            update(sessions)
            .where(sessions.c.id.in_(list(session_ids)), sessions.c.ended_at.is_(None))
            .values(ended_at=now)
        )


def presence_rows(
    conn: Connection, project: str | None, now: float, offline_after_s: float
) -> list[Row[Any]]:
    """Each enabled agent with the session that speaks for it (if any): of its live sessions,
    the one that last said what it is doing (opened, or set its status or objective), since
    every live one heartbeats; with none live, the one seen last, a session not ended before
    any ended one (which says what the agent was doing, not what it is doing). A key's own
    session, opened by whatever request its key makes (a command's read), has said nothing
    until it sets its status or objective: it speaks only when no live session has, and its
    `said_at` None says that its status and objective are no words of the agent's. `last_seen`
    is the freshest heartbeat of any of its sessions, as the directory says it."""
    live = live_condition(now, offline_after_s)
    said = func.coalesce(sessions.c.said_at, 0.0)
    # One session per agent even when times tie: rank them, the one that speaks first.
    freshest = func.row_number().over(
        partition_by=sessions.c.agent,
        order_by=(
            case((live, 0), else_=1),
            sessions.c.ended_at.is_not(None),
            case((live, said), else_=None).desc(),  # the same for every session not live
            sessions.c.heartbeat_at.desc(),
            sessions.c.started_at.desc(),
            sessions.c.id,
        ),
    )
    last_seen = func.max(sessions.c.heartbeat_at).over(partition_by=sessions.c.agent)
    latest = select(
        sessions.c.id, sessions.c.agent, freshest.label("rank"), last_seen.label("last_seen")
    ).subquery()
    query = (
        select(
            agents.c.name,
            agents.c.description,
            agents.c.trust,
            agents.c.project.label("agent_project"),
            sessions.c.id.label("session_id"),
            sessions.c.project,
            sessions.c.branch,
            sessions.c.worktree,
            sessions.c.objective,
            sessions.c.status,
            sessions.c.said_at,
            sessions.c.ended_at,
            latest.c.last_seen,
        )
        .select_from(agents)
        .outerjoin(latest, and_(latest.c.agent == agents.c.name, latest.c.rank == 1))
        .outerjoin(sessions, sessions.c.id == latest.c.id)
        .where(agents.c.disabled_at.is_(None))
        .order_by(by_code_point(agents.c.name))
    )
    if project is not None:
        query = query.where(or_(agents.c.project == project, sessions.c.project == project))
    return list(conn.execute(query))


def status_of(value: str | None) -> Status:
    return Status(value) if value else Status.IDLE


# -- accounts: agents as the directory and the owner list them ------------------------------------


def _holds_every_word(row: Row[Any], words: Sequence[str]) -> bool:
    """In Python, not SQL: databases fold only ASCII case (`ÉCOLE` is not `école` there),
    and capabilities are stored as JSON, whose brackets, commas and `\\u` escapes a pattern
    would match as if they were words."""
    text = "\n".join(
        [row.name, row.description or "", row.project or "", *json.loads(row.capabilities)]
    ).casefold()
    return all(word.casefold() in text for word in words)


def account_rows(
    conn: Connection,
    *,
    now: float,
    offline_after_s: float,
    names: Sequence[str] | None = None,
    excluding: Sequence[str] = (),
    include_disabled: bool = False,
    project: str | None = None,
    words: Sequence[str] = (),
    limit: int | None = None,
) -> list[Row[Any]]:
    """Agents by name, each with `last_seen` (its freshest heartbeat, ended sessions too) and
    `online` (a live session). `words` must each appear, in any case, in the name,
    description, project or capabilities."""
    live = and_(sessions.c.ended_at.is_(None), sessions.c.heartbeat_at > now - offline_after_s)
    seen = (
        select(
            sessions.c.agent,
            func.max(sessions.c.heartbeat_at).label("last_seen"),
            func.max(case((live, 1), else_=0)).label("online"),
        )
        .group_by(sessions.c.agent)
        .subquery()
    )
    query = (
        select(agents, seen.c.last_seen, func.coalesce(seen.c.online, 0).label("online"))
        .select_from(agents)
        .outerjoin(seen, seen.c.agent == agents.c.name)
        .order_by(by_code_point(agents.c.name))
    )
    if names is not None:
        query = query.where(agents.c.name.in_(list(names)))
    if excluding:
        query = query.where(agents.c.name.not_in(list(excluding)))
    if not include_disabled:
        query = query.where(agents.c.disabled_at.is_(None))
    if project is not None:
        query = query.where(agents.c.project == project)
    if not words:
        return list(conn.execute(query if limit is None else query.limit(limit)))
    found = [row for row in conn.execute(query) if _holds_every_word(row, words)]
    return found if limit is None else found[:limit]


def forget_old_sessions(conn: Connection, before: float, limit: int) -> int:
    """Delete up to `limit` sessions that ended, or went silent, before `before`, but for each
    agent's last one (which says when it was last seen); returns how many went.

    A local session that went silent without ending is kept: its process may be asleep with
    its machine, and wakes to beat a session it still holds. One over HTTP that went silent
    is minted again by its client (or is the key's own, opened again by any request)."""
    gone_at = case(
        (sessions.c.ended_at.is_not(None), sessions.c.ended_at),
        (sessions.c.transport != "stdio", sessions.c.heartbeat_at),
        else_=None,
    )
    ranked = select(
        sessions.c.id,
        gone_at.label("gone_at"),
        func.row_number()
        .over(
            partition_by=sessions.c.agent,
            order_by=(sessions.c.heartbeat_at.desc(), sessions.c.id.desc()),
        )
        .label("rank"),
    ).subquery()
    found = conn.execute(
        select(ranked.c.id).where(ranked.c.rank > 1, ranked.c.gone_at < before).limit(limit)
    )
    gone = list(found.scalars())
    if gone:
        conn.execute(delete(sessions).where(sessions.c.id.in_(gone)))
    return len(gone)


def end_agent_sessions(conn: Connection, agent: str, now: float) -> None:
    """The owner's end of them, as it disables the agent: marked so (`sessions_the_owner_ended`)."""
    conn.execute(
        update(sessions)
        .where(sessions.c.agent == agent, sessions.c.ended_at.is_(None))
        .values(ended_at=now, ended_by_owner=True)
    )
