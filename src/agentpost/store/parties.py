"""What a direct send reads of its sender and its recipients, in one statement: who of them
is an agent and enabled, the sender's trust, the owner's limits for each, and which recipients
block the sender. Three statements in one, on every send's writer turn."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from sqlalchemy import Connection, bindparam, exists, select

from agentpost.domain.models import Trust
from agentpost.store import limits
from agentpost.store.prepared import Prepared, numbered, numbered_values
from agentpost.store.schema import agent_limits, agents, blocks


@dataclass(frozen=True, slots=True)
class Parties:
    known: dict[str, bool]
    """name -> enabled, for those of the sender and the names that are agents."""
    trust: Trust | None
    """The sender's, as the owner last set it (None: no such agent)."""
    overrides: dict[str, limits.Override]
    """The owner's limits, for those that have any (most have none)."""
    blocking: frozenset[str]
    """Those of them who block the sender."""


@cache
def _parties(count: int) -> Prepared:
    """One statement per list length: an expanding IN would be re-rendered on every send."""
    blocks_sender = exists().where(
        blocks.c.recipient == agents.c.name, blocks.c.sender == bindparam("sender")
    )
    return Prepared(
        select(
            agents.c.name,
            agents.c.disabled_at,
            agents.c.trust,
            *(agent_limits.c[column] for column in limits.COLUMNS),
            agent_limits.c.agent.is_not(None).label("limited"),
            blocks_sender.label("blocks_sender"),
        )
        .select_from(agents.outerjoin(agent_limits, agent_limits.c.agent == agents.c.name))
        .where(agents.c.name.in_(numbered("n", count)))
    )


def of_send(conn: Connection, sender: str, names: Sequence[str]) -> Parties:
    """The sender and `names` (a direct send's recipients, at most a page of them) as the
    store holds them now."""
    params = {**numbered_values("n", [sender, *names]), "sender": sender}
    known: dict[str, bool] = {}
    overrides: dict[str, limits.Override] = {}
    blocking = []
    trust = None
    for row in _parties(len(names) + 1).rows(conn, params):
        name = row.name
        known[name] = row.disabled_at is None
        if name == sender:
            trust = Trust(row.trust)
        if row.limited:
            overrides[name] = (
                row.send_rate_per_minute,
                row.max_unacked,
                row.max_channels_per_agent,
                row.max_open_tasks_per_agent,
            )
        if row.blocks_sender:
            blocking.append(name)
    return Parties(known, trust, overrides, frozenset(blocking))
