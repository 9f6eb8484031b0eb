"""Queries on explicit channel memberships (the implicit ones follow from agents' projects)."""

from __future__ import annotations

from types import ModuleType

from sqlalchemy import Connection, delete, func, select

from agentpost.store.schema import agents, channel_members


def join(conn: Connection, dialect: ModuleType, channel: str, agent: str, now: float) -> None:
    conn.execute(
        dialect.insert_ignore(channel_members).values(channel=channel, agent=agent, joined_at=now)
    )


def leave(conn: Connection, channel: str, agent: str) -> bool:
    result = conn.execute(
        delete(channel_members).where(
            channel_members.c.channel == channel, channel_members.c.agent == agent
        )
    )
    return bool(result.rowcount)


def has_joined(conn: Connection, channel: str, agent: str) -> bool:
    query = select(channel_members.c.channel).where(
        channel_members.c.channel == channel, channel_members.c.agent == agent
    )
    return conn.execute(query).first() is not None


def joined_count(conn: Connection, agent: str, besides: str | None) -> int:
    """How many channels `agent` has joined, `besides` one (its project's: a row recorded
    before that channel became its own, which it belongs to by project now)."""
    query = select(func.count()).where(channel_members.c.agent == agent)
    if besides is not None:
        query = query.where(channel_members.c.channel != besides)
    return int(conn.execute(query).scalar_one())


def joined_channels(conn: Connection, agent: str) -> list[str]:
    rows = conn.execute(select(channel_members.c.channel).where(channel_members.c.agent == agent))
    return [row.channel for row in rows]


def explicit_members(conn: Connection, channel: str) -> list[str]:
    rows = conn.execute(
        select(channel_members.c.agent)
        .join(agents, agents.c.name == channel_members.c.agent)
        .where(channel_members.c.channel == channel, agents.c.disabled_at.is_(None))
    )
    return [row.agent for row in rows]


def explicit_channels(conn: Connection) -> dict[str, int]:
    rows = conn.execute(
        select(channel_members.c.channel, func.count())
        .join(agents, agents.c.name == channel_members.c.agent)
        .where(agents.c.disabled_at.is_(None))  # counted as `explicit_members` lists them
        .group_by(channel_members.c.channel)
    )
    return {row[0]: int(row[1]) for row in rows}
