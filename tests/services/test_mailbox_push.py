"""What push reads from the mailbox: the newest arrival, and the mail delivered after a cursor,
read or not, never marked read. On both databases."""

from __future__ import annotations

from contextlib import aclosing

import anyio
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
    assert await office.mailbox.newest_seq() == 0
    old = await office.mailbox.send(alice, "bob", "before the cursor")
    start = await office.mailbox.newest_seq()
    assert start > 0

    first = await office.mailbox.send(alice, "bob", "one")
    await office.mailbox.send(bob, "alice", "mail of someone else")
    second = await office.mailbox.send(alice, ["bob", "carol"], "two", priority="urgent")
    await office.mailbox.inbox(bob, limit=1)  # reads `old` only

    found = await office.mailbox.arrived_after(bob, start)
    assert [m.id for m in found] == [first.id, second.id]
    assert [m.state for m in found] == [DeliveryState.QUEUED, DeliveryState.QUEUED]
    assert (await office.mailbox.inbox(bob, peek=True)).unread == 2
    assert await office.mailbox.newest_seq() == found[-1].seq
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


async def test_arrivals_tell_at_once_of_mail_delivered_after_the_cursor_before_listening(
    office: PostOffice,
) -> None:
    """A push that looked up to its cursor, then (after a failure, or before it listened) starts
    waiting, must not sit on mail that landed in between until some later message comes."""
    alice, bob = [await office.presence.ensure_agent(n) for n in ("alice", "bob")]
    await office.mailbox.send(alice, "bob", "already told")
    cursor = await office.mailbox.newest_seq()
    await office.mailbox.send(alice, "bob", "landed between the look and the watch")
    between = await office.mailbox.newest_seq()

    with anyio.fail_after(10):
        async with aclosing(office.mailbox.arrivals(lambda: bob, after=cursor)) as arrivals:
            assert await anext(arrivals) == between
    assert [m.body for m in await office.mailbox.arrived_after(bob, cursor)] == [
        "landed between the look and the watch"
    ]


async def test_arrivals_from_the_newest_cursor_wait_for_the_next_message(
    office: PostOffice,
) -> None:
    alice, bob = [await office.presence.ensure_agent(n) for n in ("alice", "bob")]
    await office.mailbox.send(alice, "bob", "old news")
    cursor = await office.mailbox.newest_seq()
    told: list[int] = []

    async def listen() -> None:
        async with aclosing(office.mailbox.arrivals(lambda: bob, after=cursor)) as arrivals:
            told.append(await anext(arrivals))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(listen)
            await anyio.wait_all_tasks_blocked()
            assert told == []
            await office.mailbox.send(alice, "bob", "new")
    assert told == [await office.mailbox.newest_seq()]
