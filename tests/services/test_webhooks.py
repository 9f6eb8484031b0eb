"""Webhooks against a real HTTP receiver on 127.0.0.1 that checks every signature itself.

The receiver is a few lines of HTTP/1.1 over a TCP listener: it answers what each test scripts
(500, a redirect, 200), and records what came. The dispatcher runs as `serve` runs it; retries
are due by the store's clock, which the tests move.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
import pytest
from anyio.abc import SocketAttribute
from sqlalchemy import select

from account_helpers import ADDRESS, keyed, owner
from agentpost.domain.errors import ErrorCode
from agentpost.domain.events import MAX_WEBHOOKS, HookState, WebhookDelivery
from agentpost.domain.models import Caller
from agentpost.services import PostOffice, outbound
from agentpost.services.webhooks import MAX_IN_FLIGHT
from agentpost.store import webhooks as webhook_rows
from agentpost.store.schema import webhooks
from backends import FakeClock, OpenOffice, agents, disable_agent, refused_without_change
from webhook_receiver import Receiver, listening

pytestmark = pytest.mark.anyio

T = TypeVar("T")
DAY = 86_400


@asynccontextmanager
async def running(office: PostOffice, receiver: Receiver) -> AsyncIterator[None]:
    """The receiver listening on 127.0.0.1 (its url set), and the office's dispatcher."""
    async with listening(receiver), anyio.create_task_group() as tg:
        tg.start_soon(office.webhooks.run_dispatcher)
        try:
            yield
        finally:
            tg.cancel_scope.cancel()


async def until(office: PostOffice, check: Callable[[], Awaitable[T | None]]) -> T:
    """What `check` answers once it answers something: asked again after each commit (the
    dispatcher's too), for ten seconds at most."""
    with anyio.fail_after(10):
        while True:
            version = office.store.version
            if found := await check():
                return found
            await office.store.wait_changed(version, 1)


async def hook(office: PostOffice, caller: Caller, receiver: Receiver, *types: str) -> str:
    """A webhook of the caller's to the receiver (which learns its secret); returns its id."""
    created, secret = await office.webhooks.create(
        caller, receiver.url, list(types) or ["message.created"]
    )
    receiver.secret = secret
    return created.id


def log_when(
    office: PostOffice,
    caller: Caller,
    webhook: str,
    done: Callable[[WebhookDelivery], bool],
    count: int = 1,
) -> Callable[[], Awaitable[list[WebhookDelivery] | None]]:
    """A check for `until`: the delivery log, once it holds `count` deliveries, each `done`."""

    async def check() -> list[WebhookDelivery] | None:
        found = await office.webhooks.deliveries(caller, webhook)
        return found if len(found) == count and all(done(d) for d in found) else None

    return check


def delivered(d: WebhookDelivery) -> bool:
    return d.state is HookState.DELIVERED


def tried(attempts: int = 1) -> Callable[[WebhookDelivery], bool]:
    """The log's word that attempt `attempts` was answered (or failed): an attempt counts as
    it starts, before its outcome is recorded."""
    return lambda d: d.attempts == attempts and (d.last_status, d.last_error) != (None, None)


# -- delivering -------------------------------------------------------------------------------


async def test_a_webhook_receives_its_agents_events_signed_with_its_secret(
    office: PostOffice, clock: FakeClock
) -> None:
    alice, bob = await agents(office, "alice", "bob")
    receiver = Receiver()
    async with running(office, receiver):
        webhook = await hook(office, bob, receiver)
        first = await office.mailbox.send(alice, "bob", "plans for friday", subject="hello")
        second = await office.mailbox.send(alice, "bob", "two")
        log = await until(office, log_when(office, bob, webhook, delivered, count=2))
    assert len(receiver.requests) == 2
    assert all(r.signed for r in receiver.requests)
    by_message = {r.payload["message_id"]: r for r in receiver.requests}
    one = by_message[first.id]
    assert one.path == "/hook"
    assert one.headers["x-agentpost-event"] == "message.created"
    assert one.headers["content-type"] == "application/json"
    assert one.headers["x-agentpost-signature"].startswith(f"t={int(clock())},v1=")
    assert one.payload["delivery_id"] == one.headers["x-agentpost-delivery"]
    assert {k: one.payload[k] for k in ("webhook_id", "agent", "type", "at")} == {
        "webhook_id": webhook,
        "agent": "bob",
        "type": "message.created",
        "at": clock(),
    }
    assert one.payload["data"]["from"] == "alice"
    assert one.payload["data"]["subject"] == "hello"
    assert b"plans for friday" not in one.body, "the body stays in the inbox"
    assert second.id in by_message
    ids = {r.headers["x-agentpost-delivery"] for r in receiver.requests}
    assert ids == {d.id for d in log}
    assert len(ids) == 2, "one delivery id per event"
    assert all((d.attempts, d.last_status, d.delivered_at) == (1, 200, clock()) for d in log)


async def test_a_webhook_receives_only_the_event_types_it_subscribed_to(
    office: PostOffice,
) -> None:
    alice, bob, _carol = await agents(office, "alice", "bob", "carol")
    receiver = Receiver()
    async with running(office, receiver):
        webhook = await hook(office, bob, receiver, "message.acked")
        await office.mailbox.send(alice, "bob", "bob hears of this, the webhook does not")
        await office.mailbox.send(alice, "carol", "not bob's at all")
        asked = await office.mailbox.send(bob, "alice", "please ack")
        await office.mailbox.inbox(alice)  # message.read: not subscribed either
        await office.mailbox.ack(alice, [asked.id])
        (only,) = await until(office, log_when(office, bob, webhook, delivered))
    assert only.event == "message.acked"
    assert [(r.payload["type"], r.payload["message_id"]) for r in receiver.requests] == [
        ("message.acked", asked.id)
    ]
    assert receiver.requests[0].payload["data"] == {"to": "alice"}


async def test_a_webhook_hears_only_what_happens_after_it_is_created(office: PostOffice) -> None:
    alice, bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "before the webhook")
    receiver = Receiver()
    async with running(office, receiver):
        webhook = await hook(office, bob, receiver)
        after = await office.mailbox.send(alice, "bob", "after")
        await until(office, log_when(office, bob, webhook, delivered))
    assert [r.payload["message_id"] for r in receiver.requests] == [after.id]


async def test_a_failed_delivery_is_retried_with_the_same_id_until_it_lands(
    office: PostOffice, clock: FakeClock
) -> None:
    alice, bob = await agents(office, "alice", "bob")
    receiver = Receiver(answers=[(500, {})])
    async with running(office, receiver):
        webhook = await hook(office, bob, receiver)
        await office.mailbox.send(alice, "bob", "try again")
        (failed,) = await until(office, log_when(office, bob, webhook, tried()))
        assert (failed.state, failed.last_status, failed.last_error) == (
            HookState.PENDING,
            500,
            "HTTP 500",
        )
        assert failed.next_attempt_at == clock() + 1  # then 2 s, 4 s …
        clock.advance(1)
        (landed,) = await until(office, log_when(office, bob, webhook, delivered))
    assert (landed.id, landed.attempts, landed.last_status, landed.last_error) == (
        failed.id,
        2,
        200,
        None,
    )
    first, second = receiver.requests
    assert first.headers["x-agentpost-delivery"] == second.headers["x-agentpost-delivery"]
    assert first.headers["x-agentpost-delivery"] == failed.id
    assert first.body == second.body
    assert first.signed
    assert second.signed


async def test_a_delivery_fails_after_its_last_attempt(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    office = await open_office(webhook_max_attempts=2)
    alice, bob = await agents(office, "alice", "bob")
    receiver = Receiver(answers=[(503, {}), (500, {}), (200, {})])
    async with running(office, receiver):
        webhook = await hook(office, bob, receiver)
        await office.mailbox.send(alice, "bob", "doomed")
        await until(office, log_when(office, bob, webhook, tried()))
        clock.advance(1)
        (gone,) = await until(
            office, log_when(office, bob, webhook, lambda d: d.state is not HookState.PENDING)
        )
    assert (gone.state, gone.attempts, gone.last_status, gone.next_attempt_at) == (
        HookState.FAILED,
        2,
        500,
        None,
    )
    assert len(receiver.requests) == 2


async def test_a_redirect_is_not_followed_and_counts_as_a_failure(
    open_office: OpenOffice,
) -> None:
    office = await open_office(webhook_max_attempts=1)
    alice, bob = await agents(office, "alice", "bob")
    receiver = Receiver()
    async with running(office, receiver):
        receiver.answers = [(307, {"Location": f"http://127.0.0.1:{receiver.port}/elsewhere"})]
        webhook = await hook(office, bob, receiver)
        await office.mailbox.send(alice, "bob", "go away")
        (failed,) = await until(
            office, log_when(office, bob, webhook, lambda d: d.state is HookState.FAILED)
        )
        await anyio.sleep(0.2)  # a followed redirect would arrive now
    assert (failed.last_status, failed.attempts) == (307, 1)
    assert "redirect" in (failed.last_error or "")
    assert [r.path for r in receiver.requests] == ["/hook"]


async def test_an_unreachable_receiver_is_recorded_as_an_error_and_retried(
    office: PostOffice, clock: FakeClock
) -> None:
    alice, bob = await agents(office, "alice", "bob")
    closed = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = closed.extra(SocketAttribute.local_port)
    await closed.aclose()  # nothing listens there now
    receiver = Receiver()
    async with running(office, receiver):
        url = f"http://127.0.0.1:{port}/"
        created, _ = await office.webhooks.create(bob, url, ["message.created"])
        await office.mailbox.send(alice, "bob", "anyone there?")
        (failed,) = await until(office, log_when(office, bob, created.id, tried()))
    assert failed.state is HookState.PENDING
    assert failed.last_status is None
    assert failed.last_error
    assert failed.next_attempt_at == clock() + 1


async def test_receivers_that_never_answer_hold_up_no_other_agents_webhook(
    open_office: OpenOffice,
) -> None:
    office = await open_office(webhook_timeout_s=30)
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    held = anyio.Event()

    async def tarpit(stream: Any) -> None:  # takes the request, never answers
        held.set()
        async with stream:
            await anyio.sleep_forever()

    silent = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = silent.extra(SocketAttribute.local_port)
    receiver = Receiver()
    async with silent, running(office, receiver), anyio.create_task_group() as tg:
        tg.start_soon(silent.serve, tarpit)
        for n in range(MAX_WEBHOOKS):  # bob's every webhook, each its own receiver's way
            await office.webhooks.create(bob, f"http://127.0.0.1:{port}/{n}", ["message.created"])
        webhook = await hook(office, alice, receiver)
        # More deliveries to bob's receivers than the dispatcher takes on at once.
        for _ in range(MAX_IN_FLIGHT // MAX_WEBHOOKS + 1):
            await office.mailbox.send(carol, "bob", "into the void")
        with anyio.fail_after(10):
            await held.wait()
        await office.mailbox.send(carol, "alice", "meanwhile")
        with anyio.fail_after(5):  # not after bob's receivers time out, 30 s from now
            await until(office, log_when(office, alice, webhook, delivered))
        tg.cancel_scope.cancel()
    assert [r.payload["data"]["from"] for r in receiver.requests] == ["carol"]


def resolving(
    monkeypatch: pytest.MonkeyPatch,
    names: dict[str, list[str]],
    slow: Callable[[str], None] = lambda host: None,
) -> None:
    """The dispatcher's name lookups answer `names` (after `slow(host)`, on their thread);
    other names go to the real resolver. No nameserver here answers for test names."""
    real = outbound.lookup

    def lookup(host: str, port: int) -> list[str]:
        slow(host)
        return names[host] if host in names else real(host, port)

    monkeypatch.setattr(outbound, "lookup", lookup)


async def test_one_agents_slow_nameserver_holds_up_no_other_agents_webhook(
    office: PostOffice, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight lookups stuck at once (one agent's share of the deliveries in flight) would fill
    the event loop's few default executor threads."""
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    answer = threading.Event()

    def stuck(host: str) -> None:
        if host == "slow.test":
            answer.wait(20)

    resolving(monkeypatch, {"slow.test": ["127.0.0.1"], "fast.test": ["127.0.0.1"]}, stuck)
    receiver = Receiver()
    try:
        async with running(office, receiver):
            for n in range(8):
                await office.webhooks.create(bob, f"http://slow.test:9/{n}", ["message.created"])
            created, receiver.secret = await office.webhooks.create(
                carol, f"http://fast.test:{receiver.port}/hook", ["message.created"]
            )
            await office.mailbox.send(alice, "bob", "stuck in a lookup")
            await office.mailbox.send(alice, "carol", "not behind it")
            await until(office, log_when(office, carol, created.id, delivered))
    finally:
        answer.set()
    assert [r.path for r in receiver.requests] == ["/hook"]


async def test_a_name_is_resolved_checked_and_the_checked_address_is_the_one_used(
    office: PostOffice, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice, bob = await agents(office, "alice", "bob")
    resolving(monkeypatch, {"receiver.test": ["127.0.0.1"]})
    receiver = Receiver()
    async with running(office, receiver):
        created, receiver.secret = await office.webhooks.create(
            bob, f"http://receiver.test:{receiver.port}/named", ["message.created"]
        )
        await office.mailbox.send(alice, "bob", "by name")
        await until(office, log_when(office, bob, created.id, delivered))
    (request,) = receiver.requests
    assert request.headers["host"] == f"receiver.test:{receiver.port}"
    assert request.path == "/named"
    assert request.signed


async def test_a_name_whose_first_address_refuses_is_delivered_at_its_next(
    office: PostOffice, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`localhost` is often ::1 first, then 127.0.0.1, and a receiver may listen on one only."""
    alice, bob = await agents(office, "alice", "bob")
    resolving(monkeypatch, {"receiver.test": ["::1", "127.0.0.1"]})
    receiver = Receiver()  # on 127.0.0.1 only: nothing listens at [::1] on its port
    async with running(office, receiver):
        created, receiver.secret = await office.webhooks.create(
            bob, f"http://receiver.test:{receiver.port}/named", ["message.created"]
        )
        await office.mailbox.send(alice, "bob", "by name")
        (done,) = await until(office, log_when(office, bob, created.id, tried()))
    assert (done.state, done.last_error) == (HookState.DELIVERED, None)
    (request,) = receiver.requests
    assert request.headers["host"] == f"receiver.test:{receiver.port}"
    assert request.signed


async def test_a_name_that_resolves_to_a_forbidden_address_is_refused_at_delivery(
    open_office: OpenOffice, monkeypatch: pytest.MonkeyPatch
) -> None:
    office = await open_office(webhook_max_attempts=1)
    alice, bob = await agents(office, "alice", "bob")
    # A name that points at the metadata service.
    resolving(monkeypatch, {"sneaky.test": ["169.254.169.254"]})
    receiver = Receiver()
    async with running(office, receiver):
        created, _ = await office.webhooks.create(
            bob, "http://sneaky.test/hook", ["message.created"]
        )
        await office.mailbox.send(alice, "bob", "for the metadata service?")
        (refused,) = await until(office, log_when(office, bob, created.id, tried()))
    assert refused.state is HookState.FAILED
    assert "metadata" in (refused.last_error or "")
    assert receiver.requests == []


async def test_a_stored_name_no_resolver_takes_fails_its_delivery_and_others_go_on(
    open_office: OpenOffice,
) -> None:
    """A name with a label over 63 characters makes the resolver raise UnicodeError, not a
    lookup failure: that delivery fails, and the dispatcher (and `serve` with it) goes on.
    The webhook is stored as one made before such names were refused."""
    office = await open_office(webhook_max_attempts=1)
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    bad = f"http://{'a' * 64}.example/hook"

    def made_before(conn: Any) -> None:
        webhook_rows.insert_webhook(
            conn,
            id="wh_old",
            agent="bob",
            url=bad,
            events=["message.created"],
            secret="whsec_old",
            now=office.store.clock(),
            key_id=None,
        )

    await office.store.write(made_before)
    receiver = Receiver()
    async with running(office, receiver):
        webhook = await hook(office, carol, receiver)
        await office.mailbox.send(alice, "bob", "to a name nobody resolves")
        (failed,) = await until(office, log_when(office, bob, "wh_old", tried()))
        await office.mailbox.send(alice, "carol", "still delivered")
        await until(office, log_when(office, carol, webhook, delivered))
    assert failed.state is HookState.FAILED
    assert failed.last_error


async def test_a_delivery_that_raises_unforeseen_fails_alone_and_the_dispatcher_goes_on(
    open_office: OpenOffice, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever one receiver's address makes the outward path raise (as a resolver's
    UnicodeError did), it is that delivery's failed attempt, never the end of `serve`."""
    office = await open_office(webhook_max_attempts=1)
    alice, bob, carol = await agents(office, "alice", "bob", "carol")

    def unforeseen(host: str) -> None:
        if host == "unforeseen.example":
            raise RuntimeError("a resolver nobody expected")

    resolving(monkeypatch, {}, unforeseen)
    receiver = Receiver()
    async with running(office, receiver):
        strange = await office.webhooks.create(
            bob, "http://unforeseen.example/hook", ["message.created"]
        )
        webhook = await hook(office, carol, receiver)
        await office.mailbox.send(alice, "bob", "to a strange receiver")
        (failed,) = await until(office, log_when(office, bob, strange[0].id, tried()))
        await office.mailbox.send(alice, "carol", "still delivered")
        await until(office, log_when(office, carol, webhook, delivered))
    assert failed.state is HookState.FAILED
    assert failed.last_error == "internal error: RuntimeError"


async def test_a_webhook_made_by_another_office_hears_mail_sent_here(
    open_office: OpenOffice,
) -> None:
    """The dispatcher acts only on news of agents with webhooks, and learns of one made by
    another process (replica) from that process's commit on SQLite, and on PostgreSQL (where
    its commit concerns nobody's news) by reading again who has webhooks, every second."""
    office = await open_office()
    other = await open_office()  # another process on the same database
    alice, bob = await agents(office, "alice", "bob")
    receiver = Receiver()
    async with running(office, receiver):
        await office.mailbox.send(alice, "bob", "before the webhook")
        webhook = await hook(other, bob, receiver)
        sent = await office.mailbox.send(alice, "bob", "after it")
        await until(office, log_when(office, bob, webhook, delivered))
    assert [r.payload["message_id"] for r in receiver.requests] == [sent.id]


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_a_webhook_made_in_the_same_commit_as_its_agents_news_hears_it(
    office: PostOffice,
) -> None:
    """The writer batches the webhook's creation with a send to its agent: the commit wakes
    the dispatcher before the creation has returned, and it must still deliver.

    SQLite's writer only: on PostgreSQL the two are transactions of their own, and the send
    may commit before the webhook reads where it starts, as the send is then before it."""
    alice, bob = await agents(office, "alice", "bob")
    receiver = Receiver()
    async with running(office, receiver):
        await anyio.sleep(0.3)  # the dispatcher's first round is done: it waits for news
        held = asyncio.ensure_future(office.store.write(lambda conn: time.sleep(0.3)))
        await anyio.sleep(0.05)  # the writer is busy: the next two jobs queue up together
        creating = asyncio.ensure_future(
            office.webhooks.create(bob, receiver.url, ["message.created"])
        )
        await anyio.sleep(0.01)
        sending = asyncio.ensure_future(office.mailbox.send(alice, "bob", "at once"))
        await held
        created, receiver.secret = await creating
        sent = await sending
        await until(office, log_when(office, bob, created.id, delivered))
    assert [r.payload["message_id"] for r in receiver.requests] == [sent.id]


async def test_news_of_agents_without_webhooks_does_not_hide_another_offices_webhook(
    open_office: OpenOffice,
) -> None:
    """On PostgreSQL another process's commits are not heard; a steady stream of local mail
    between others must not keep the dispatcher from learning of the new webhook."""
    office = await open_office()
    other = await open_office()
    alice, bob, carol, _dave = await agents(office, "alice", "bob", "carol", "dave")
    receiver = Receiver()
    async with running(office, receiver), anyio.create_task_group() as noise:
        await anyio.sleep(0.3)
        webhook = await hook(other, bob, receiver)

        async def chatter() -> None:
            while True:
                await office.mailbox.send(carol, "dave", "noise")
                await anyio.sleep(0.2)

        noise.start_soon(chatter)
        sent = await office.mailbox.send(alice, "bob", "for bob")
        await until(office, log_when(office, bob, webhook, delivered))
        noise.cancel_scope.cancel()
    assert [r.payload["message_id"] for r in receiver.requests] == [sent.id]


async def test_a_deleted_webhook_receives_nothing_more_and_its_pending_deliveries_fail(
    office: PostOffice, clock: FakeClock
) -> None:
    alice, bob = await agents(office, "alice", "bob")
    receiver = Receiver(answers=[(500, {})])
    async with running(office, receiver):
        webhook = await hook(office, bob, receiver)
        await office.mailbox.send(alice, "bob", "fails once")
        (pending,) = await until(office, log_when(office, bob, webhook, tried()))
        await office.webhooks.delete(bob, webhook)
        clock.advance(60)
        await office.mailbox.send(alice, "bob", "after the delete")
        await anyio.sleep(0.3)
    assert len(receiver.requests) == 1
    assert await office.webhooks.list(bob) == []
    # The log of a deleted webhook is no one's to read any more; the rows stay until retention.
    failed = await office.store.read(lambda conn: webhook_rows.deliveries_of(conn, webhook, 10))
    assert [(d.id, d.state, d.last_error) for d in failed] == [
        (pending.id, HookState.FAILED, "webhook deleted")
    ]


async def test_a_disabled_agents_webhook_is_told_nothing_more_and_its_pending_deliveries_fail(
    office: PostOffice, clock: FakeClock
) -> None:
    admin = await owner(office)
    alice, bob = await agents(office, "alice", "bob")
    receiver = Receiver(answers=[(500, {})])
    async with running(office, receiver):
        webhook = await hook(office, bob, receiver, "message.created", "message.read")
        await office.mailbox.send(alice, "bob", "fails once")
        await office.mailbox.send(bob, "alice", "read after bob is disabled")
        (pending,) = await until(office, log_when(office, bob, webhook, tried()))
        await office.admin.disable_agent(admin, "bob")
        await office.mailbox.inbox(alice)  # news for bob's log: a read receipt
        clock.advance(60)
        done = await until(
            office, lambda: office.store.read(lambda conn: _all_done(conn, webhook, 2))
        )
        await anyio.sleep(0.3)
    assert len(receiver.requests) == 1
    assert [(d.id, d.event, d.state, d.last_error) for d in done] == [
        (done[0].id, "message.read", HookState.FAILED, "agent disabled"),
        (pending.id, "message.created", HookState.FAILED, "agent disabled"),
    ]


async def test_a_disabled_agents_webhook_is_kept_and_goes_on_once_it_is_enabled_again(
    office: PostOffice,
) -> None:
    """Disabling is not revoking: the agent's webhooks stay, silent while it is disabled."""
    admin = await owner(office)
    alice, bob = await agents(office, "alice", "bob")
    receiver = Receiver()
    async with running(office, receiver):
        webhook = await hook(office, bob, receiver)
        await office.admin.disable_agent(admin, "bob")
        await office.admin.enable_agent(admin, "bob")
        sent = await office.mailbox.send(alice, "bob", "after bob is back")
        await until(office, log_when(office, bob, webhook, delivered))
    assert [w.id for w in await office.webhooks.list(bob)] == [webhook]
    assert [r.payload["message_id"] for r in receiver.requests] == [sent.id]


async def test_revoking_the_key_that_made_a_webhook_deletes_it_and_fails_what_it_had_pending(
    office: PostOffice, clock: FakeClock
) -> None:
    """A leaked key, revoked: the webhook it made would go on sending the agent's mail."""
    admin = await owner(office)
    alice, _ = await keyed(office, "alice")
    bob, _ = await keyed(office, "bob")
    second = await office.keys.issue(admin, "bob", label="laptop")
    bob_elsewhere = await office.keys.authenticate(second.key, ip=ADDRESS)
    receiver = Receiver(answers=[(500, {})])
    kept_receiver = Receiver()
    async with running(office, receiver), listening(kept_receiver):
        leaked = await hook(office, bob, receiver)
        kept = await hook(office, bob_elsewhere, kept_receiver)
        await office.mailbox.send(alice, "bob", "fails once")
        (pending,) = await until(office, log_when(office, bob, leaked, tried()))
        assert bob.key_id is not None
        await office.keys.revoke(admin, bob.key_id)
        clock.advance(60)
        await office.mailbox.send(alice, "bob", "after the revocation")
        await until(
            office,
            log_when(office, bob_elsewhere, kept, lambda d: d.state is HookState.DELIVERED, 2),
        )
    assert len(receiver.requests) == 1
    assert [w.id for w in await office.webhooks.list(bob_elsewhere)] == [kept]
    failed = await office.store.read(lambda conn: webhook_rows.deliveries_of(conn, leaked, 10))
    assert [(d.id, d.state, d.last_error) for d in failed] == [
        (pending.id, HookState.FAILED, "webhook deleted")
    ]
    [revoked] = await office.admin.audit_log(admin, action="key.revoked")
    assert revoked.detail == {"agent": "bob", "webhooks_deleted": 1}


async def test_a_webhook_asked_for_with_a_key_revoked_meanwhile_is_not_made(
    office: PostOffice,
) -> None:
    """Authenticated, then revoked before its transaction: the revocation found no webhook
    to delete, so none may come after it."""
    admin = await owner(office)
    bob, _ = await keyed(office, "bob")
    assert bob.key_id is not None
    await office.keys.revoke(admin, bob.key_id)
    await refused_without_change(
        office,
        ErrorCode.UNAUTHENTICATED,
        office.webhooks.create(bob, "http://127.0.0.1:9/late", ["message.created"]),
    )


async def test_a_webhook_to_loopback_asked_for_by_an_agent_unvouched_meanwhile_is_not_made(
    office: PostOffice,
) -> None:
    """Authenticated while vouched for, then unvouched before its transaction: a stranger's
    webhook may reach public addresses only."""
    admin = await owner(office)
    bob, _ = await keyed(office, "bob")
    await office.admin.unvouch(admin, "bob")
    refused = await refused_without_change(
        office,
        ErrorCode.INVALID_ARGUMENT,
        office.webhooks.create(bob, "http://127.0.0.1:9/late", ["message.created"]),
    )
    assert "public addresses only" in refused.message


def _all_done(conn: Any, webhook: str, count: int) -> list[WebhookDelivery] | None:
    """A webhook's deliveries (even a deleted one's), once there are `count`, none pending."""
    found = webhook_rows.deliveries_of(conn, webhook, 10)
    done = len(found) == count and all(d.state is not HookState.PENDING for d in found)
    return found if done else None


# -- creating, listing, deleting ----------------------------------------------------------------


async def test_a_webhook_is_listed_without_its_secret_which_is_shown_once(
    office: PostOffice, clock: FakeClock
) -> None:
    (bob,) = await agents(office, "bob")
    created, secret = await office.webhooks.create(
        bob, " https://hooks.example.com/in ", ["message.read", "message.created", "message.read"]
    )
    assert secret.startswith("whsec_")
    assert len(secret) > 40
    assert created.url == "https://hooks.example.com/in"
    assert created.events == ["message.read", "message.created"]
    assert created.created_at == clock()
    assert created.id.startswith("wh_")
    assert await office.webhooks.list(bob) == [created]
    assert secret not in json.dumps([w.to_dict() for w in await office.webhooks.list(bob)])


async def test_another_agent_cannot_see_delete_or_read_the_log_of_your_webhook(
    office: PostOffice,
) -> None:
    bob, mallory = await agents(office, "bob", "mallory")
    created, _ = await office.webhooks.create(bob, "http://127.0.0.1:9/", ["message.created"])
    assert await office.webhooks.list(mallory) == []
    await refused_without_change(
        office, ErrorCode.NOT_FOUND, office.webhooks.delete(mallory, created.id)
    )
    await refused_without_change(
        office, ErrorCode.NOT_FOUND, office.webhooks.deliveries(mallory, created.id)
    )
    assert await office.webhooks.list(bob) == [created]
    await office.webhooks.delete(bob, created.id)
    await refused_without_change(
        office, ErrorCode.NOT_FOUND, office.webhooks.delete(bob, created.id)
    )


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://169.254.1.1:8080/",
        "http://[fe80::1]/",
        "http://[fd00:ec2::254]/",
        "http://[::ffff:169.254.169.254]/",
        # The metadata address in the IPv6 spellings a gateway may route to it.
        "http://[::169.254.169.254]/",  # IPv4-compatible
        "http://[::ffff:0:a9fe:a9fe]/",  # IPv4-translated
        "http://[64:ff9b::a9fe:a9fe]/",  # NAT64
        "http://[64:ff9b:1:a9fe:a9:fe00::]/",  # NAT64 for local use, a /48 prefix
        "http://[64:ff9b:1::a9fe:a9fe]/",  # the same, a /96 prefix
        "http://[2002:a9fe:a9fe::]/",  # 6to4
        "http://[2001:0:4136:e378:8000:63bf:5601:5601]/",  # Teredo, client 169.254.169.254
        "http://[fe80::1%25eth0]/",  # link-local with a zone
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://METADATA.google.internal./",
        "http://2852039166/",
        "http://0xA9FEA9FE/",
        "http://224.0.0.1/",
        "http://[ff02::1]/",
        "http://0.0.0.0:8080/",
        "http://[::]/",
        "http://255.255.255.255/",
    ],
)
async def test_a_link_local_or_metadata_url_is_refused_at_create_and_nothing_stored(
    office: PostOffice, url: str
) -> None:
    (bob,) = await agents(office, "bob")
    create = office.webhooks.create(bob, url, ["message.created"])
    await refused_without_change(office, ErrorCode.INVALID_ARGUMENT, create)


@pytest.mark.parametrize(
    "url", ["ftp://example.com/", "not a url", "http:///no-host", "", "/relative", 42, None]
)
async def test_a_url_that_is_no_http_url_is_refused(office: PostOffice, url: Any) -> None:
    (bob,) = await agents(office, "bob")
    create = office.webhooks.create(bob, url, ["message.created"])
    await refused_without_change(office, ErrorCode.INVALID_ARGUMENT, create)


@pytest.mark.parametrize(
    "url",
    [
        f"http://{'a' * 64}.example/",  # a label over 63 characters
        f"http://{'a.' * 127}example/",  # a name over 253 characters
        "http://a..b/",  # an empty label
        "http://exa mple.com/",
        "http://a%00b/",
        "http://xn--/",  # IDNA labels that decode to nothing, or to what IDNA forbids
        "http://xn--zz.example/",
    ],
)
async def test_a_url_whose_host_is_no_name_a_resolver_takes_is_refused(
    office: PostOffice, url: str
) -> None:
    (bob,) = await agents(office, "bob")
    create = office.webhooks.create(bob, url, ["message.created"])
    await refused_without_change(office, ErrorCode.INVALID_ARGUMENT, create)


@pytest.mark.parametrize(
    "url", ["http://example.com:0/", "http://example.com:-1/", "https://10.1.2.3:65536/"]
)
async def test_a_url_with_a_port_no_connection_can_reach_is_refused(
    office: PostOffice, url: str
) -> None:
    (bob,) = await agents(office, "bob")
    create = office.webhooks.create(bob, url, ["message.created"])
    await refused_without_change(office, ErrorCode.INVALID_ARGUMENT, create)


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost:8080/hook",
        "http://127.0.0.1:9000/",
        "http://[::1]:9000/",
        "http://10.1.2.3/",
        "http://192.168.1.20/in",
        "https://hooks.example.com/in",
        "http://[64:ff9b:1::1.2.3.4]/",  # a public address through a local NAT64
        "http://[2001:db8::1]/",
    ],
)
async def test_loopback_private_and_public_urls_are_allowed(office: PostOffice, url: str) -> None:
    (bob,) = await agents(office, "bob")
    created, _ = await office.webhooks.create(bob, url, ["message.created"])
    assert created.url == url


@pytest.mark.parametrize("events", [[], ["message.deleted"], "message.created", [1], None])
async def test_events_must_be_a_list_of_known_types(office: PostOffice, events: Any) -> None:
    (bob,) = await agents(office, "bob")
    create = office.webhooks.create(bob, "http://127.0.0.1:9/", events)
    await refused_without_change(office, ErrorCode.INVALID_ARGUMENT, create)


async def test_an_agent_has_a_bounded_number_of_webhooks(office: PostOffice) -> None:
    (bob,) = await agents(office, "bob")
    for i in range(MAX_WEBHOOKS):
        await office.webhooks.create(bob, f"http://127.0.0.1:9/{i}", ["message.created"])
    create = office.webhooks.create(bob, "http://127.0.0.1:9/more", ["message.created"])
    await refused_without_change(office, ErrorCode.CONFLICT, create)


async def test_a_new_webhook_forgets_its_agents_deleted_ones_that_delivered_nothing(
    office: PostOffice,
) -> None:
    """The cap counts live webhooks only: without this, making and deleting webhooks in a
    loop would leave a row each time for the whole retention."""
    alice, bob = await agents(office, "alice", "bob")
    receiver = Receiver()
    async with running(office, receiver):
        told = await hook(office, bob, receiver)
        await office.mailbox.send(alice, "bob", "a delivery to keep")
        await until(office, log_when(office, bob, told, delivered))
    await office.webhooks.delete(bob, told)
    for i in range(3):
        made, _ = await office.webhooks.create(bob, f"http://127.0.0.1:9/{i}", ["message.read"])
        await office.webhooks.delete(bob, made.id)
    (kept, _) = await office.webhooks.create(bob, "http://127.0.0.1:9/kept", ["message.read"])
    stored = await office.store.read(
        lambda conn: [row.id for row in conn.execute(select(webhooks.c.id))]
    )
    assert sorted(stored) == sorted([told, kept.id])  # one with a delivery stays


async def test_old_finished_deliveries_go_in_the_sweep(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    office = await open_office(retention_days=1)
    alice, bob = await agents(office, "alice", "bob")
    receiver = Receiver()
    async with running(office, receiver):
        webhook = await hook(office, bob, receiver)
        await office.mailbox.send(alice, "bob", "soon history")
        await until(office, log_when(office, bob, webhook, delivered))
    clock.advance(DAY)
    await office.mailbox.sweep()
    assert len(await office.webhooks.deliveries(bob, webhook)) == 1  # a day: still kept
    clock.advance(1)
    await office.mailbox.sweep()
    assert await office.webhooks.deliveries(bob, webhook) == []


async def test_a_stopped_dispatcher_hands_back_what_it_had_in_flight(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    """Due at once for the next dispatcher, its attempt uncounted; not after its lease."""
    office = await open_office(webhook_timeout_s=30)
    alice, bob = await agents(office, "alice", "bob")
    receiver = Receiver(stalls=1)
    async with running(office, receiver):
        webhook = await hook(office, bob, receiver)
        await office.mailbox.send(alice, "bob", "hold this")
        with anyio.fail_after(10):
            await receiver.received(1)
    [handed_back] = await office.webhooks.deliveries(bob, webhook)
    assert handed_back.state is HookState.PENDING
    assert handed_back.attempts == 0
    assert handed_back.next_attempt_at == clock()


async def test_an_attempt_a_dispatcher_died_in_counts_when_another_delivers(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    """A replica killed mid-POST records nothing, yet its receiver may have had the POST: the
    log said one attempt where the receiver saw two POSTs of one delivery id."""
    office = await open_office(webhook_timeout_s=30)
    alice, bob = await agents(office, "alice", "bob")
    receiver = Receiver()
    async with listening(receiver):
        webhook = await hook(office, bob, receiver)
        await office.mailbox.send(alice, "bob", "lost in flight")
        lease = 60.0
        [taken] = await office.store.write(  # by a dispatcher that dies before it records
            lambda conn: (
                webhook_rows.enqueue(conn, clock(), 10),
                webhook_rows.claim_due(conn, clock(), lease, limit=1),
            )[1]
        )
        [in_flight] = await office.webhooks.deliveries(bob, webhook)
        assert (in_flight.attempts, in_flight.state) == (1, HookState.PENDING)
        clock.advance(lease)
        async with anyio.create_task_group() as tg:  # the next dispatcher
            tg.start_soon(office.webhooks.run_dispatcher)
            (landed,) = await until(office, log_when(office, bob, webhook, delivered))
            tg.cancel_scope.cancel()
    assert (landed.id, landed.attempts) == (taken.id, 2)


async def test_making_and_deleting_a_webhook_is_audited_with_where_it_posts(
    open_office: OpenOffice,
) -> None:
    """A webhook sends an agent's mail out of the post office: a leaked key's way out, so
    the owner's audit log shows who pointed one where, from which address."""
    office = await open_office()
    bob, _key = await keyed(office, "bob")
    # The path and query often hold the receiver's own secret: the audit keeps neither.
    made, _secret = await office.webhooks.create(
        bob, "https://who:pw@hooks.example:8443/T0/B1/s3cret?token=t", ["message.created"]
    )
    await office.webhooks.delete(bob, made.id)
    entries = await office.admin.audit_log(await owner(office), actor="bob")
    assert [(e.action, e.target, e.ip, e.detail) for e in entries] == [
        ("webhook.deleted", "bob", ADDRESS, {"webhook": made.id}),
        (
            "webhook.created",
            "bob",
            ADDRESS,
            {
                "webhook": made.id,
                "url": "https://hooks.example:8443",
                "events": ["message.created"],
            },
        ),
    ]


async def test_making_and_deleting_webhooks_counts_against_the_send_rate_as_each_is_audited(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    """Each creation and deletion writes an audit row, which no sweep purges: counted against
    no rate, an agent that made and deleted webhooks in a loop grew the store without end."""
    clock.now -= clock.now % 60  # every step below falls in one minute's window
    office = await open_office(send_rate_per_minute=3)
    bob, _key = await keyed(office, "bob")
    made, _secret = await office.webhooks.create(
        bob, "https://hooks.example/a", ["message.created"]
    )
    await office.webhooks.delete(bob, made.id)
    await office.mailbox.send(bob, "bob", "one more send")
    err = await refused_without_change(
        office,
        ErrorCode.RATE_LIMITED,
        office.webhooks.create(bob, "https://hooks.example/b", ["message.created"]),
    )
    assert err.retry_after_s is not None
    clock.advance(60)
    made, _secret = await office.webhooks.create(
        bob, "https://hooks.example/c", ["message.created"]
    )
    await office.webhooks.delete(bob, made.id)
    await office.webhooks.create(bob, "https://hooks.example/d", ["message.created"])
    kept = await office.webhooks.list(bob)
    await refused_without_change(
        office, ErrorCode.RATE_LIMITED, office.webhooks.delete(bob, kept[0].id)
    )


async def test_a_disabled_agent_makes_no_webhook_and_is_told_it_is_gone(office: PostOffice) -> None:
    """`gone`, as every other call of a disabled agent is (README, error codes)."""
    (bob,) = await agents(office, "bob")
    await disable_agent(office.store, "bob")
    await refused_without_change(
        office,
        ErrorCode.GONE,
        office.webhooks.create(bob, "http://127.0.0.1:9/", ["message.created"]),
    )
