"""Per-agent limits: the owner's overrides of the settings' send rate and counted caps."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from types import ModuleType

from sqlalchemy import Connection, bindparam, delete, select

from agentpost.store.prepared import (
    NUMBERED_UP_TO,
    Prepared,
    in_parts,
    numbered,
    numbered_values,
)
from agentpost.store.schema import agent_limits

Override = tuple[int | None, int | None, int | None, int | None]
"""(send_rate_per_minute, max_unacked, max_channels_per_agent, max_open_tasks_per_agent);
None keeps the setting."""
NONE: Override = (None, None, None, None)
COLUMNS = (
    "send_rate_per_minute",
    "max_unacked",
    "max_channels_per_agent",
    "max_open_tasks_per_agent",
)
"""The columns of an `Override`, in its order."""

_MANY = select(agent_limits).where(agent_limits.c.agent.in_(bindparam("agents", expanding=True)))


@cache
def _few(count: int) -> Prepared:
    """One statement per list length: an expanding IN would be re-rendered on every send."""
    return Prepared(select(agent_limits).where(agent_limits.c.agent.in_(numbered("n", count))))


def overrides(conn: Connection, names: Sequence[str]) -> dict[str, Override]:
    """The overrides of those of `names` that have any (most agents have none)."""
    if not names:
        return {}
    if len(names) <= NUMBERED_UP_TO:
        rows = _few(len(names)).rows(conn, numbered_values("n", names))
    else:
        rows = [row for part in in_parts(names) for row in conn.execute(_MANY, {"agents": part})]
    return {
        row.agent: (
            row.send_rate_per_minute,
            row.max_unacked,
            row.max_channels_per_agent,
            row.max_open_tasks_per_agent,
        )
        for row in rows
    }


def set_overrides(conn: Connection, dialect: ModuleType, agent: str, override: Override) -> None:
    """Replace the agent's overrides; with none set the row goes, and the defaults hold."""
    if override == NONE:
        conn.execute(delete(agent_limits).where(agent_limits.c.agent == agent))
        return
    values = dict(zip(COLUMNS, override, strict=True))
    conn.execute(dialect.upsert(agent_limits, ["agent"], {"agent": agent, **values}, values))
