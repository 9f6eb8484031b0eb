"""The post office opens the store its settings name and every service over it."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from agentpost.config import Settings
from agentpost.services import PostOffice
from backends import FakeClock

pytestmark = pytest.mark.anyio


async def test_by_default_the_post_office_is_a_private_file_in_the_home_folder(
    isolated_home: Path,
) -> None:
    office = await PostOffice.open(Settings())
    try:
        alice = await office.presence.ensure_agent("alice")
        await office.mailbox.send(alice, "alice", "note to self")
    finally:
        await office.aclose()
    database = anyio.Path(isolated_home / "agentpost.db")
    assert (await database.stat()).st_mode & 0o777 == 0o600
    assert (await database.parent.stat()).st_mode & 0o777 == 0o700
    reopened = await PostOffice.open(Settings())
    try:
        inbox = await reopened.mailbox.inbox(alice)
        assert [m.body for m in inbox.messages] == ["note to self"]
    finally:
        await reopened.aclose()


async def test_every_service_shares_the_store_and_its_clock(
    office: PostOffice, clock: FakeClock
) -> None:
    assert office.mailbox.store is office.presence.store is office.channels.store is office.store
    alice = await office.presence.ensure_agent("alice")
    sent = await office.mailbox.send(alice, "alice", "stamped")
    assert (await office.mailbox.get(alice, sent.id)).created_at == clock.now
