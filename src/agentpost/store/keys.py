"""Queries on agent keys: stored as SHA-256 hashes only, found by hash, revoked in place."""

from __future__ import annotations

from typing import Any, Literal

from sqlalchemy import (
    Connection,
    Row,
    Select,
    String,
    bindparam,
    func,
    insert,
    literal,
    select,
    update,
)

from agentpost.domain.limits import never_stored
from agentpost.store import lockouts
from agentpost.store.prepared import Prepared
from agentpost.store.schema import ONE_ROW, agents, by_code_point, keys, sessions

# What authentication needs in one indexed read: the key, and whether its agent may act.
_BY_HASH: Select[Any] = (
    select(
        keys.c.id,
        keys.c.agent,
        keys.c.hash,
        keys.c.admin,
        keys.c.revoked_at,
        keys.c.last_used_at,
        agents.c.trust,
        agents.c.project,
        agents.c.disabled_at,
    )
    .join(agents, agents.c.name == keys.c.agent)
    .where(keys.c.hash == bindparam("hash"))
)
_GET = select(keys).where(keys.c.id == bindparam("key_id"))


def own_session_id(key_id: str) -> str:
    """The session a key's requests count as when they name none: one per key, stable.
    Key ids are `k_…`; the session's is the same with `s_`."""
    return "s_" + key_id[2:]


_OWN_SESSION_ID = literal("s_") + func.substr(keys.c.id, 3)
"""`own_session_id` in SQL."""


def move_own_sessions(conn: Connection, agent: str, project: str | None) -> None:
    """Put the agent's keys' own sessions in `project`: they stand for no worktree, so they
    say where the agent works. Sessions registered with a project of their own keep it."""
    own = select(_OWN_SESSION_ID).where(keys.c.agent == agent)
    conn.execute(
        update(sessions)
        .where(sessions.c.agent == agent, sessions.c.id.in_(own))
        .values(project=project)
    )


# Everything a request's authentication reads, in one statement (one row, whatever matched):
# the address's lock, the key and whether its agent may act, and the session it speaks for.
_FOR_REQUEST = Prepared(
    select(
        lockouts.locked_at_subquery().label("locked_at"),
        *_BY_HASH.selected_columns,
        sessions.c.id.label("session_id"),
        sessions.c.agent.label("session_agent"),
        sessions.c.transport.label("session_transport"),
        sessions.c.heartbeat_at.label("session_heartbeat_at"),
        sessions.c.ended_at.label("session_ended_at"),
    ).select_from(
        ONE_ROW.outerjoin(keys, keys.c.hash == bindparam("hash"))
        .outerjoin(agents, agents.c.name == keys.c.agent)
        .outerjoin(
            sessions,
            sessions.c.id == func.coalesce(bindparam("session", type_=String), _OWN_SESSION_ID),
        )
    )
)


def for_request(conn: Connection, *, digest: str | None, ip: str, session: str | None) -> Any:
    """One read for one request: `locked_at` of the address `ip`; the key found by `digest`
    (`id` None: none) as `by_hash` has it; and the session named, or the key's own
    (`session_id` None: no such session), its columns prefixed `session_`."""
    params = {"key": lockouts.lock_key(ip), "hash": digest, "session": session}
    return _FOR_REQUEST.first(conn, params)


def insert_key(
    conn: Connection, *, key_id: str, agent: str, digest: str, admin: bool, label: str, now: float
) -> None:
    conn.execute(
        insert(keys).values(
            id=key_id, agent=agent, hash=digest, admin=admin, label=label, created_at=now
        )
    )


def by_hash(conn: Connection, digest: str) -> Row[Any] | None:
    return conn.execute(_BY_HASH, {"hash": digest}).first()


def get_key(conn: Connection, key_id: str) -> Row[Any] | None:
    if never_stored(key_id):
        return None
    return conn.execute(_GET, {"key_id": key_id}).first()


_TURNED_OFF = Prepared(
    select(keys.c.revoked_at, agents.c.disabled_at)
    .join(agents, agents.c.name == keys.c.agent)
    .where(keys.c.id == bindparam("key_id"))
)


def turned_off(conn: Connection, key_id: str) -> Literal["revoked", "disabled"] | None:
    """Why a key no longer speaks for its agent (revoked, or its agent disabled; a key that is
    not there at all counts as revoked), or None while it does."""
    row = _TURNED_OFF.first(conn, {"key_id": key_id})
    if row is None or row.revoked_at is not None:
        return "revoked"
    return "disabled" if row.disabled_at is not None else None


def list_keys(conn: Connection, agent: str | None = None) -> list[Row[Any]]:
    query = select(keys).order_by(by_code_point(keys.c.agent), keys.c.created_at, keys.c.id)
    if agent is not None:
        query = query.where(keys.c.agent == agent)
    return list(conn.execute(query))


def revoke(conn: Connection, key_id: str, now: float) -> None:
    conn.execute(
        update(keys).where(keys.c.id == key_id, keys.c.revoked_at.is_(None)).values(revoked_at=now)
    )


def touch(conn: Connection, key_id: str, now: float) -> None:
    conn.execute(update(keys).where(keys.c.id == key_id).values(last_used_at=now))


def holds_live_key(conn: Connection, agent: str) -> bool:
    """Whether some key not revoked speaks for `agent`: whoever holds it reads its mail."""
    found = select(keys.c.id).where(keys.c.agent == agent, keys.c.revoked_at.is_(None)).limit(1)
    return conn.execute(found).first() is not None


def live_admin_keys(conn: Connection) -> int:
    """Admin keys that still open the admin endpoints (not revoked, agent enabled)."""
    return int(
        conn.execute(
            select(func.count())
            .select_from(keys.join(agents, agents.c.name == keys.c.agent))
            .where(
                keys.c.admin.is_(True), keys.c.revoked_at.is_(None), agents.c.disabled_at.is_(None)
            )
        ).scalar_one()
    )
