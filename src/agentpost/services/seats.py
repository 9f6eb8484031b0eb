"""Seats that change without a claim or a release of their own: freed when the owner stops
vouching for their agent or disables it, and renamed with their session. Each change is told
on the project's channel by `system` (`tell`, as a claim's is), but counts against nobody's
send rate: nobody asked for the seat to change."""

from __future__ import annotations

from agentpost.domain.leadership import LEASE_PREFIX
from agentpost.domain.models import Caller
from agentpost.domain.names import check_channel
from agentpost.services.mailbox import Mailbox
from agentpost.store import leases
from agentpost.store.database import Connection

WITHDRAWN = "the owner withdrew its vouch"
NOT_VOUCHED = "the owner has not vouched for that name"
DISABLED = "the owner disabled it"


def unseat(
    conn: Connection,
    mailbox: Mailbox,
    agent: str,
    *,
    now: float,
    ttl_s: float,
    reason: str = WITHDRAWN,
) -> list[str]:
    """Free every seat a session of `agent` holds, in `conn`, each announced saying `reason`:
    only an agent the owner vouches for may lead. The projects whose seat was freed, for the
    audit. A seat whose leader fell silent is freed too, unannounced (nobody sees it led): its
    next heartbeat would revive it."""
    freed = []
    for held in leases.holdings(conn, LEASE_PREFIX, now=now, ttl_s=ttl_s):
        if held.holder != agent:
            continue
        leases.release(conn, held.name, now=now, session_ids=[held.session_id or ""])
        if not held.live:
            continue
        project = held.name.removeprefix(LEASE_PREFIX)
        text = f"{agent} no longer leads {project} (term {held.term}): {reason}. The seat is free."
        tell(conn, mailbox, project, text, leader=None, term=held.term, previous=agent)
        freed.append(project)
    return freed


def tell_renamed(
    conn: Connection, mailbox: Mailbox, caller: Caller, previous: str, *, now: float, ttl_s: float
) -> None:
    """The caller's session took its name from `previous`: the seats it holds stay its own,
    with their terms (the same holder), and each project hears who leads it now."""
    for held in leases.holdings(conn, LEASE_PREFIX, now=now, ttl_s=ttl_s):
        if not held.live or held.session_id != caller.session_id:
            continue
        project = held.name.removeprefix(LEASE_PREFIX)
        text = f"{previous} is now {caller.agent}, and leads {project} still (term {held.term})."
        tell(conn, mailbox, project, text, leader=caller.agent, term=held.term, previous=previous)


def tell(
    conn: Connection,
    mailbox: Mailbox,
    project: str,
    text: str,
    *,
    leader: str | None,
    term: int,
    previous: str | None,
) -> None:
    """Tell #<project> that `leader` (None: nobody) holds its seat now, after `previous`."""
    data = {
        "event": "leader.changed",
        "project": project,
        "leader": leader,
        "term": term,
        "previous": previous,
    }
    mailbox.system_post_in(conn, f"#{check_channel(project)}", text, subject="leader", data=data)
