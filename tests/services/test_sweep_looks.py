"""The sweeper's frequent looks (mail past its TTL, tasks past their due) read first, and take
the write lock only when there is something to expire or tell: on SQLite a write queues behind
the writer and holds every process's writers off, for a look that most of the time finds
nothing. These run on both databases."""

from __future__ import annotations

import anyio
import pytest

from agentpost.services import PostOffice
from agentpost.services.sweeper import Sweeper
from backends import FakeClock, agents
from services.test_leadership_cost import count_writes
from services.test_sweeper import expired_told, sweeping
from services.test_task_dues import notices

pytestmark = pytest.mark.anyio


async def nothing_due_yet(office: PostOffice, clock: FakeClock) -> tuple[float, float]:
    """Mail and a task that fall due later, and mail and a task whose due passed but that
    need nothing more (read in time; told already): when the mail and the task fall due."""
    alice, bob, boss = await agents(office, "alice", "bob", "boss")
    await office.mailbox.send(alice, "bob", "read in time", ttl_s=30)
    await office.mailbox.inbox(bob)
    await office.tasks.delegate(boss, "bob", "Told already", due=clock.now + 30)
    clock.advance(60)
    assert await office.mailbox.expire_due() is None
    assert await office.tasks.tell_overdue() is None
    await office.mailbox.send(alice, "bob", "falls due later", ttl_s=600)
    await office.tasks.delegate(boss, "bob", "Due later", due=clock.now + 900)
    return clock.now + 600, clock.now + 900


async def test_a_look_with_nothing_due_takes_no_write(
    office: PostOffice, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    expires_at, due = await nothing_due_yet(office, clock)
    writes = count_writes(office, monkeypatch)
    assert await office.mailbox.expire_due() == expires_at
    assert await office.tasks.tell_overdue() == due
    assert writes == []


async def test_the_sweeper_looking_again_and_again_with_nothing_due_takes_no_write(
    office: PostOffice, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    await nothing_due_yet(office, clock)
    writes = count_writes(office, monkeypatch)
    looks: list[int] = []  # at each look, how many writes were taken before it
    expire_due = office.mailbox.expire_due

    async def look() -> float | None:
        looks.append(len(writes))
        return await expire_due()

    monkeypatch.setattr(office.mailbox, "expire_due", look)
    async with sweeping(Sweeper(office.mailbox, tasks=office.tasks, look_every_s=0.01)):
        with anyio.fail_after(10):
            while True:
                if len(looks) >= 5:
                    break
                await anyio.sleep(0.01)
    assert any("sweep" in name for name in writes[: looks[0]])  # the hourly sweep, first
    assert writes[looks[0] :] == []


async def test_mail_and_tasks_that_fell_due_are_still_expired_and_told(
    office: PostOffice, clock: FakeClock
) -> None:
    await nothing_due_yet(office, clock)
    alice, bob, boss = await agents(office, "alice", "bob", "boss")
    sent = await office.mailbox.send(alice, "bob", "never read", ttl_s=5)
    task = await office.tasks.delegate(boss, "bob", "Due soon", due=clock.now + 5)
    clock.advance(10)
    async with sweeping(Sweeper(office.mailbox, tasks=office.tasks, look_every_s=0.01)):
        await expired_told(office, alice)
        with anyio.fail_after(10):
            while True:
                if len(await notices(office, boss)) == 2:  # the one told already, and this one
                    break
                await anyio.sleep(0.01)
    events = await office.events.since(alice, 0)
    assert [e.message_id for e in events if e.type == "message.expired"] == [sent.id]
    inbox = await office.mailbox.inbox(bob, unread_only=False, peek=True, limit=100)
    assert sent.id not in {m.id for m in inbox.messages}  # a tombstone now
    told_of = [(n.data or {}).get("task_id") for n in await notices(office, boss)]
    assert told_of.count(task.id) == 1
