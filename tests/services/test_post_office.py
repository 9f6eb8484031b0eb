"""The post office opens the store its settings name and every service over it."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from agentpost.config import Settings
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.models import Caller
from agentpost.services import PostOffice, post_office
from agentpost.store.migrate import SCHEMA_HEAD
from backends import FakeClock, refused_without_change, session_caller

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
    assert (await office.history.get(alice, sent.id)).created_at == clock.now


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


async def test_an_id_holding_a_nul_character_is_unknown_alike_on_both_databases(
    office: PostOffice,
) -> None:
    """No id holds a NUL character. SQLite found nothing by one; PostgreSQL refused the
    lookup (`invalid_argument`), so the same call answered 404 on one and 400 on the other,
    and an ack of such an id 200 or 400. Both find nothing now."""
    alice = await session_caller(office, "alice")
    owner = Caller("owner", admin=True)
    odd = "m_\x00"
    lookups = [
        lambda: office.history.get(alice, odd),
        lambda: office.mailbox.send(alice, "alice", "re", reply_to=odd),
        lambda: office.channels.history(alice, "#general", before=odd),
        lambda: office.tasks.task(alice, odd),
        lambda: office.requests.check_request(alice, odd),
        lambda: office.webhooks.delete(alice, odd),
        lambda: office.keys.revoke(owner, odd),
        lambda: office.presence.heartbeat_of(alice, odd),
    ]
    for lookup in lookups:
        await refused_without_change(office, ErrorCode.NOT_FOUND, lookup())
    acked = await office.mailbox.ack(alice, [odd])
    assert (acked.acked, acked.not_found) == ([], [odd])
    assert await office.admin.audit_log(owner, actor="a\x00") == []
