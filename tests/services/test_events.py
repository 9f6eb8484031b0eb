"""Each agent's event log: what the mailbox's changes write into it, and how it is read.

Sends tell each recipient, reads, acks and expiry tell the sender; a cursor resumes exactly
where a reader left off; `follow` wakes on a commit of any process; old events go by age.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from account_helpers import ADDRESS, keyed
from agentpost.domain.errors import ErrorCode
from agentpost.domain.events import Event
from agentpost.domain.models import Caller
from agentpost.services import PostOffice
from backends import FakeClock, OpenOffice, agents, refused_without_change

pytestmark = pytest.mark.anyio

DAY = 86_400


async def told(office: PostOffice, caller: Caller, after: int = 0) -> list[tuple[Any, ...]]:
    """(type, message id, data) of the caller's events after `after`."""
    return [(e.type, e.message_id, e.data) for e in await office.events.since(caller, after)]


async def test_new_mail_from_an_untrusted_sender_says_so_in_its_event(
    open_office: OpenOffice,
) -> None:
    """A webhook or stream consumer hands what it heard to a model: it learns how far the
    sender is trusted without fetching the message."""
    office = await open_office(open_registration=True)
    bob, _ = await keyed(office, "bob")
    issued = await office.keys.self_register("drifter", ip=ADDRESS)
    drifter = await office.keys.authenticate(issued.key, ip=ADDRESS)
    sent = await office.mailbox.send(drifter, "bob", "hello")
    [(_type, message_id, about)] = await told(office, bob)
    assert (message_id, about["from"], about["trust"]) == (sent.id, "drifter", "untrusted")


async def test_a_send_tells_each_recipient_and_nothing_to_the_sender(office: PostOffice) -> None:
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    sent = await office.mailbox.send(
        alice, ["bob", "carol"], "lunch?", subject="food", priority="urgent"
    )
    about = {
        "from": "alice",
        "subject": "food",
        "thread_id": sent.thread_id,
        "kind": "message",
        "priority": "urgent",
        "trust": "verified",
        "channel": None,
    }
    assert await told(office, bob) == [("message.created", sent.id, about)]
    assert await told(office, carol) == [("message.created", sent.id, about)]
    assert await told(office, alice) == []


async def test_a_broadcast_tells_each_member_but_its_sender(office: PostOffice) -> None:
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    sent = await office.mailbox.send(alice, "#general", "standup in 5")
    for member in (bob, carol):
        ((kind, mid, data),) = await told(office, member)
        assert (kind, mid, data["channel"]) == ("message.created", sent.id, "#general")
    assert await told(office, alice) == []


async def test_reading_tells_the_sender_who_read_and_peeking_does_not(
    office: PostOffice,
) -> None:
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    sent = await office.mailbox.send(alice, ["bob", "carol"], "read me")
    await office.mailbox.inbox(carol, peek=True)
    assert await told(office, alice) == []
    await office.mailbox.inbox(bob)
    await office.mailbox.inbox(bob)  # nothing new to read: nothing new to tell
    assert await told(office, alice) == [("message.read", sent.id, {"to": "bob"})]


async def test_an_ack_tells_the_sender_once(office: PostOffice) -> None:
    alice, bob = await agents(office, "alice", "bob")
    sent = await office.mailbox.send(alice, "bob", "handle me")
    await office.mailbox.ack(bob, [sent.id])
    await office.mailbox.ack(bob, [sent.id])
    assert await told(office, alice) == [("message.acked", sent.id, {"to": "bob"})]


async def test_reading_then_acking_tells_the_sender_both_in_order(office: PostOffice) -> None:
    alice, bob = await agents(office, "alice", "bob")
    sent = await office.mailbox.send(alice, "bob", "step by step")
    await office.mailbox.inbox(bob)
    await office.mailbox.ack(bob, [sent.id])
    assert [kind for kind, _, _ in await told(office, alice)] == ["message.read", "message.acked"]


async def test_mail_left_unread_past_its_ttl_tells_the_sender_it_expired(
    office: PostOffice, clock: FakeClock
) -> None:
    alice, _bob = await agents(office, "alice", "bob")
    sent = await office.mailbox.send(alice, "bob", "lunch in 10?", ttl_s=10)
    clock.advance(10)
    await office.mailbox.sweep()
    await office.mailbox.sweep()
    assert await told(office, alice) == [("message.expired", sent.id, {"to": "bob"})]
    (expired,) = await office.events.since(alice, 0)
    assert expired.at == clock()


async def test_a_recipient_who_blocks_the_sender_is_told_expired_as_one_who_never_reads(
    office: PostOffice, clock: FakeClock
) -> None:
    alice, _bob, carol = await agents(office, "alice", "bob", "carol")
    await office.directory.block(carol, "alice")
    sent = await office.mailbox.send(alice, ["bob", "carol"], "lunch in 10?", ttl_s=10)
    clock.advance(9)
    assert await office.mailbox.expire_due() == clock.now + 1  # both fall due then
    assert await told(office, alice) == []
    clock.advance(1)
    assert await office.mailbox.expire_due() is None
    assert sorted(await told(office, alice), key=str) == [
        ("message.expired", sent.id, {"to": "bob"}),
        ("message.expired", sent.id, {"to": "carol"}),
    ]
    (receipts,) = [m.receipts for m in await office.history.sent(alice)]
    assert [(r.to, r.state.value) for r in receipts] == [("bob", "expired"), ("carol", "expired")]
    assert (await office.mailbox.inbox(carol, unread_only=False)).messages == []  # withheld
    await office.mailbox.sweep()  # nothing told twice
    assert len(await told(office, alice)) == 2


async def test_a_member_who_blocks_a_broadcasts_sender_shows_as_one_who_never_reads(
    office: PostOffice, clock: FakeClock
) -> None:
    """In the broadcast's receipts, and in the sender's events when its TTL falls due."""
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    await office.directory.block(carol, "alice")
    sent = await office.mailbox.send(alice, "#general", "standup in 10", ttl_s=10)
    await office.mailbox.inbox(bob)
    (receipts,) = [m.receipts for m in await office.history.sent(alice)]
    assert [(r.to, r.state.value) for r in receipts] == [("bob", "read"), ("carol", "queued")]

    clock.advance(10)
    assert await office.mailbox.expire_due() is None
    assert await told(office, alice) == [
        ("message.read", sent.id, {"to": "bob"}),
        ("message.expired", sent.id, {"to": "carol"}),
    ]
    (receipts,) = [m.receipts for m in await office.history.sent(alice)]
    assert [(r.to, r.state.value) for r in receipts] == [("bob", "read"), ("carol", "expired")]
    assert (await office.mailbox.inbox(carol, unread_only=False)).messages == []


async def test_mail_withheld_by_a_block_goes_with_its_message_once_its_ttl_has_passed(
    office: PostOffice, clock: FakeClock
) -> None:
    """Past the retention it stays while the blocker's receipt reads unread, as mail someone
    never reads does; once the TTL has passed it is told as expired, and goes."""
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    await office.directory.block(carol, "alice")
    sent = await office.mailbox.send(alice, ["bob", "carol"], "keep a while", ttl_s=40 * 86_400)
    broadcast = await office.mailbox.send(alice, "#general", "and this", ttl_s=40 * 86_400)
    await office.mailbox.ack(bob, [sent.id, broadcast.id])
    clock.advance(31 * 86_400)  # past the retention, before the TTL
    assert await office.mailbox.sweep() == 0
    clock.advance(10 * 86_400)  # past the TTL
    assert await office.mailbox.sweep() == 2
    assert await office.mailbox.expire_due() is None  # nothing left to tell
    assert await told(office, alice) == [
        ("message.expired", sent.id, {"to": "carol"}),
        ("message.expired", broadcast.id, {"to": "carol"}),
    ]


async def test_an_event_cursor_resumes_with_nothing_missed(office: PostOffice) -> None:
    alice, bob = await agents(office, "alice", "bob")
    ids = [(await office.mailbox.send(alice, "bob", f"#{i}")).id for i in range(5)]
    first = await office.events.since(bob, 0, limit=2)
    assert [e.message_id for e in first] == ids[:2]
    ids.append((await office.mailbox.send(alice, "bob", "while away")).id)
    rest = await office.events.since(bob, first[-1].seq)
    assert [e.message_id for e in rest] == ids[2:]
    assert await office.events.since(bob, rest[-1].seq) == []
    assert await office.events.newest(bob) == rest[-1].seq


async def test_newest_is_where_a_reader_starts_to_hear_only_what_comes_next(
    office: PostOffice,
) -> None:
    alice, bob = await agents(office, "alice", "bob")
    assert await office.events.newest(bob) == 0
    await office.mailbox.send(alice, "bob", "old news")
    start = await office.events.newest(bob)
    later = await office.mailbox.send(alice, "bob", "news")
    assert [e.message_id for e in await office.events.since(bob, start)] == [later.id]


async def test_a_stream_starts_after_its_cursor_and_one_past_every_event_at_the_newest(
    office: PostOffice,
) -> None:
    alice, bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "to bob")
    await office.mailbox.send(bob, "alice", "to alice")  # the newest event is alice's
    newest = (await office.events.since(alice, 0))[-1].seq
    assert await office.events.start(bob, None) == await office.events.newest(bob)
    assert await office.events.start(bob, 1) == 1
    assert await office.events.start(bob, newest + 1) == newest
    assert await office.events.start(bob, 2**63 - 1) == newest


async def test_follow_wakes_on_a_send_from_another_office(open_office: OpenOffice) -> None:
    listening = await open_office()
    other = await open_office()  # another process on the same database
    alice, bob = await agents(other, "alice", "bob")
    await other.mailbox.send(alice, "bob", "before")
    start = await listening.events.newest(bob)
    heard: list[Event] = []

    async def follow() -> None:
        async for event in listening.events.follow(bob, start):
            heard.append(event)
            return

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            await anyio.sleep(0.1)  # the follower is waiting on the change signal
            sent = await other.mailbox.send(alice, "bob", "from elsewhere")
    assert [(e.type, e.message_id) for e in heard] == [("message.created", sent.id)]


async def test_follow_starts_with_what_came_after_the_cursor(office: PostOffice) -> None:
    alice, bob = await agents(office, "alice", "bob")
    missed = [(await office.mailbox.send(alice, "bob", str(i))).id for i in range(3)]
    heard: list[str | None] = []
    with anyio.fail_after(10):
        async for event in office.events.follow(bob, 0):
            heard.append(event.message_id)
            if len(heard) == 3:
                break
    assert heard == missed


async def test_touched_groups_new_events_by_agent(office: PostOffice) -> None:
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    start = await office.events.newest_overall()
    await office.mailbox.send(alice, ["bob", "carol"], "both")
    sent = await office.mailbox.send(alice, "bob", "bob only")
    await office.mailbox.ack(bob, [sent.id])
    found, seen = await office.events.touched(start)
    newest = {c.agent: (await office.events.since(c, start))[-1].seq for c in (alice, bob, carol)}
    assert found == newest
    assert seen == max(newest.values())
    assert await office.events.touched(seen) == ({}, seen)


async def test_touches_names_the_agents_whose_events_grow_from_its_start(
    office: PostOffice,
) -> None:
    alice, _bob, _carol = await agents(office, "alice", "bob", "carol")
    await office.mailbox.send(alice, "carol", "before the start: never named")
    send, receive = anyio.create_memory_object_stream[frozenset[str]]()

    async def listen() -> None:
        async for touched in office.events.touches():
            await send.send(touched)

    async with send, receive, anyio.create_task_group() as tg:
        tg.start_soon(listen)
        await anyio.wait_all_tasks_blocked()  # started: waiting for news
        await office.mailbox.send(alice, "bob", "news")
        with anyio.fail_after(10):
            touched = await receive.receive()
        tg.cancel_scope.cancel()
    assert touched == {"bob"}


async def test_touches_names_the_agents_of_another_offices_commit(
    open_office: OpenOffice,
) -> None:
    """Another process's commit says nothing of whom it concerned: the log is read for it."""
    listening = await open_office()
    other = await open_office()  # another process on the same database
    alice, _bob, _carol = await agents(other, "alice", "bob", "carol")
    send, receive = anyio.create_memory_object_stream[frozenset[str]]()

    async def listen() -> None:
        async for touched in listening.events.touches():
            await send.send(touched)

    async with send, receive, anyio.create_task_group() as tg:
        tg.start_soon(listen)
        await anyio.sleep(0.1)  # started: waiting on the change signal
        await other.mailbox.send(alice, ["bob", "carol"], "from elsewhere")
        heard: set[str] = set()
        with anyio.fail_after(10):
            while heard != {"bob", "carol"}:
                heard |= await receive.receive()
        tg.cancel_scope.cancel()


async def test_touches_hears_another_offices_news_while_local_news_keeps_coming(
    open_office: OpenOffice,
) -> None:
    """Another process's news must reach the listener while local news keeps coming: heard of
    (SQLite's change signal, PostgreSQL's NOTIFY), or, where it goes unheard (PostgreSQL while
    its listening connection is lost), read from the log although no wait runs to its poll."""
    listening = await open_office()
    other = await open_office()  # another process (replica) on the same database
    alice, _bob, carol, _dave = await agents(listening, "alice", "bob", "carol", "dave")
    bob_named = anyio.Event()

    async def listen() -> None:
        async for touched in listening.events.touches():
            if "bob" in touched:
                bob_named.set()

    async def chatter() -> None:
        while True:
            await listening.mailbox.send(carol, "dave", "noise")
            await anyio.sleep(0.2)

    async with anyio.create_task_group() as tg:
        tg.start_soon(listen)
        await anyio.sleep(0.1)
        tg.start_soon(chatter)
        await other.mailbox.send(alice, "bob", "from elsewhere")
        with anyio.fail_after(10):
            await bob_named.wait()
        tg.cancel_scope.cancel()


async def test_touches_names_an_agent_once_per_message_across_its_catch_up(
    office: PostOffice,
) -> None:
    alice, _bob, _carol = await agents(office, "alice", "bob", "carol")
    heard: list[frozenset[str]] = []

    async def listen() -> None:
        async for touched in office.events.touches():
            heard.append(touched)

    async with anyio.create_task_group() as tg:
        tg.start_soon(listen)
        await anyio.wait_all_tasks_blocked()
        await office.mailbox.send(alice, "bob", "one")
        await anyio.sleep(1.2)  # past CATCH_UP_S: the next news looks how far behind it is
        await office.mailbox.send(alice, "carol", "two")
        await anyio.sleep(0.3)
        tg.cancel_scope.cancel()
    assert heard == [{"bob"}, {"carol"}]


@pytest.mark.parametrize("after", [-1, 1.5, "7", True, None])
async def test_a_cursor_that_is_no_event_seq_is_refused(office: PostOffice, after: Any) -> None:
    (bob,) = await agents(office, "bob")
    await refused_without_change(
        office, ErrorCode.INVALID_ARGUMENT, office.events.since(bob, after)
    )
    await refused_without_change(office, ErrorCode.INVALID_ARGUMENT, office.events.touched(after))


async def test_events_older_than_retention_go_in_the_sweep(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    office = await open_office(retention_days=2)
    alice, bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "old")
    await office.mailbox.send(alice, "bob", "old and unread: the mail stays, not its event")
    clock.advance(2 * DAY)
    fresh = await office.mailbox.send(alice, "bob", "fresh")
    await office.mailbox.sweep()
    assert len(await office.events.since(bob, 0)) == 3  # exactly two days: still kept
    clock.advance(1)
    await office.mailbox.sweep()
    assert [e.message_id for e in await office.events.since(bob, 0)] == [fresh.id]
    assert len((await office.mailbox.inbox(bob, peek=True)).messages) == 3
