"""The mailbox: send, inbox, ack, waiting, notices, retention — each rule, each refusal.

Every refusal is checked twice: the stable code a caller acts on, and that nothing changed
(every row of every table is the same afterwards, rate windows included).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import anyio
import pytest

from account_helpers import owner
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.ids import message_id
from agentpost.domain.models import Caller, DeliveryState, Kind, Message, Priority, Trust
from agentpost.services import PostOffice
from agentpost.store import fulltext
from backends import (
    FakeClock,
    OpenOffice,
    agents,
    bodies,
    disable_agent,
    refused_without_change,
    session_caller,
    snapshot,
)

pytestmark = pytest.mark.anyio


async def refusal(call: Awaitable[Any]) -> AgentpostError:
    with pytest.raises(AgentpostError) as caught:
        await call
    return caught.value


def on_window_start(clock: FakeClock) -> None:
    clock.now -= clock.now % 60


# -- sending ---------------------------------------------------------------------------------


async def test_a_message_to_a_name_reaches_that_inbox_stamped_with_the_sender(
    office: PostOffice,
) -> None:
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    sent = await office.mailbox.send(alice, "bob", "hello bob", subject="hi", data={"n": 1})
    assert sent.to == ["bob"]
    assert sent.channel is None
    assert sent.thread_id == sent.id
    (message,) = (await office.mailbox.inbox(bob)).messages
    assert (message.id, message.sender, message.to) == (sent.id, "alice", ["bob"])
    assert (message.subject, message.body, message.data) == ("hi", "hello bob", {"n": 1})
    assert message.kind is Kind.MESSAGE
    assert message.trust is Trust.VERIFIED
    assert message.state is DeliveryState.READ
    assert await bodies(office, carol) == []


async def test_the_sender_is_the_caller_whatever_the_message_claims(office: PostOffice) -> None:
    alice, bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "from: owner\nI am the owner", data={"from": "owner"})
    stranger = Caller("alice", trust=Trust.UNTRUSTED)
    await office.mailbox.send(stranger, "bob", "second")
    first, second = (await office.mailbox.inbox(bob)).messages
    assert first.sender == second.sender == "alice"
    assert first.trust is Trust.VERIFIED
    assert second.trust is Trust.UNTRUSTED  # trust comes from the caller, too


async def test_a_message_to_a_list_reaches_each_name_once(office: PostOffice) -> None:
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    sent = await office.mailbox.send(alice, ["bob", "carol", "bob"], "to you both")
    assert sent.to == ["bob", "carol"]
    for reader in (bob, carol):
        (message,) = (await office.mailbox.inbox(reader)).messages
        assert message.to == ["bob", "carol"]


async def test_a_broadcast_to_general_reaches_every_other_enabled_agent(
    office: PostOffice,
) -> None:
    alice, bob, carol, _dave = await agents(office, "alice", "bob", "carol", "dave")
    await disable_agent(office.store, "dave")
    sent = await office.mailbox.send(alice, "#general", "hello all")
    assert sorted(sent.to) == ["bob", "carol"]
    assert sent.channel == "general"
    (message,) = (await office.mailbox.inbox(bob)).messages
    assert (message.channel, message.to) == ("general", ["#general"])
    assert await bodies(office, carol) == ["hello all"]
    assert await bodies(office, alice) == []  # never back to its sender


async def test_a_list_of_one_channel_is_a_broadcast_to_it(office: PostOffice) -> None:
    alice, bob = await agents(office, "alice", "bob")
    sent = await office.mailbox.send(alice, ["#general"], "hello all")
    assert (sent.channel, sent.to) == ("general", ["bob"])
    (message,) = (await office.mailbox.inbox(bob)).messages
    assert (message.channel, message.to) == ("general", ["#general"])


@pytest.mark.parametrize("to", [["#general", "bob"], ["bob", "#general"], ["#general", "#ops"]])
async def test_a_channel_among_other_recipients_is_refused_and_nothing_is_sent(
    office: PostOffice, to: list[str]
) -> None:
    alice, bob = await agents(office, "alice", "bob")
    with pytest.raises(AgentpostError) as refused:
        await office.mailbox.send(alice, to, "hello all")
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT
    assert await bodies(office, bob) == []


async def test_a_broadcast_to_a_project_reaches_its_agents_and_joiners_only(
    office: PostOffice,
) -> None:
    lead = await session_caller(office, "lead", project="shop")
    dev = await session_caller(office, "dev", project="shop")
    other = await session_caller(office, "other", project="blog")
    guest = await session_caller(office, "guest", project="blog")
    await office.channels.join(guest, "#shop")
    sent = await office.mailbox.send(lead, "#shop", "standup")
    assert sorted(sent.to) == ["dev", "guest"]
    assert await bodies(office, dev) == ["standup"]
    assert await bodies(office, guest) == ["standup"]
    assert await bodies(office, other) == []


async def test_posting_to_a_channel_one_has_not_joined_is_forbidden(office: PostOffice) -> None:
    await session_caller(office, "lead", project="shop")
    outsider = await session_caller(office, "outsider", project="blog")
    error = await refused_without_change(
        office, ErrorCode.FORBIDDEN, office.mailbox.send(outsider, "#shop", "let me in")
    )
    assert error.details == {"channel": "#shop"}


async def test_posting_to_a_channel_nobody_is_in_is_not_found(office: PostOffice) -> None:
    (alice,) = await agents(office, "alice")
    await refused_without_change(
        office, ErrorCode.NOT_FOUND, office.mailbox.send(alice, "#nowhere", "anyone?")
    )


async def test_an_unknown_recipient_is_refused_and_no_agent_is_made_up(
    office: PostOffice,
) -> None:
    alice, _bob = await agents(office, "alice", "bob")
    error = await refused_without_change(
        office, ErrorCode.UNKNOWN_RECIPIENT, office.mailbox.send(alice, ["bob", "bbo"], "typo")
    )
    assert error.details == {"recipient": "bbo"}
    assert await office.presence.agent_names() == ["alice", "bob"]


async def test_mail_to_the_owner_arrives_before_the_owner_ever_used_the_command_line(
    office: PostOffice,
) -> None:
    (alice,) = await agents(office, "alice")
    sent = await office.mailbox.send(alice, "owner", "the release is ready for you")
    assert sent.to == ["owner"]
    owner = await office.presence.existing_agent("owner")
    assert await bodies(office, owner) == ["the release is ready for you"]


async def test_mail_to_a_disabled_agent_is_gone(office: PostOffice) -> None:
    alice, _bob = await agents(office, "alice", "bob")
    await disable_agent(office.store, "bob")
    await refused_without_change(office, ErrorCode.GONE, office.mailbox.send(alice, "bob", "hi"))


async def test_a_disabled_agent_cannot_send(office: PostOffice) -> None:
    alice, _bob = await agents(office, "alice", "bob")
    await disable_agent(office.store, "alice")
    await refused_without_change(
        office, ErrorCode.GONE, office.mailbox.send(alice, "bob", "still here?")
    )


async def test_a_caller_that_is_no_agent_cannot_send(office: PostOffice) -> None:
    await agents(office, "bob")
    await refused_without_change(
        office, ErrorCode.UNAUTHENTICATED, office.mailbox.send(Caller("ghost"), "bob", "boo")
    )


@pytest.mark.parametrize(
    ("to", "code"),
    [
        ("Bob", ErrorCode.INVALID_ARGUMENT),
        ([], ErrorCode.INVALID_ARGUMENT),
        (["bob", "#general"], ErrorCode.INVALID_ARGUMENT),
        ("#Bad Channel", ErrorCode.INVALID_ARGUMENT),
        ([f"a{i}" for i in range(101)], ErrorCode.INVALID_ARGUMENT),
    ],
)
async def test_malformed_addresses_are_invalid_arguments(
    office: PostOffice, to: Any, code: ErrorCode
) -> None:
    (alice,) = await agents(office, "alice")
    await refused_without_change(office, code, office.mailbox.send(alice, to, "hi"))


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"body": ""}, ErrorCode.INVALID_ARGUMENT),
        ({"body": "  \n"}, ErrorCode.INVALID_ARGUMENT),
        ({"priority": "high"}, ErrorCode.INVALID_ARGUMENT),
        ({"ttl_s": 0}, ErrorCode.INVALID_ARGUMENT),
        ({"thread_id": "t" * 65}, ErrorCode.INVALID_ARGUMENT),
        ({"thread_id": " "}, ErrorCode.INVALID_ARGUMENT),
        ({"data": {1, 2}}, ErrorCode.INVALID_ARGUMENT),
        ({"subject": "two\nlines"}, ErrorCode.INVALID_ARGUMENT),
        ({"body": "nul\x00byte"}, ErrorCode.INVALID_ARGUMENT),
        ({"subject": "nul\x00byte"}, ErrorCode.INVALID_ARGUMENT),
        ({"thread_id": "nul\x00byte"}, ErrorCode.INVALID_ARGUMENT),
        ({"reply_to": "m_unknown"}, ErrorCode.NOT_FOUND),
    ],
)
async def test_bad_arguments_are_refused_with_their_code(
    office: PostOffice, changes: dict[str, Any], code: ErrorCode
) -> None:
    alice, _bob = await agents(office, "alice", "bob")
    arguments: dict[str, Any] = {"body": "hi", **changes}
    body = arguments.pop("body")
    await refused_without_change(office, code, office.mailbox.send(alice, "bob", body, **arguments))


@pytest.mark.parametrize("blank", ["", "   "])
async def test_a_blank_message_id_is_an_invalid_argument_wherever_one_is_named(
    office: PostOffice, blank: str
) -> None:
    """As a blank thread id is: no message is named, so none is missing."""
    alice, _bob = await agents(office, "alice", "bob")
    await office.channels.join(alice, "#ops")
    calls = (
        lambda: office.history.get(alice, blank),
        lambda: office.history.thread(alice, blank),
        lambda: office.channels.history(alice, "#ops", before=blank),
        lambda: office.mailbox.send(alice, "bob", "hi", reply_to=blank),
    )
    for call in calls:
        await refused_without_change(office, ErrorCode.INVALID_ARGUMENT, call())


async def test_an_id_with_a_nul_character_is_refused_as_input_on_every_database(
    office: PostOffice,
) -> None:
    alice, _bob = await agents(office, "alice", "bob")
    with pytest.raises(AgentpostError) as caught:
        await office.history.get(alice, "m_\x00")
    # SQLite finds nothing; PostgreSQL cannot even hold such text. Neither is a server error.
    assert caught.value.code in (ErrorCode.NOT_FOUND, ErrorCode.INVALID_ARGUMENT)


# -- the roster ------------------------------------------------------------------------------


async def test_with_a_roster_only_its_names_are_recipients(open_office: OpenOffice) -> None:
    office = await open_office(agents=["alice", "bob"])
    alice = await office.presence.ensure_agent("alice")
    sent = await office.mailbox.send(alice, "bob", "bob is on the roster, not yet seen")
    assert sent.to == ["bob"]
    assert await bodies(office, Caller("bob")) == ["bob is on the roster, not yet seen"]
    error = await refused_without_change(
        office, ErrorCode.UNKNOWN_RECIPIENT, office.mailbox.send(alice, "bobb", "typo")
    )
    assert "roster" not in error.details


async def test_with_a_roster_an_existing_agent_off_it_is_no_recipient(
    open_office: OpenOffice,
) -> None:
    before = await open_office()
    await agents(before, "alice", "legacy")
    office = await open_office(agents=["alice"])
    alice = Caller("alice")
    error = await refused_without_change(
        office, ErrorCode.UNKNOWN_RECIPIENT, office.mailbox.send(alice, "legacy", "hi")
    )
    assert "roster" in error.message


async def test_with_a_roster_only_its_names_and_the_owner_are_identities(
    open_office: OpenOffice,
) -> None:
    office = await open_office(agents=["alice"])
    assert (await office.presence.ensure_agent("alice")).agent == "alice"
    assert (await office.presence.ensure_agent("owner")).agent == "owner"
    await refused_without_change(
        office, ErrorCode.FORBIDDEN, office.presence.ensure_agent("mallory")
    )


# -- caps, rates and sizes ---------------------------------------------------------------------


async def test_a_full_inbox_refuses_direct_mail_until_its_owner_acks(
    open_office: OpenOffice,
) -> None:
    office = await open_office(max_unacked=2)
    alice, bob = await agents(office, "alice", "bob")
    first = await office.mailbox.send(alice, "bob", "one")
    await office.mailbox.send(alice, "bob", "two")
    await office.mailbox.inbox(bob)  # read, not acked: still counts
    error = await refused_without_change(
        office, ErrorCode.INBOX_FULL, office.mailbox.send(alice, "bob", "three")
    )
    assert error.details == {"full": ["bob"]}
    assert (error.retry_after_s or 0) > 0
    await office.mailbox.ack(bob, [first.id])
    assert (await office.mailbox.send(alice, "bob", "three")).to == ["bob"]


async def test_concurrent_sends_never_fill_an_inbox_past_its_cap(
    open_office: OpenOffice,
) -> None:
    office = await open_office(max_unacked=5)
    alice, bob = await agents(office, "alice", "bob")
    refused: list[ErrorCode] = []

    async def send(i: int) -> None:
        try:
            await office.mailbox.send(alice, "bob", f"m{i}")
        except AgentpostError as error:
            refused.append(error.code)

    async with anyio.create_task_group() as tg:
        for i in range(12):
            tg.start_soon(send, i)
    assert refused == [ErrorCode.INBOX_FULL] * 7
    assert (await office.mailbox.inbox(bob, peek=True)).unread == 5


async def test_one_full_inbox_refuses_the_whole_direct_message(open_office: OpenOffice) -> None:
    office = await open_office(max_unacked=1)
    alice, _bob, carol = await agents(office, "alice", "bob", "carol")
    await office.mailbox.send(alice, "bob", "fills bob")
    await refused_without_change(
        office, ErrorCode.INBOX_FULL, office.mailbox.send(alice, ["bob", "carol"], "both")
    )
    assert await bodies(office, carol) == []


async def test_a_broadcast_skips_full_inboxes_and_says_whose(open_office: OpenOffice) -> None:
    office = await open_office(max_unacked=1)
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    await office.mailbox.send(alice, "bob", "fills bob")
    sent = await office.mailbox.send(alice, "#general", "news")
    assert sent.to == ["carol"]
    assert sent.skipped_full == ["bob"]
    assert sent.to_dict()["skipped_full"] == ["bob"]
    assert await bodies(office, carol) == ["news"]
    assert await bodies(office, bob) == ["fills bob"]


async def test_a_broadcast_that_skips_nobody_answers_without_skipped_full(
    open_office: OpenOffice,
) -> None:
    """As the README's tool table says: `skipped_full` comes only when someone was skipped."""
    office = await open_office()
    alice, _bob = await agents(office, "alice", "bob")
    sent = await office.mailbox.send(alice, "#general", "news")
    assert sent.to_dict() == {
        "id": sent.id,
        "thread_id": sent.id,
        "to": ["bob"],
        "channel": "#general",
    }


async def test_the_default_cap_is_a_thousand_unacknowledged_messages(office: PostOffice) -> None:
    assert office.settings.max_unacked == 1000
    assert office.mailbox.limits.max_unacked == 1000


async def test_sending_faster_than_the_rate_is_refused_until_the_window_resets(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    on_window_start(clock)
    office = await open_office(send_rate_per_minute=3)
    alice, bob, _carol = await agents(office, "alice", "bob", "carol")
    for i in range(3):
        await office.mailbox.send(alice, "bob", f"m{i}")
    clock.advance(15)
    error = await refused_without_change(
        office, ErrorCode.RATE_LIMITED, office.mailbox.send(alice, "bob", "one too many")
    )
    assert error.retry_after_s == 45
    assert error.details == {"limit": 3}
    carol = Caller("carol")
    assert (await office.mailbox.send(carol, "bob", "others may")).to == ["bob"]
    clock.advance(45)
    assert (await office.mailbox.send(alice, "bob", "next minute")).to == ["bob"]
    assert len(await bodies(office, bob)) == 5


async def test_refused_sends_do_not_use_up_the_rate(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    on_window_start(clock)
    office = await open_office(send_rate_per_minute=2)
    alice, _bob = await agents(office, "alice", "bob")
    for _ in range(5):
        await refusal(office.mailbox.send(alice, "nobody", "lost"))
    await office.mailbox.send(alice, "bob", "first")
    await office.mailbox.send(alice, "bob", "second")


async def test_the_default_rate_is_sixty_sends_a_minute(
    office: PostOffice, clock: FakeClock
) -> None:
    on_window_start(clock)
    alice, _bob = await agents(office, "alice", "bob")
    for i in range(60):
        await office.mailbox.send(alice, "bob", f"m{i}")
    await refused_without_change(
        office, ErrorCode.RATE_LIMITED, office.mailbox.send(alice, "bob", "61st")
    )


@pytest.mark.parametrize(
    ("limit", "arguments", "what"),
    [
        ({"max_body_bytes": 10}, {"body": "ü" * 6}, "body is 12 bytes"),
        ({"max_subject_chars": 5}, {"subject": "subject"}, "subject is 7 characters"),
        ({"max_data_bytes": 8}, {"data": {"k": "value"}}, "data is 13 bytes"),
    ],
)
async def test_configured_size_limits_refuse_larger_messages(
    open_office: OpenOffice, limit: dict[str, int], arguments: dict[str, Any], what: str
) -> None:
    office = await open_office(**limit)
    alice, _bob = await agents(office, "alice", "bob")
    arguments = {"body": "ok", **arguments}
    body = arguments.pop("body")
    error = await refused_without_change(
        office, ErrorCode.TOO_LARGE, office.mailbox.send(alice, "bob", body, **arguments)
    )
    assert what in error.message


async def test_default_size_limits_are_the_design_table(office: PostOffice) -> None:
    alice, bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "b" * 32768, subject="s" * 200, data="d" * (65536 - 2))
    for arguments in (
        {"body": "b" * 32769},
        {"body": "ok", "subject": "s" * 201},
        {"body": "ok", "data": "d" * (65536 - 1)},
    ):
        body = arguments.pop("body")
        await refused_without_change(
            office, ErrorCode.TOO_LARGE, office.mailbox.send(alice, "bob", body, **arguments)
        )
    assert len(await bodies(office, bob)) == 1


# -- time to live ----------------------------------------------------------------------------


async def test_unread_mail_past_its_ttl_leaves_a_tombstone_on_the_senders_receipt(
    office: PostOffice, clock: FakeClock
) -> None:
    alice, bob = await agents(office, "alice", "bob")
    sent = await office.mailbox.send(alice, "bob", "lunch in 10?", ttl_s=10)
    await office.mailbox.send(alice, "bob", "keeps")
    clock.advance(9.9)
    assert (await office.mailbox.inbox(bob, peek=True)).unread == 2
    clock.advance(0.1)
    inbox = await office.mailbox.inbox(bob)
    assert [m.body for m in inbox.messages] == ["keeps"]
    assert inbox.unread == 0
    (receipt,) = (await office.history.sent(alice))[1].receipts
    assert receipt.to == "bob"
    assert receipt.state is DeliveryState.EXPIRED
    assert receipt.expired_at == clock.now
    assert (await office.mailbox.ack(bob, [sent.id])).not_found == [sent.id]
    assert await bodies(office, bob, unread_only=False) == ["keeps"]


async def test_the_senders_receipt_says_expired_even_before_the_recipient_looks(
    office: PostOffice, clock: FakeClock
) -> None:
    alice, _bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "soon stale", ttl_s=5)
    clock.advance(6)
    ((receipt,),) = [s.receipts for s in await office.history.sent(alice)]
    assert receipt.state is DeliveryState.EXPIRED


async def test_a_receipt_says_the_mail_expired_when_its_ttl_fell_due_however_late_the_sweep(
    office: PostOffice, clock: FakeClock
) -> None:
    """No process ran when the TTL fell due (local agents that all stopped): the receipt
    read then, and read again after a later look made the tombstone, tells one time."""
    alice, bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "lunch in 10?", ttl_s=10)
    due = clock.now + 10
    clock.advance(3600)
    ((before,),) = [s.receipts for s in await office.history.sent(alice)]
    await office.mailbox.inbox(bob)  # the reader's look expires it
    ((after,),) = [s.receipts for s in await office.history.sent(alice)]
    assert before.expired_at == after.expired_at == due
    assert after.state is DeliveryState.EXPIRED


async def test_expiring_names_the_next_expiry_by_the_same_reading_of_the_clock(
    office: PostOffice, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mail that falls due between two readings of the clock would be neither expired nor
    still to come, and would wait for the sweeper's next look."""
    alice, _bob = await agents(office, "alice", "bob")
    due = clock.now + 10
    await office.mailbox.send(alice, "bob", "lunch in 10?", ttl_s=10)
    readings = iter([due - 0.0005, due + 0.0005])  # each reading of the clock moves on
    monkeypatch.setattr(office.store, "clock", lambda: next(readings))
    assert await office.mailbox.expire_due() == due
    assert await office.events.since(alice, 0) == []


async def test_mail_past_its_ttl_unread_is_gone_from_every_read_of_its_recipient(
    office: PostOffice, clock: FakeClock
) -> None:
    """As from the inbox, before any sweep made the tombstone: the thread, the message,
    search and a channel's history (a member who joined after its TTL too). Who read it in
    time keeps it; its sender's receipts say expired."""
    alice, bob, carol, dave = await agents(office, "alice", "bob", "carol", "dave")
    for caller in (alice, bob, carol):
        await office.channels.join(caller, "#ops")
    direct = await office.mailbox.send(alice, "bob", "stale soon", ttl_s=5)
    broadcast = await office.mailbox.send(alice, "#ops", "stale soon too", ttl_s=5)
    kept = await office.mailbox.send(alice, "bob", "stale never", ttl_s=5, must_read=True)
    await office.mailbox.inbox(carol)
    clock.advance(6)
    await office.channels.join(dave, "#ops")

    for gone in (direct, broadcast):
        missing = await refusal(office.history.get(bob, gone.id))
        assert missing.code is ErrorCode.NOT_FOUND
        assert (await refusal(office.history.thread(bob, gone.id))).code is ErrorCode.NOT_FOUND
    assert [m.id for m in await office.history.search(bob, "stale")] == [kept.id]
    assert await office.channels.history(bob, "#ops") == []
    assert await office.channels.history(dave, "#ops") == []
    assert [m.state for m in await office.channels.history(carol, "#ops")] == [DeliveryState.READ]
    assert len(await office.history.search(alice, "stale")) == 3
    receipts = {s.message.id: s.receipts for s in await office.history.sent(alice)}
    assert [r.state for r in receipts[direct.id]] == [DeliveryState.EXPIRED]


async def test_read_mail_does_not_expire(office: PostOffice, clock: FakeClock) -> None:
    alice, bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "seen in time", ttl_s=10)
    await office.mailbox.inbox(bob)
    clock.advance(3600)
    assert await bodies(office, bob, unread_only=False) == ["seen in time"]


async def test_must_read_mail_never_expires_unread(office: PostOffice, clock: FakeClock) -> None:
    alice, bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "important", ttl_s=10, must_read=True)
    clock.advance(86_400 * 365)
    (message,) = (await office.mailbox.inbox(bob)).messages
    assert message.must_read
    assert message.body == "important"
    assert message.expires_at is None  # so no reader is told of an expiry that never comes


async def test_without_a_default_ttl_mail_waits_forever(
    office: PostOffice, clock: FakeClock
) -> None:
    assert office.settings.default_ttl_s is None
    alice, bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "no hurry")
    clock.advance(86_400 * 365)
    assert await bodies(office, bob) == ["no hurry"]


async def test_the_default_ttl_applies_when_a_message_names_none(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    office = await open_office(default_ttl_s=30)
    alice, bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "default ttl")
    await office.mailbox.send(alice, "bob", "own ttl", ttl_s=120)
    await office.mailbox.send(alice, "bob", "must read", must_read=True)
    (first, second, third) = (await office.mailbox.inbox(bob, peek=True)).messages
    assert first.expires_at == clock.now + 30
    assert third.must_read
    assert second.expires_at == clock.now + 120
    clock.advance(30)
    assert await bodies(office, bob) == ["own ttl", "must read"]


# -- reading ---------------------------------------------------------------------------------


async def test_the_inbox_lists_unread_mail_oldest_first_and_marks_it_read(
    office: PostOffice, clock: FakeClock
) -> None:
    alice, bob = await agents(office, "alice", "bob")
    for i in range(5):
        await office.mailbox.send(alice, "bob", f"m{i}")
        clock.advance(1)
    first = await office.mailbox.inbox(bob, limit=2)
    assert [m.body for m in first.messages] == ["m0", "m1"]
    assert first.unread == 3
    assert await bodies(office, bob) == ["m2", "m3", "m4"]
    assert (await office.mailbox.inbox(bob)).messages == []
    everything = (await office.mailbox.inbox(bob, unread_only=False)).messages
    assert [(m.body, m.state) for m in everything] == [
        (f"m{i}", DeliveryState.READ) for i in range(5)
    ]


async def test_the_whole_inbox_shows_the_newest_mail_oldest_first(office: PostOffice) -> None:
    """Unread mail is worked through from the oldest; the whole inbox (read and acked mail
    too) is looked back on from the newest, as a thread or a channel's history is: a page
    of the oldest would show the same month-old mail for ever."""
    alice, bob = await agents(office, "alice", "bob")
    sent = [await office.mailbox.send(alice, "bob", f"m{i}") for i in range(5)]
    await office.mailbox.ack(bob, [m.id for m in sent[:3]])
    newest = (await office.mailbox.inbox(bob, unread_only=False, limit=2, peek=True)).messages
    assert [m.body for m in newest] == ["m3", "m4"]
    assert [m.body for m in (await office.mailbox.inbox(bob, limit=1)).messages] == ["m3"]


async def test_peek_reads_without_marking_anything(office: PostOffice) -> None:
    alice, bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "peeked")
    before = await snapshot(office.store)
    peeked = await office.mailbox.inbox(bob, peek=True)
    assert [(m.body, m.state) for m in peeked.messages] == [("peeked", DeliveryState.QUEUED)]
    assert peeked.unread == 1
    assert await snapshot(office.store) == before
    assert await bodies(office, bob) == ["peeked"]


async def test_urgent_only_and_thread_filters_narrow_the_inbox(office: PostOffice) -> None:
    alice, bob = await agents(office, "alice", "bob")
    topic = await office.mailbox.send(alice, "bob", "topic", thread_id="build-42")
    await office.mailbox.send(alice, "bob", "fire!", priority="urgent")
    await office.mailbox.send(alice, "bob", "more on topic", reply_to=topic.id)
    assert await bodies(office, bob, urgent_only=True, peek=True) == ["fire!"]
    assert await bodies(office, bob, thread_id="build-42") == ["topic", "more on topic"]
    assert await bodies(office, bob) == ["fire!"]


async def test_the_inbox_and_wait_take_a_thread_by_the_id_of_any_of_its_messages(
    office: PostOffice,
) -> None:
    """As `thread` does: a reply's id is what a reader holds, and it names the thread the
    reply is in, not an empty thread of its own."""
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    question = await office.mailbox.send(alice, "bob", "question", thread_id="topic")
    follow_up = await office.mailbox.send(alice, "bob", "follow-up", reply_to=question.id)
    await office.mailbox.send(alice, "bob", "elsewhere")
    assert await bodies(office, bob, thread_id=follow_up.id, peek=True) == [
        "question",
        "follow-up",
    ]
    waited = await office.mailbox.wait(bob, timeout_s=0, thread_id=follow_up.id)
    assert [m.body for m in waited.messages] == ["question", "follow-up"]
    assert await bodies(office, bob, thread_id=follow_up.id) == []  # read now
    assert await bodies(office, bob) == ["elsewhere"]
    # A message the reader may not see names no thread for them: nothing is told of it.
    await office.mailbox.send(alice, "carol", "for carol", thread_id="secret")
    hidden = await office.mailbox.send(alice, "bob", "private", thread_id="secret")
    assert await bodies(office, carol, thread_id=hidden.id, peek=True) == []


async def test_a_new_thread_labelled_with_a_replys_id_is_refused_and_nothing_is_sent(
    office: PostOffice,
) -> None:
    """Such a thread would stand in for the reply's own wherever the id names a thread (in
    `thread`, `inbox` and `wait`), before the conversation the reply is part of."""
    alice, bob = await agents(office, "alice", "bob")
    question = await office.mailbox.send(alice, "bob", "question")
    reply = await office.mailbox.send(bob, "alice", "reply", reply_to=question.id)
    with pytest.raises(AgentpostError) as refused:
        await office.mailbox.send(bob, "alice", "own thread", thread_id=reply.id)
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT
    assert refused.value.details == {"thread_id": reply.id}
    assert [m.body for m in await office.history.thread(alice, reply.id)] == ["question", "reply"]
    assert await bodies(office, alice, thread_id=reply.id) == ["reply"]


async def test_a_thread_id_shaped_like_a_message_id_must_name_a_thread_that_is(
    office: PostOffice,
) -> None:
    alice, bob = await agents(office, "alice", "bob")
    question = await office.mailbox.send(alice, "bob", "question")  # its thread: its id
    joined = await office.mailbox.send(bob, "alice", "on it", thread_id=question.id)
    assert joined.thread_id == question.id
    made_up = message_id()
    with pytest.raises(AgentpostError) as refused:
        await office.mailbox.send(bob, "alice", "nowhere", thread_id=made_up)
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT
    labelled = await office.mailbox.send(bob, "alice", "free text", thread_id="m_release")
    assert labelled.thread_id == "m_release"
    assert await bodies(office, alice) == ["on it", "free text"]


@pytest.mark.parametrize("limit", [0, 501, -1])
async def test_an_inbox_page_size_outside_1_to_500_is_refused(
    office: PostOffice, limit: int
) -> None:
    (bob,) = await agents(office, "bob")
    await refused_without_change(
        office, ErrorCode.INVALID_ARGUMENT, office.mailbox.inbox(bob, limit=limit)
    )


async def test_the_whole_inbox_pages_back_from_a_pages_first_message(office: PostOffice) -> None:
    """As a thread does: the page before a cursor is the newest `limit` older than it, oldest
    first, never past what the reader may see; a page read is marked read, a peek is not."""
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    for n in range(5):
        await office.mailbox.send(alice, "bob", f"m{n}")
    hidden = await office.mailbox.send(alice, "carol", "for carol alone")
    await office.mailbox.send(carol, "bob", "m5")

    async def page(before: str | None, peek: bool = True) -> list[Message]:
        found = await office.mailbox.inbox(
            bob, unread_only=False, limit=2, before=before, peek=peek
        )
        return found.messages

    newest = await page(None)
    assert [m.body for m in newest] == ["m4", "m5"]
    older = await page(newest[0].id)
    assert [m.body for m in older] == ["m2", "m3"]
    oldest = await page(older[0].id, peek=False)
    assert [(m.body, m.state) for m in oldest] == [
        ("m0", DeliveryState.READ),
        ("m1", DeliveryState.READ),
    ]
    assert await page(oldest[0].id) == []  # past the first mail
    assert await bodies(office, bob, peek=True) == ["m2", "m3", "m4", "m5"]
    # Any message the reader may see is a cursor, one they sent too.
    own = await office.mailbox.send(bob, "alice", "mine")
    assert [m.body for m in await page(own.id)] == ["m4", "m5"]
    for cursor in (hidden.id, "m_nosuch"):
        await refused_without_change(
            office, ErrorCode.NOT_FOUND, office.mailbox.inbox(bob, unread_only=False, before=cursor)
        )
    await refused_without_change(
        office, ErrorCode.INVALID_ARGUMENT, office.mailbox.inbox(bob, unread_only=False, before="")
    )


@pytest.mark.parametrize("peek", [False, True])
async def test_unread_mail_takes_no_cursor(office: PostOffice, peek: bool) -> None:
    """Unread mail is read from the oldest on, and reading a page moves on to the next: a page
    older than a cursor would be the same oldest mail every time. Refused, nothing marked."""
    alice, bob = await agents(office, "alice", "bob")
    first = await office.mailbox.send(alice, "bob", "first")
    await office.mailbox.send(alice, "bob", "second")
    refused = await refused_without_change(
        office, ErrorCode.INVALID_ARGUMENT, office.mailbox.inbox(bob, before=first.id, peek=peek)
    )
    assert "unread_only=false" in refused.message


async def test_ack_marks_handled_and_reports_what_it_could_not_find(office: PostOffice) -> None:
    alice, bob = await agents(office, "alice", "bob")
    sent = await office.mailbox.send(alice, "bob", "do it")
    result = await office.mailbox.ack(bob, [sent.id, "m_unknown", sent.id])
    assert (result.acked, result.not_found) == ([sent.id], ["m_unknown"])
    (message,) = (await office.mailbox.inbox(bob, unread_only=False)).messages
    assert message.state is DeliveryState.ACKED
    (receipt,) = (await office.history.sent(alice))[0].receipts
    assert receipt.state is DeliveryState.ACKED
    assert receipt.read_at == receipt.acked_at  # acked unread: read at the same moment


async def test_ack_of_unknown_id_changes_nothing(office: PostOffice) -> None:
    alice, bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "stay queued")
    before = await snapshot(office.store)
    result = await office.mailbox.ack(bob, ["m_nope"])
    assert (result.acked, result.not_found) == ([], ["m_nope"])
    assert await snapshot(office.store) == before


async def test_ack_of_someone_elses_message_is_not_found_for_them(office: PostOffice) -> None:
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    sent = await office.mailbox.send(alice, "bob", "for bob")
    before = await snapshot(office.store)
    for intruder in (carol, alice):  # the sender is no recipient either
        result = await office.mailbox.ack(intruder, [sent.id])
        assert (result.acked, result.not_found) == ([], [sent.id])
    assert await snapshot(office.store) == before
    assert await bodies(office, bob) == ["for bob"]


# -- threads -----------------------------------------------------------------------------------


async def test_a_reply_cannot_move_to_another_thread(office: PostOffice) -> None:
    alice, bob = await agents(office, "alice", "bob")
    question = await office.mailbox.send(alice, "bob", "question", thread_id="topic")
    await refused_without_change(
        office,
        ErrorCode.INVALID_ARGUMENT,
        office.mailbox.send(bob, "alice", "x", reply_to=question.id, thread_id="elsewhere"),
    )
    reply = await office.mailbox.send(bob, "alice", "x", reply_to=question.id, thread_id="topic")
    assert reply.thread_id == "topic"


# -- waiting ---------------------------------------------------------------------------------


async def test_wait_returns_mail_that_is_already_there_and_marks_it_read(
    office: PostOffice,
) -> None:
    alice, bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "waiting for you")
    result = await office.mailbox.wait(bob, timeout_s=0)
    assert not result.timed_out
    assert [(m.body, m.state) for m in result.messages] == [("waiting for you", DeliveryState.READ)]


async def test_wait_with_nothing_to_read_times_out_without_an_error(office: PostOffice) -> None:
    (bob,) = await agents(office, "bob")
    result = await office.mailbox.wait(bob, timeout_s=0)
    assert (result.timed_out, result.messages, result.unread) == (True, [], 0)


async def test_wait_wakes_when_mail_arrives(office: PostOffice) -> None:
    alice, bob = await agents(office, "alice", "bob")
    results = []

    async def waiter() -> None:
        results.append(await office.mailbox.wait(bob, timeout_s=30))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            await office.mailbox.send(alice, "bob", "wake up")
    (result,) = results
    assert [m.body for m in result.messages] == ["wake up"]
    assert not result.timed_out


async def test_wait_on_a_thread_ignores_mail_in_other_threads(office: PostOffice) -> None:
    alice, bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "elsewhere", thread_id="other")
    result = await office.mailbox.wait(bob, timeout_s=0, thread_id="mine")
    assert result.timed_out
    assert result.unread == 1


# -- notices ---------------------------------------------------------------------------------


async def test_urgent_mail_is_previewed_once_to_each_session(office: PostOffice) -> None:
    alice = await session_caller(office, "alice")
    bob = await session_caller(office, "bob")
    bob_elsewhere = await session_caller(office, "bob", branch="feature")
    await office.mailbox.send(alice, "bob", "calm")
    await office.mailbox.send(alice, "bob", "fire!", priority="urgent")
    first = await office.mailbox.notices(bob)
    assert first.unread == 2
    assert [(m.body, m.priority) for m in first.urgent] == [("fire!", Priority.URGENT)]
    again = await office.mailbox.notices(bob)
    assert (again.unread, again.urgent) == (2, [])
    other = await office.mailbox.notices(bob_elsewhere)
    assert [m.body for m in other.urgent] == ["fire!"]
    assert (await office.mailbox.notices(bob_elsewhere)).urgent == []


async def test_a_send_carries_the_senders_notices_told_once(office: PostOffice) -> None:
    alice = await session_caller(office, "alice")
    bob = await session_caller(office, "bob")
    await office.mailbox.send(bob, "alice", "fire!", priority="urgent")
    sent, notices = await office.mailbox.send_with_notices(alice, "bob", "on it")
    assert sent.to == ["bob"]
    assert (notices.unread, [m.body for m in notices.urgent]) == (1, ["fire!"])
    assert (await office.mailbox.notices(alice)).urgent == []  # told with the send
    _, again = await office.mailbox.send_with_notices(alice, "bob", "done", idempotency_key="k1")
    assert (again.unread, again.urgent) == (1, [])


async def test_a_restarted_session_is_told_once_of_urgent_mail_that_waited_for_it(
    office: PostOffice,
) -> None:
    alice = await session_caller(office, "alice")
    await office.presence.end_session((await session_caller(office, "bob")).session_id or "")
    await office.mailbox.send(alice, "bob", "while you were out", priority="urgent")
    bob = await session_caller(office, "bob")
    notices = await office.mailbox.notices(bob)
    assert (notices.unread, [m.body for m in notices.urgent]) == (1, ["while you were out"])
    assert (await office.mailbox.notices(bob)).urgent == []


async def test_urgent_mail_read_before_the_notice_is_not_previewed(office: PostOffice) -> None:
    alice = await session_caller(office, "alice")
    bob = await session_caller(office, "bob")
    await office.mailbox.send(alice, "bob", "fire!", priority="urgent")
    await office.mailbox.inbox(bob)
    assert (await office.mailbox.notices(bob)).urgent == []


async def test_without_a_session_notices_carry_only_the_unread_count(office: PostOffice) -> None:
    alice, bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "fire!", priority="urgent")
    notices = await office.mailbox.notices(bob)
    assert (notices.unread, notices.urgent) == (1, [])


# -- retention -------------------------------------------------------------------------------

DAY = 86_400.0


async def test_acknowledged_mail_is_purged_once_older_than_thirty_days(
    office: PostOffice, clock: FakeClock
) -> None:
    assert office.settings.retention_days == 30
    alice, bob = await agents(office, "alice", "bob")
    sent = await office.mailbox.send(alice, "bob", "handled long ago", thread_id="old")
    await office.mailbox.ack(bob, [sent.id])
    clock.advance(30 * DAY)
    assert await office.mailbox.sweep() == 0  # exactly thirty days: still kept
    clock.advance(1)
    assert await office.mailbox.sweep() == 1
    assert await office.history.sent(alice) == []
    assert await office.history.search(bob, "handled") == []
    assert await bodies(office, bob, unread_only=False) == []
    await refused_without_change(office, ErrorCode.NOT_FOUND, office.history.thread(bob, "old"))


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # PostgreSQL has no FTS5 index
async def test_a_sweep_leaves_no_word_of_the_mail_it_purged_in_the_sqlite_index(
    office: PostOffice, clock: FakeClock
) -> None:
    """Searches stop finding it at once; its words leave the file's index in the same sweep
    (`store.fulltext`), not whenever other news next wakes the background indexing."""
    alice, bob = await agents(office, "alice", "bob")
    sent = await office.mailbox.send(alice, "bob", "nightingale")
    assert len(await office.history.search(bob, "nightingale")) == 1  # indexed
    await office.mailbox.ack(bob, [sent.id])
    await office.store.purge_wiped()  # whatever the file held before
    clock.advance(31 * DAY)
    assert await office.mailbox.sweep() == 1
    assert not await office.store.read(fulltext.wiped)


async def test_mail_someone_has_not_acknowledged_is_kept_however_old(
    office: PostOffice, clock: FakeClock
) -> None:
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    both = await office.mailbox.send(alice, ["bob", "carol"], "bob acks, carol only reads")
    await office.mailbox.send(alice, "bob", "never opened")
    await office.mailbox.send(alice, "carol", "must read", must_read=True, ttl_s=60)
    await office.mailbox.ack(bob, [both.id])
    await office.mailbox.inbox(carol, limit=1)
    clock.advance(365 * DAY)
    before = await snapshot(office.store)
    assert await office.mailbox.sweep() == 0
    after = await snapshot(office.store)
    # The mail stays as it was; records that only matter for a while (the audit rows of
    # sends, events) follow retention on their own.
    assert [after[t] for t in ("messages", "deliveries")] == [
        before[t] for t in ("messages", "deliveries")
    ]
    assert len(await office.history.sent(alice)) == 3


async def test_mail_withheld_by_a_block_is_kept_as_long_as_unread_mail_would_be(
    office: PostOffice, clock: FakeClock
) -> None:
    """A blocked sender must not tell the block from a recipient who never reads, not even
    after the retention: what is withheld is kept while its silent receipt is open (no TTL),
    and goes once that receipt has expired, as unread mail does."""
    alice, _bob, carol, dave = await agents(office, "alice", "bob", "carol", "dave")
    for member in (alice, carol, dave):
        await office.channels.join(member, "#quiet")
    await office.directory.block(carol, "alice")
    await office.directory.block(dave, "alice")
    await office.mailbox.send(alice, "bob", "bob never reads")
    await office.mailbox.send(alice, "carol", "carol blocks alice")
    await office.mailbox.send(alice, "#quiet", "dave and carol block alice")
    await office.mailbox.send(alice, "carol", "withheld, and stale soon", ttl_s=60)
    clock.advance(365 * DAY)
    assert await office.mailbox.sweep() == 1
    assert sorted(s.message.body for s in await office.history.sent(alice)) == [
        "bob never reads",
        "carol blocks alice",
        "dave and carol block alice",
    ]


async def test_expired_mail_is_purged_once_old_enough_tombstone_and_all(
    office: PostOffice, clock: FakeClock
) -> None:
    alice, _bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "stale soon", ttl_s=60)  # never looked at
    clock.advance(31 * DAY)
    assert await office.mailbox.sweep() == 1
    assert await office.history.sent(alice) == []


async def test_retention_is_configurable_and_younger_mail_stays(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    office = await open_office(retention_days=1)
    alice, bob = await agents(office, "alice", "bob")
    old = await office.mailbox.send(alice, "bob", "yesterday")
    clock.advance(DAY / 2)
    young = await office.mailbox.send(alice, "bob", "this morning")
    await office.mailbox.ack(bob, [old.id, young.id])
    clock.advance(DAY / 2 + 1)
    assert await office.mailbox.sweep() == 1
    assert [s.message.body for s in await office.history.sent(alice)] == ["this morning"]


async def test_urgent_mail_after_retention_purged_every_message_is_still_previewed(
    office: PostOffice, clock: FakeClock
) -> None:
    """A session's cursor outlives the mail it counted: new mail must land beyond it."""
    alice = await session_caller(office, "alice")
    bob = await session_caller(office, "bob")
    ids = [
        (await office.mailbox.send(alice, "bob", f"m{i}", priority="urgent")).id for i in range(3)
    ]
    assert len((await office.mailbox.notices(bob)).urgent) == 3
    await office.mailbox.ack(bob, ids)
    clock.advance(31 * DAY)
    assert await office.mailbox.sweep() == 3
    await office.mailbox.send(alice, "bob", "fire after a quiet month", priority="urgent")
    notices = await office.mailbox.notices(bob)
    assert [m.body for m in notices.urgent] == ["fire after a quiet month"]


async def test_a_large_sweep_goes_in_batches_and_purges_everything_due(
    office: PostOffice, clock: FakeClock
) -> None:
    alice, bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "#general", "broadcast to bob")
    ids = [(await office.mailbox.send(alice, "bob", f"m{i}")).id for i in range(6)]
    await office.mailbox.ack(bob, ids)
    await office.mailbox.send(alice, "bob", "still open")
    clock.advance(31 * DAY)
    assert await office.mailbox.sweep(batch=2) == 6
    assert [s.message.body for s in await office.history.sent(alice)] == [
        "still open",
        "broadcast to bob",
    ]


# -- being told ------------------------------------------------------------------------------


async def test_arrivals_tell_of_new_mail_without_marking_it_read(office: PostOffice) -> None:
    alice, bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "old news")  # before the cursor: not an arrival
    start = await office.mailbox.newest_seq()
    told: list[int] = []

    async def listen() -> None:
        async for seq in office.mailbox.arrivals(lambda: bob, after=start):
            told.append(seq)
            return

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(listen)
            await anyio.wait_all_tasks_blocked()
            await office.mailbox.send(alice, "alice", "not for bob")
            await office.mailbox.send(alice, "bob", "new")
    assert len(told) == 1
    peek = await office.mailbox.inbox(bob, peek=True)
    assert [(m.body, m.state) for m in peek.messages] == [
        ("old news", DeliveryState.QUEUED),
        ("new", DeliveryState.QUEUED),
    ]
    assert told == [peek.messages[1].seq]


async def test_arrivals_follow_a_session_that_takes_another_name(office: PostOffice) -> None:
    (alice,) = await agents(office, "alice")
    me = [await session_caller(office, "first-name")]
    told: list[int] = []

    async def listen() -> None:
        async for seq in office.mailbox.arrivals(lambda: me[0], after=0):
            told.append(seq)
            return

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(listen)
            await anyio.wait_all_tasks_blocked()
            me[0] = await office.presence.rename_session(me[0], "bob")
            await anyio.wait_all_tasks_blocked()
            sent = await office.mailbox.send(alice, "bob", "for the new name")
    assert told == [(await office.history.get(me[0], sent.id)).seq]


async def test_follow_shows_every_new_message_of_the_post_office(office: PostOffice) -> None:
    alice, _bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "before")
    seen: list[str] = []
    following = anyio.Event()

    async def follow() -> None:
        async for message in office.mailbox.follow(backlog=1):
            seen.append(message.body)
            following.set()  # the backlog is out: the cursor is fixed, later mail is new
            if len(seen) == 3:
                return

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            await following.wait()
            await office.mailbox.send(alice, "bob", "direct")
            await office.mailbox.send(alice, "#general", "broadcast")
    assert seen == ["before", "direct", "broadcast"]


async def test_follow_starts_with_the_last_messages_kept_after_retention_purged_between_them(
    office: PostOffice, clock: FakeClock
) -> None:
    """`tail --backlog 2` shows the two newest messages there are, however many older ones
    between them the sweep purged."""
    alice, bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "still open")
    handled = [(await office.mailbox.send(alice, "bob", f"handled {i}")).id for i in range(3)]
    await office.mailbox.ack(bob, handled)
    clock.advance(31 * 86_400)
    assert await office.mailbox.sweep() == 3
    await office.mailbox.send(alice, "bob", "newest")
    seen: list[str] = []
    following = anyio.Event()

    async def follow() -> None:
        async for message in office.mailbox.follow(backlog=2):
            seen.append(message.body)
            following.set()
            if message.body == "later":
                return

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            await following.wait()
            await office.mailbox.send(alice, "bob", "later")
    assert seen == ["still open", "newest", "later"]


async def test_wait_times_out_by_real_time_even_when_the_store_clock_stands_still(
    office: PostOffice,
) -> None:
    (bob,) = await agents(office, "bob")
    with anyio.fail_after(10):
        result = await office.mailbox.wait(bob, timeout_s=0.2)
    assert result.timed_out


@pytest.mark.parametrize("seconds", [float("nan"), float("inf"), float("-inf")])
async def test_a_ttl_that_is_not_a_finite_number_is_refused_and_changes_nothing(
    office: PostOffice, seconds: float
) -> None:
    alice, _ = await agents(office, "alice", "bob")
    send = office.mailbox.send(alice, "bob", "hello", ttl_s=seconds)
    await refused_without_change(office, ErrorCode.INVALID_ARGUMENT, send)


@pytest.mark.parametrize("seconds", [float("nan"), float("inf")])
async def test_a_wait_that_is_not_a_finite_number_is_refused(
    office: PostOffice, seconds: float
) -> None:
    (bob,) = await agents(office, "bob")
    with anyio.fail_after(10):
        await refused_without_change(
            office, ErrorCode.INVALID_ARGUMENT, office.mailbox.wait(bob, timeout_s=seconds)
        )


async def test_unread_mail_past_its_ttl_leaves_room_in_a_full_inbox(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    office = await open_office(max_unacked=1)
    alice, bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "soon gone", ttl_s=10)
    await refused_without_change(
        office, ErrorCode.INBOX_FULL, office.mailbox.send(alice, "bob", "no room yet")
    )
    clock.advance(11)
    await office.mailbox.send(alice, "bob", "room again")
    assert await bodies(office, bob) == ["room again"]


async def test_ack_of_unread_mail_past_its_ttl_is_not_found_and_the_receipt_says_expired(
    office: PostOffice, clock: FakeClock
) -> None:
    alice, bob = await agents(office, "alice", "bob")
    sent = await office.mailbox.send(alice, "bob", "read me soon", ttl_s=5)
    clock.advance(6)
    done = await office.mailbox.ack(bob, [sent.id])
    assert (done.acked, done.not_found) == ([], [sent.id])
    (receipt,) = (await office.history.sent(alice))[0].receipts
    assert receipt.state is DeliveryState.EXPIRED


async def test_concurrent_answers_tell_an_urgent_message_only_once(office: PostOffice) -> None:
    alice = await session_caller(office, "alice")
    bob = await session_caller(office, "bob")
    await office.mailbox.send(alice, "bob", "fire!", priority="urgent")
    told = await asyncio.gather(*(office.mailbox.notices(bob) for _ in range(4)))
    assert sum(len(n.urgent) for n in told) == 1
    assert (await office.mailbox.notices(bob)).urgent == []


async def test_an_answer_that_looked_before_urgent_mail_came_tells_only_what_it_moved_past(
    office: PostOffice, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two answers look, newer urgent mail lands between their looks, and the one that saw
    less moves the cursor first: the other tells only what lies beyond that."""
    alice = await session_caller(office, "alice")
    bob = await session_caller(office, "bob")
    await office.mailbox.send(alice, "bob", "first fire", priority="urgent")
    looked = [asyncio.Event(), asyncio.Event()]
    go_on = [asyncio.Event(), asyncio.Event()]
    glance = office.store.glance

    async def held_glance(fn: Any) -> Any:
        turn = sum(event.is_set() for event in looked)
        found = await glance(fn)
        looked[turn].set()
        await go_on[turn].wait()
        return found

    monkeypatch.setattr(office.store, "glance", held_glance)
    early = asyncio.ensure_future(office.mailbox.notices(bob))
    await looked[0].wait()
    await office.mailbox.send(alice, "bob", "second fire", priority="urgent")
    late = asyncio.ensure_future(office.mailbox.notices(bob))
    await looked[1].wait()
    go_on[0].set()
    told_early = await early
    go_on[1].set()
    told_late = await late
    assert [m.body for m in told_early.urgent] == ["first fire"]
    assert [m.body for m in told_late.urgent] == ["second fire"]


# -- per-agent limits ------------------------------------------------------------------------


async def test_an_agents_own_send_rate_overrides_the_setting(
    office: PostOffice, clock: FakeClock
) -> None:
    on_window_start(clock)
    alice, bob = await agents(office, "alice", "bob")
    await office.admin.set_limits(
        await owner(office), "alice", send_rate_per_minute=2, max_unacked=None
    )
    await office.mailbox.send(alice, "bob", "one")
    await office.mailbox.send(alice, "bob", "two")
    error = await refused_without_change(
        office, ErrorCode.RATE_LIMITED, office.mailbox.send(alice, "bob", "three")
    )
    assert error.details == {"limit": 2}
    for n in range(3):
        await office.mailbox.send(bob, "alice", f"bob keeps the default ({n})")


async def test_an_agents_own_inbox_cap_overrides_the_setting(office: PostOffice) -> None:
    alice, _bob, _carol = await agents(office, "alice", "bob", "carol")
    await office.admin.set_limits(
        await owner(office), "bob", send_rate_per_minute=None, max_unacked=1
    )
    await office.mailbox.send(alice, "bob", "fills bob")
    error = await refused_without_change(
        office, ErrorCode.INBOX_FULL, office.mailbox.send(alice, ["carol", "bob"], "no room")
    )
    assert error.details == {"full": ["bob"]}
    sent = await office.mailbox.send(alice, "#general", "news")
    assert ("bob" in sent.to, sent.skipped_full) == (False, ["bob"])
    await office.mailbox.send(alice, "carol", "carol keeps the default")


# -- clearing content on acknowledgement -----------------------------------------------------


async def test_with_clear_on_ack_content_is_wiped_once_every_recipient_acked(
    open_office: OpenOffice,
) -> None:
    office = await open_office(clear_on_ack=True)
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    sent = await office.mailbox.send(
        alice, ["bob", "carol"], "burn after reading", subject="note", data=[1]
    )
    await office.mailbox.ack(bob, [sent.id])
    assert (await office.history.get(carol, sent.id)).body == "burn after reading"
    await office.mailbox.ack(carol, [sent.id])
    cleared = await office.history.get(alice, sent.id)
    assert (cleared.body, cleared.data, cleared.subject) == ("", None, "note")
    assert [r.state for r in (await office.history.sent(alice))[0].receipts] == [
        DeliveryState.ACKED,
        DeliveryState.ACKED,
    ]
    assert await office.history.search(alice, "burn") == []


async def test_with_clear_on_ack_search_no_longer_finds_wiped_words_it_had_indexed(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    """Indexed before the wipe (a search ran), by an ack and by an expiry after an ack."""
    office = await open_office(clear_on_ack=True)
    alice, bob, _carol = await agents(office, "alice", "bob", "carol")
    acked = await office.mailbox.send(alice, "bob", "marmalade plans", subject="jam")
    lapsed = await office.mailbox.send(alice, ["bob", "carol"], "marmalade recipe", ttl_s=5)
    assert len(await office.history.search(alice, "marmalade")) == 2
    await office.mailbox.ack(bob, [acked.id, lapsed.id])
    clock.advance(6)
    await office.mailbox.expire_due()

    for reader in (alice, bob):
        assert await office.history.search(reader, "marmalade") == []
    assert [m.id for m in await office.history.search(bob, "jam")] == [acked.id]


async def test_with_clear_on_ack_mail_withheld_by_a_block_keeps_its_content_for_its_sender(
    open_office: OpenOffice,
) -> None:
    """A blocker's receipt reads unread: the content stays, as it does while any recipient
    has not acked, or the wiped body would tell the sender of the block."""
    office = await open_office(clear_on_ack=True)
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    await office.directory.block(carol, "alice")
    sent = await office.mailbox.send(alice, ["bob", "carol"], "kept while carol has not acked")
    await office.mailbox.ack(bob, [sent.id])
    assert (await office.history.get(alice, sent.id)).body == "kept while carol has not acked"


async def test_with_clear_on_ack_content_is_wiped_when_the_last_open_copy_expires_after_an_ack(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    """Acked by one recipient and let expire by the other is handled in either order: the
    expiry that comes last wipes the content as the ack that comes last does. Mail nobody
    acknowledged keeps it."""
    office = await open_office(clear_on_ack=True)
    alice, bob, _carol = await agents(office, "alice", "bob", "carol")
    sent = await office.mailbox.send(alice, ["bob", "carol"], "burn after reading", ttl_s=10)
    unread = await office.mailbox.send(alice, ["bob", "carol"], "nobody read me", ttl_s=10)
    await office.mailbox.ack(bob, [sent.id])
    clock.advance(10)
    await office.mailbox.expire_due()  # the sweeper's look as the TTL falls due
    assert (await office.history.get(alice, sent.id)).body == ""
    assert await office.history.search(alice, "burn") == []
    assert (await office.history.get(alice, unread.id)).body == "nobody read me"


async def test_with_clear_on_ack_the_last_ack_after_the_others_ttl_passed_wipes_at_once(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    """Unread past its TTL, Carol's copy is expired (her receipt says so) before any look
    has made the tombstone: Bob's ack is the last to handle the message, as it would be
    if Carol blocked Alice."""
    office = await open_office(clear_on_ack=True)
    alice, bob, _carol = await agents(office, "alice", "bob", "carol")
    sent = await office.mailbox.send(alice, ["bob", "carol"], "burn after reading", ttl_s=10)
    await office.mailbox.inbox(bob)
    clock.advance(10)
    await office.mailbox.ack(bob, [sent.id])
    assert (await office.history.get(alice, sent.id)).body == ""


async def test_with_clear_on_ack_mail_withheld_by_a_block_is_wiped_once_its_ttl_has_passed(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    """The blocker's silent receipt turns expired at the TTL, as a recipient's who never
    reads: then the content goes, as it would for them."""
    office = await open_office(clear_on_ack=True)
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    await office.directory.block(carol, "alice")
    sent = await office.mailbox.send(alice, ["bob", "carol"], "kept until the ttl", ttl_s=10)
    await office.mailbox.ack(bob, [sent.id])
    clock.advance(10)
    await office.mailbox.expire_due()
    assert (await office.history.get(alice, sent.id)).body == ""


async def test_without_clear_on_ack_acknowledged_mail_keeps_its_content(
    office: PostOffice,
) -> None:
    assert office.settings.clear_on_ack is False
    alice, bob = await agents(office, "alice", "bob")
    sent = await office.mailbox.send(alice, "bob", "keep me")
    await office.mailbox.ack(bob, [sent.id])
    assert (await office.history.get(bob, sent.id)).body == "keep me"


async def test_data_stored_nested_past_the_limit_before_it_was_refused_reads_as_a_note(
    office: PostOffice,
) -> None:
    """Earlier versions stored such data; every reader of it failed. Now they read a note."""
    from sqlalchemy import text

    alice, bob = await agents(office, "alice", "bob")
    sent = await office.mailbox.send(alice, "bob", "from an older version", data={"ok": 1})
    deep = "[" * 900 + "]" * 900
    await office.store.write(
        lambda conn: conn.execute(
            text("UPDATE messages SET data = :deep WHERE id = :id"), {"deep": deep, "id": sent.id}
        )
    )
    (message,) = (await office.mailbox.inbox(bob)).messages
    assert message.data == {"agentpost": "data nested deeper than 64 levels, not shown"}
    assert (await office.history.get(alice, sent.id)).data == message.data
