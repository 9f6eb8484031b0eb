"""Queries on agent keys: stored as SHA-256 hashes only, found by hash, revoked in place."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, Select, bindparam, func, insert, select, update

from agentpost.store.schema import agents, keys

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
    return conn.execute(_GET, {"key_id": key_id}).first()


def list_keys(conn: Connection, agent: str | None = None) -> list[Row[Any]]:
    query = select(keys).order_by(keys.c.agent, keys.c.created_at, keys.c.id)
    if agent is not None:
        query = query.where(keys.c.agent == agent)
    return list(conn.execute(query))


def revoke(conn: Connection, key_id: str, now: float) -> None:
    conn.execute(
        update(keys).where(keys.c.id == key_id, keys.c.revoked_at.is_(None)).values(revoked_at=now)
    )


def touch(conn: Connection, key_id: str, now: float) -> None:
    conn.execute(update(keys).where(keys.c.id == key_id).values(last_used_at=now))


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
