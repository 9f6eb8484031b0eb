"""The post office opens the store its settings name and every service over it."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from agentpost.config import Settings
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.services import PostOffice, post_office
from agentpost.store.migrate import SCHEMA_HEAD
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


async def test_a_post_office_whose_database_answers_is_ready(
    office: PostOffice, backend: str
) -> None:
    ready = await office.readiness()
    assert ready.database == ("sqlite" if backend == "sqlite" else "postgresql")
    assert ready.schema == SCHEMA_HEAD
    assert ready.hears_other_processes


async def test_a_database_slower_than_the_readiness_bound_is_unavailable(
    office: PostOffice, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frozen database (a paused VM, a network that drops packets) would hold a load
    balancer's check until its own timeout: the answer comes within the bound instead."""

    async def frozen() -> str | None:
        await anyio.sleep_forever()
        return None

    monkeypatch.setattr(post_office, "READY_WITHIN_S", 0.05)
    monkeypatch.setattr(office.store, "schema_revision", frozen)
    with anyio.fail_after(5), pytest.raises(AgentpostError) as refused:
        await office.readiness()
    assert refused.value.code is ErrorCode.UNAVAILABLE
    assert "did not answer within 0.05 s" in refused.value.message
