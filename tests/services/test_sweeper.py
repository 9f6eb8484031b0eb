"""The sweeper: unread mail expires when its TTL falls due, not at the next hourly sweep, whichever
process sent it. These run on the real clock: what is tested is when the sweeper looks."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.models import Caller
from agentpost.services import PostOffice
from agentpost.services.sweeper import Sweeper
from agentpost.store.database import Clock
from backends import OpenOffice

pytestmark = pytest.mark.anyio

TTL_S = 0.3


@pytest.fixture
def clock() -> Clock:
    """The real clock, for the post offices `open_office` opens: what is tested is when the
    sweeper looks."""
    return time.time


@asynccontextmanager
async def sweeping(sweeper: Sweeper) -> AsyncIterator[None]:
    async with anyio.create_task_group() as group:
        group.start_soon(sweeper.run)
        try:
            yield
        finally:
            group.cancel_scope.cancel()


async def alice_and_bob(office: PostOffice) -> Caller:
    """alice, who sends, and bob, who never reads: alice's caller."""
    await office.presence.ensure_agent("bob")
    return await office.presence.ensure_agent("alice")


async def expired_told(office: PostOffice, sender: Caller, within_s: float = 10) -> float:
    """Wait until the sender's log tells of an expiry; when it was told (the event's time)."""
    with anyio.fail_after(within_s):
        while True:
            found = [e for e in await office.events.since(sender, 0) if e.type == "message.expired"]
            if found:
                return found[0].at
            await anyio.sleep(0.02)


async def expiry_is_told_in_time(sending: PostOffice, sweeper: Sweeper) -> None:
    """Mail sent through `sending` with a short TTL, after `sweeper` looked and found nothing
    due: the sender is told it expired as the TTL fell due, not before, not much after."""
    alice = await alice_and_bob(sending)
    async with sweeping(sweeper):
        await anyio.sleep(0.1)
        sent_at = time.time()
        await sending.mailbox.send(alice, "bob", "lunch in 10?", ttl_s=TTL_S)
        told_at = await expired_told(sending, alice)
    assert sent_at + TTL_S <= told_at < sent_at + TTL_S + 5


async def test_unread_mail_expires_when_its_ttl_falls_due(open_office: OpenOffice) -> None:
    office: PostOffice = await open_office()
    # Its next look would be in a minute, its next sweep in an hour: the send wakes it.
    await expiry_is_told_in_time(office, office.sweeper)


async def test_mail_another_process_sent_expires_on_the_sweepers_next_look(
    open_office: OpenOffice,
) -> None:
    sender: PostOffice = await open_office()  # a one-shot command, say: no sweeper runs there
    server: PostOffice = await open_office()
    await expiry_is_told_in_time(sender, Sweeper(server.mailbox, look_every_s=0.5))


async def test_must_read_mail_never_expires(open_office: OpenOffice) -> None:
    office: PostOffice = await open_office()
    alice = await alice_and_bob(office)
    async with sweeping(office.sweeper):
        await office.mailbox.send(alice, "bob", "read this", ttl_s=TTL_S, must_read=True)
        await anyio.sleep(TTL_S * 3)
        assert await office.mailbox.expire_due() is None  # nothing will ever fall due
    assert await office.events.since(alice, 0) == []


async def test_a_request_sent_under_the_default_ttl_expires_on_time(
    open_office: OpenOffice,
) -> None:
    office: PostOffice = await open_office(default_ttl_s=1)
    alice = await alice_and_bob(office)  # bob never answers
    async with sweeping(office.sweeper):
        await anyio.sleep(0.1)
        sent_at = time.time()
        asked = await office.requests.request(alice, "bob", "deploy?", timeout_s=0.1)
        told_at = await expired_told(office, alice)
    assert asked.timed_out
    assert sent_at + 1 <= told_at < sent_at + 1 + 0.5


async def test_mail_falling_due_moments_apart_is_all_expired_on_time(
    open_office: OpenOffice,
) -> None:
    office: PostOffice = await open_office()
    alice = await alice_and_bob(office)
    async with sweeping(Sweeper(office.mailbox, look_every_s=60)):
        # Due a few milliseconds apart, as the sweeper expires one and looks for the next.
        sent = {
            (await office.mailbox.send(alice, "bob", f"#{n}", ttl_s=0.2 + n / 500)).id
            for n in range(40)
        }
        with anyio.fail_after(10):  # a skipped one would wait for the look in a minute
            while True:
                told = {e.message_id for e in await office.events.since(alice, 0)}
                if told == sent:
                    break
                await anyio.sleep(0.05)


async def test_the_sweeper_sleeps_until_the_earliest_mail_falls_due(
    open_office: OpenOffice,
) -> None:
    office: PostOffice = await open_office()
    alice = await alice_and_bob(office)
    await office.mailbox.send(alice, "bob", "later", ttl_s=60)
    async with sweeping(office.sweeper):
        await anyio.sleep(0.1)  # it looked: the next mail falls due in a minute
        soon = await office.mailbox.send(alice, "bob", "sooner", ttl_s=TTL_S)
        await expired_told(office, alice)
        await anyio.sleep(TTL_S)
    expired = [e.message_id for e in await office.events.since(alice, 0)]
    assert expired == [soon.id]  # not the later one, still to fall due


async def test_a_failed_round_is_tried_again_at_the_next_look_not_at_once(
    open_office: OpenOffice, monkeypatch: pytest.MonkeyPatch
) -> None:
    office: PostOffice = await open_office()
    tried: list[float] = []

    async def busy(*, batch: int = 500) -> int:
        tried.append(time.time())
        raise AgentpostError(ErrorCode.UNAVAILABLE, "the database is busy, try again")

    monkeypatch.setattr(office.mailbox, "sweep", busy)
    async with sweeping(Sweeper(office.mailbox, look_every_s=0.5)):
        await anyio.sleep(1.2)
    assert 2 <= len(tried) <= 4  # at 0, 0.5 and 1.0 s: not a loop as fast as it can go


async def test_a_sweeper_that_recovered_warns_again_when_it_fails_again(
    open_office: OpenOffice, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Quiet is for a failure that lasts, not for one that came back after the sweeper had
    worked again: that is news to whoever reads the log."""
    office: PostOffice = await open_office()
    expire_due = office.mailbox.expire_due
    rounds = iter([False, True, False])  # fails, works, fails again
    done = anyio.Event()
    full = f"disk {id(office)} is full"  # a failure of this test's own

    async def flaky() -> float | None:
        works = next(rounds, None)
        if works is None:
            done.set()
        elif not works:
            raise AgentpostError(ErrorCode.UNAVAILABLE, full)
        return await expire_due()

    monkeypatch.setattr(office.mailbox, "expire_due", flaky)
    with caplog.at_level(logging.WARNING, logger="agentpost.services.sweeper"):
        async with sweeping(Sweeper(office.mailbox, look_every_s=0.05)):
            with anyio.fail_after(10):
                await done.wait()
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warned == [f"sweep failed, will retry: unavailable: {full}"] * 2
