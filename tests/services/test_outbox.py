"""What a send passes through besides delivery (services/outbox.py): idempotency keys, blocks
and the audit row, each on both databases, every refusal changing nothing."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable
from typing import Any

import pytest
from sqlalchemy import update

from account_helpers import owner
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.models import DeliveryState
from agentpost.services import PostOffice, drafts
from agentpost.store.schema import idempotency
from backends import (
    FakeClock,
    OpenOffice,
    agents,
    bodies,
    refused_without_change,
    snapshot,
)

pytestmark = pytest.mark.anyio

DAY = 86_400.0


async def refusal(call: Awaitable[Any]) -> AgentpostError:
    with pytest.raises(AgentpostError) as caught:
        await call
    return caught.value


# -- retries: idempotency keys ---------------------------------------------------------------


async def test_a_retried_send_with_the_same_idempotency_key_is_stored_once(
    office: PostOffice,
) -> None:
    alice, bob = await agents(office, "alice", "bob")
    first = await office.mailbox.send(alice, "bob", "once", idempotency_key="retry-1")
    before = await snapshot(office.store)
    again = await office.mailbox.send(alice, "bob", "once", idempotency_key="retry-1")
    assert again == first
    assert await snapshot(office.store) == before  # no message, no rate, no audit row
    assert await bodies(office, bob) == ["once"]


async def test_a_retry_whose_data_lists_the_same_keys_in_another_order_is_the_same_send(
    office: PostOffice,
) -> None:
    """Another client, or another JSON library, may serialise the object anew."""
    alice, bob = await agents(office, "alice", "bob")
    data = {"pr": 42, "checks": {"lint": "ok", "tests": "ok"}}
    first = await office.mailbox.send(alice, "bob", "done", data=data, idempotency_key="r-2")
    reordered = {"checks": {"tests": "ok", "lint": "ok"}, "pr": 42}
    again = await office.mailbox.send(alice, "bob", "done", data=reordered, idempotency_key="r-2")
    assert again == first
    assert await bodies(office, bob) == ["done"]


async def test_a_retry_whose_data_writes_a_whole_number_with_a_point_is_the_same_send(
    office: PostOffice,
) -> None:
    """JavaScript writes `7.0` as `7`; Python writes a float `7.0`. One number either way."""
    alice, bob = await agents(office, "alice", "bob")
    first = await office.mailbox.send(
        alice, "bob", "done", data={"pr": 7, "score": [0.5, -0.0]}, idempotency_key="r-4"
    )
    again = await office.mailbox.send(
        alice, "bob", "done", data={"pr": 7.0, "score": [0.5, 0]}, idempotency_key="r-4"
    )
    assert again == first
    assert await bodies(office, bob) == ["done"]
    await refused_without_change(
        office,
        ErrorCode.CONFLICT,
        office.mailbox.send(
            alice, "bob", "done", data={"pr": 7.5, "score": [0.5, 0]}, idempotency_key="r-4"
        ),
    )


async def test_a_key_remembered_when_data_counted_as_sent_still_replays_a_retry_sent_alike(
    office: PostOffice,
) -> None:
    """A rolling upgrade: the first try went to a replica of the release before."""
    alice, bob = await agents(office, "alice", "bob")
    data = {"pr": 42, "checks": {"lint": "ok"}}
    first = await office.mailbox.send(alice, "bob", "done", data=data, idempotency_key="r-3")
    request = drafts.draft(office.settings, "bob", "done", data=data).request
    text = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    as_sent = hashlib.sha256(text.encode("utf-8")).hexdigest()
    await office.store.write(
        lambda conn: conn.execute(update(idempotency).values(request_hash=as_sent))
    )
    again = await office.mailbox.send(alice, "bob", "done", data=data, idempotency_key="r-3")
    assert again == first
    assert await bodies(office, bob) == ["done"]


async def test_a_retried_broadcast_answers_as_the_first_did(office: PostOffice) -> None:
    alice, _bob, _carol = await agents(office, "alice", "bob", "carol")
    first = await office.mailbox.send(alice, "#general", "news", idempotency_key="b-1")
    assert await office.mailbox.send(alice, "#general", "news", idempotency_key="b-1") == first
    assert first.channel == "general"


@pytest.mark.parametrize(
    "changes",
    [
        {"body": "twice?"},
        {"to": "carol"},
        {"subject": "other"},
        {"data": {"n": 2}},
        {"priority": "urgent"},
        {"ttl_s": 60},
        {"must_read": True},
    ],
)
async def test_a_different_body_under_the_same_idempotency_key_is_a_conflict(
    office: PostOffice, changes: dict[str, Any]
) -> None:
    alice, _bob, _carol = await agents(office, "alice", "bob", "carol")
    request: dict[str, Any] = {"to": "bob", "body": "once", "data": {"n": 1}}
    await office.mailbox.send(alice, **request, idempotency_key="k")
    error = await refused_without_change(
        office,
        ErrorCode.CONFLICT,
        office.mailbox.send(alice, **(request | changes), idempotency_key="k"),
    )
    assert error.details == {"idempotency_key": "k"}


async def test_idempotency_keys_are_each_agents_own(office: PostOffice) -> None:
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    from_alice = await office.mailbox.send(alice, "carol", "hi", idempotency_key="same")
    from_bob = await office.mailbox.send(bob, "carol", "hi", idempotency_key="same")
    assert from_alice.id != from_bob.id
    assert len(await bodies(office, carol)) == 2


async def test_an_idempotency_key_is_kept_for_a_day_and_then_forgotten(
    office: PostOffice, clock: FakeClock
) -> None:
    alice, bob = await agents(office, "alice", "bob")
    first = await office.mailbox.send(alice, "bob", "monday", idempotency_key="daily")
    clock.advance(DAY - 1)
    assert await office.mailbox.send(alice, "bob", "monday", idempotency_key="daily") == first
    clock.advance(1)
    later = await office.mailbox.send(alice, "bob", "tuesday", idempotency_key="daily")
    assert later.id != first.id
    assert await bodies(office, bob) == ["monday", "tuesday"]


async def test_the_sweep_forgets_idempotency_keys_older_than_a_day(
    office: PostOffice, clock: FakeClock
) -> None:
    alice, _bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "old", idempotency_key="old")
    clock.advance(DAY)
    await office.mailbox.send(alice, "bob", "new", idempotency_key="new")
    await office.mailbox.sweep()
    kept = (await snapshot(office.store))["idempotency"]
    assert [row[1] for row in kept] == ["new"]


async def test_a_refused_send_leaves_its_idempotency_key_unused(office: PostOffice) -> None:
    alice, bob = await agents(office, "alice", "bob")
    await refusal(office.mailbox.send(alice, "bbo", "typo", idempotency_key="fix"))
    await office.mailbox.send(alice, "bob", "typo", idempotency_key="fix")
    assert await bodies(office, bob) == ["typo"]


@pytest.mark.parametrize("key", ["", "k" * 201, "with space", "naïve", "tab\t"])
async def test_a_malformed_idempotency_key_is_refused(office: PostOffice, key: str) -> None:
    alice, _bob = await agents(office, "alice", "bob")
    await refused_without_change(
        office,
        ErrorCode.INVALID_ARGUMENT,
        office.mailbox.send(alice, "bob", "hi", idempotency_key=key),
    )


# -- blocks ----------------------------------------------------------------------------------


async def test_a_blocked_senders_mail_is_dropped_silently(office: PostOffice) -> None:
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    await office.directory.block(bob, "alice")
    sent = await office.mailbox.send(alice, ["bob", "carol"], "hello both")
    assert sent.to == ["bob", "carol"]  # the sender is not told
    assert await bodies(office, bob) == []
    assert (await office.mailbox.inbox(bob)).unread == 0
    assert await bodies(office, carol) == ["hello both"]
    await refused_without_change(office, ErrorCode.NOT_FOUND, office.history.get(bob, sent.id))
    assert await office.history.search(bob, "hello") == []
    receipts = (await office.history.sent(alice))[0].receipts
    assert [(r.to, r.state) for r in receipts] == [
        ("bob", DeliveryState.QUEUED),  # as if bob never read it
        ("carol", DeliveryState.READ),
    ]


async def test_a_blocked_senders_receipt_expires_as_unread_mail_does(
    office: PostOffice, clock: FakeClock
) -> None:
    alice, bob = await agents(office, "alice", "bob")
    await office.directory.block(bob, "alice")
    await office.mailbox.send(alice, "bob", "soon gone", ttl_s=10)
    clock.advance(10)
    (receipt,) = (await office.history.sent(alice))[0].receipts
    assert (receipt.state, receipt.expired_at) == (DeliveryState.EXPIRED, clock.now)


async def test_a_blockers_receipt_reads_as_a_never_readers_after_a_late_sweep(
    office: PostOffice, clock: FakeClock
) -> None:
    """Carol never reads, Bob blocks: once a look long after the TTL has made Carol's
    tombstone, her receipt and Bob's still tell the same times."""
    alice, bob, _carol = await agents(office, "alice", "bob", "carol")
    await office.directory.block(bob, "alice")
    await office.mailbox.send(alice, ["bob", "carol"], "soon gone", ttl_s=10)
    clock.advance(3600)
    await office.mailbox.expire_due()
    blocker, reader = (await office.history.sent(alice))[0].receipts
    assert (blocker.state, blocker.expired_at) == (reader.state, reader.expired_at)


async def test_a_blocked_recipients_full_inbox_does_not_give_the_block_away(
    open_office: OpenOffice,
) -> None:
    """A full inbox is full to every sender: a blocked one is refused as any other, and
    a broadcast lists the blocker among the members it skipped. (What the blocked sender
    sends never fills the inbox, though: withheld mail counts toward no cap.)"""
    office = await open_office(max_unacked=1)
    alice, bob, carol, _ = await agents(office, "alice", "bob", "carol", "dave")
    await office.mailbox.send(carol, "bob", "fills bob")
    await office.mailbox.send(carol, "dave", "fills dave")
    await office.directory.block(bob, "alice")

    blocked = await refused_without_change(
        office, ErrorCode.INBOX_FULL, office.mailbox.send(alice, "bob", "to a full blocker")
    )
    unblocked = await refused_without_change(
        office, ErrorCode.INBOX_FULL, office.mailbox.send(alice, "dave", "to a full inbox")
    )
    assert (blocked.details, unblocked.details) == ({"full": ["bob"]}, {"full": ["dave"]})
    broadcast = await office.mailbox.send(alice, "#general", "news")
    assert (broadcast.to, broadcast.skipped_full) == (["carol"], ["bob", "dave"])


async def test_a_broadcast_skips_members_who_blocked_the_sender(office: PostOffice) -> None:
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    await office.directory.block(carol, "alice")
    sent = await office.mailbox.send(alice, "#general", "news")
    assert sorted(sent.to) == ["bob", "carol"]
    assert await bodies(office, bob) == ["news"]
    assert await bodies(office, carol) == []


async def test_a_block_holds_only_against_that_sender(office: PostOffice) -> None:
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    await office.directory.block(bob, "alice")
    await office.mailbox.send(carol, "bob", "from carol")
    await office.mailbox.send(bob, "alice", "bob may still write to alice")
    assert await bodies(office, bob) == ["from carol"]
    assert await bodies(office, alice) == ["bob may still write to alice"]


# -- the audit of sends ----------------------------------------------------------------------


async def test_every_send_writes_an_audit_row_of_metadata_without_the_body(
    office: PostOffice,
) -> None:
    alice, _bob, carol = await agents(office, "alice", "bob", "carol")
    await office.directory.block(carol, "alice")
    sent = await office.mailbox.send(
        alice, ["bob", "carol"], "secret plans", subject="plans", data={"k": "v"}
    )
    (entry,) = await office.admin.audit_log(await owner(office), action="message.sent")
    assert (entry.actor, entry.target) == ("alice", sent.id)
    assert entry.detail == {
        "to": ["bob", "carol"],
        "channel": None,
        "kind": "message",
        "priority": "normal",
        "thread_id": sent.thread_id,
        "body_bytes": 12,
        "data_bytes": 9,
        "dropped": ["carol"],  # the owner may know what the sender is not told
    }
    assert "secret plans" not in repr((await snapshot(office.store))["audit"])


async def test_with_audit_bodies_the_audit_keeps_what_was_said(open_office: OpenOffice) -> None:
    office = await open_office(audit_bodies=True)
    alice, _bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "for the record", subject="minutes")
    (entry,) = await office.admin.audit_log(await owner(office), action="message.sent")
    assert (entry.detail["subject"], entry.detail["body"], entry.detail["data"]) == (
        "minutes",
        "for the record",
        None,
    )


async def test_with_audit_bodies_the_audit_keeps_data_as_the_json_value_it_was(
    open_office: OpenOffice,
) -> None:
    """Not its JSON text: an object sent is an object in the audit, a string a string."""
    office = await open_office(audit_bodies=True)
    alice, _bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "structured", data={"ticket": 7, "tags": ["a"]})
    await office.mailbox.send(alice, "bob", "a string", data='{"ticket": 7}')
    entries = await office.admin.audit_log(await owner(office), action="message.sent")
    assert [e.detail["data"] for e in reversed(entries)] == [
        {"ticket": 7, "tags": ["a"]},
        '{"ticket": 7}',
    ]


async def test_the_sweep_drops_audit_rows_of_sends_with_the_mail_but_keeps_administration(
    office: PostOffice, clock: FakeClock
) -> None:
    admin = await owner(office)
    alice, bob = await agents(office, "alice", "bob")
    await office.admin.set_limits(admin, "bob", send_rate_per_minute=5, max_unacked=None)
    sent = await office.mailbox.send(alice, "bob", "old news")
    await office.mailbox.ack(bob, [sent.id])
    clock.advance(31 * DAY)
    assert await office.mailbox.sweep() == 1
    assert {e.action for e in await office.admin.audit_log(admin)} == {
        "key.installed",
        "limits.set",
    }
