"""The remote desk (what `agentpost mcp --url` serves its tools from) against a real service:
it tells a session what a local session would."""

from __future__ import annotations

import pytest

from agentpost.client.desk import URGENT_PREVIEWS, RemoteDesk
from remote_office import Office

pytestmark = pytest.mark.anyio


async def test_urgent_mail_is_told_once_oldest_first_however_much_is_waiting(
    office: Office,
) -> None:
    alice = await office.agent("alice")
    carol = await office.agent("carol")
    desk = await RemoteDesk.open(alice)
    try:
        backlog = [
            (await carol.send("alice", f"alarm {n}", priority="urgent")).id
            for n in range(URGENT_PREVIEWS + 5)
        ]
        first = await desk.notices()
        assert [m.id for m in first.urgent] == backlog[:URGENT_PREVIEWS]
        assert first.unread == len(backlog)
        newest = (await carol.send("alice", "the new one", priority="urgent")).id
        second = await desk.notices()
        assert [m.id for m in second.urgent] == [*backlog[URGENT_PREVIEWS:], newest]
        assert (await desk.notices()).urgent == []  # each told once

        await alice.inbox(limit=3)  # read the three oldest: told mail that is read is let go
        later = (await carol.send("alice", "and another", priority="urgent")).id
        assert [m.id for m in (await desk.notices()).urgent] == [later]
    finally:
        await desk.close()
