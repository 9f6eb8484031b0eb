"""What push reads from the mailbox: the newest arrival, and the mail delivered after a cursor,
read or not, never marked read. On both databases."""

from __future__ import annotations

import pytest

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.models import DeliveryState
from agentpost.services import PostOffice
from backends import FakeClock

pytestmark = pytest.mark.anyio


async def test_push_reads_mail_after_its_cursor_oldest_first_and_marks_nothing(
    office: PostOffice,
) -> None:
    alice, bob, _ = [await office.presence.ensure_agent(n) for n in ("alice", "bob", "carol")]
    assert await office.mailbox.latest_arrival(bob) == 0
    old = await office.mailbox.send(alice, "bob", "before the cursor")
    start = await office.mailbox.latest_arrival(bob)
    assert start > 0

    first = await office.mailbox.send(alice, "bob", "one")
    await office.mailbox.send(bob, "alice", "mail of someone else")
    second = await office.mailbox.send(alice, ["bob", "carol"], "two", priority="urgent")
    await office.mailbox.inbox(bob, limit=1)  # reads `old` only

    found = await office.mailbox.arrived_after(bob, start)
    assert [m.id for m in found] == [first.id, second.id]
    assert [m.state for m in found] == [DeliveryState.QUEUED, DeliveryState.QUEUED]
    assert (await office.mailbox.inbox(bob, peek=True)).unread == 2
    assert await office.mailbox.latest_arrival(bob) == found[-1].seq
    assert await office.mailbox.arrived_after(bob, found[-1].seq) == []
    assert [m.id for m in await office.mailbox.arrived_after(bob, start, limit=1)] == [first.id]
    assert old.id not in [m.id for m in found]


async def test_push_tells_of_mail_a_tool_read_first_but_not_of_expired_mail(
    office: PostOffice, clock: FakeClock
) -> None:
    alice, bob = [await office.presence.ensure_agent(n) for n in ("alice", "bob")]
    read_first = await office.mailbox.send(alice, "bob", "read at once")
    await office.mailbox.inbox(bob)
    await office.mailbox.send(alice, "bob", "gone soon", ttl_s=5)
    clock.advance(10)
    found = await office.mailbox.arrived_after(bob, 0)
    assert [(m.id, m.state) for m in found] == [(read_first.id, DeliveryState.READ)]


async def test_a_limit_out_of_range_is_invalid(office: PostOffice) -> None:
    bob = await office.presence.ensure_agent("bob")
    with pytest.raises(AgentpostError) as caught:
        await office.mailbox.arrived_after(bob, 0, limit=0)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
