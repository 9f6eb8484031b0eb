"""What rides along on every MCP answer: the caller's unread count, and urgent mail its
session has not been told of yet (each told once: whoever moves the session's cursor tells
what it moved past)."""

from __future__ import annotations

from typing import Any

from agentpost.domain.models import Caller, Notices
from agentpost.store import agents as agent_rows
from agentpost.store import mail
from agentpost.store.database import Connection, Store

Seen = tuple[int, list[Any]]
"""The unread count and the urgent rows past the session's cursor, as one look found them."""


def look(conn: Connection, caller: Caller, now: float) -> Seen:
    if caller.session_id is None:
        return mail.unread_count(conn, caller.agent, now), []
    return mail.notices(conn, caller.agent, caller.session_id, now)


def newest_urgent(caller: Caller, seen: Seen) -> int | None:
    """The cursor to move to, None when nothing is to be told."""
    urgent = seen[1]
    if not urgent or caller.session_id is None:
        return None
    return int(max(r.seq for r in urgent))


def told(seen: Seen, before: int | None, moved: bool) -> Notices:
    """The notices of `seen`, once the cursor was moved (`moved`) from `before` (None: a
    concurrent call moved it past ours, and told the rest)."""
    unread, urgent = seen
    if moved:
        urgent = [] if before is None else [r for r in urgent if r.seq > before]
    return Notices(unread, [mail.message_from_row(r, r.delivery_state) for r in urgent])


def notices_in(conn: Connection, caller: Caller, now: float) -> Notices:
    """The notices, read and told inside the caller's write transaction."""
    seen = look(conn, caller, now)
    newest = newest_urgent(caller, seen)
    if newest is None:
        return told(seen, None, moved=False)
    assert caller.session_id is not None
    before = agent_rows.advance_urgent_cursor(conn, caller.session_id, newest)
    return told(seen, before, moved=True)


async def notices(store: Store, caller: Caller) -> Notices:
    """The notices, read on their own (a look, and a write only when urgent mail is told)."""
    seen = await store.glance(lambda conn: look(conn, caller, store.clock()))
    newest = newest_urgent(caller, seen)
    if newest is None:
        return told(seen, None, moved=False)
    session_id = caller.session_id
    assert session_id is not None
    # Whoever moves the cursor tells what it moved past; a concurrent call that moved it
    # before us told the rest, and one that moved it further leaves us nothing.
    before = await store.write(
        lambda conn: agent_rows.advance_urgent_cursor(conn, session_id, newest)
    )
    return told(seen, before, moved=True)
