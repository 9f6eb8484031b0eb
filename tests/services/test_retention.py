"""Retention: what the hourly sweep forgets besides mail, and what it must keep."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from account_helpers import ADDRESS, keyed_agents, owner
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.models import Caller
from agentpost.services import PostOffice
from agentpost.store.database import Connection
from agentpost.store.schema import leases, task_history
from backends import FakeClock, OpenOffice, agents, session_caller

pytestmark = pytest.mark.anyio

DAY = 86_400.0
UNKNOWN = "ap_" + "x" * 43


async def failed_authentication(office: PostOffice) -> None:
    with pytest.raises(AgentpostError):
        await office.keys.authenticate(UNKNOWN, ip=ADDRESS)


async def audited(office: PostOffice, **options: str) -> list[str]:
    entries = await office.admin.audit_log(await owner(office), limit=500, **options)
    return [e.action for e in entries]


def seats(conn: Connection) -> list[str]:
    query = select(leases.c.name).where(leases.c.name.startswith("leader:"))
    return sorted(conn.execute(query).scalars())


# -- the audit log ----------------------------------------------------------------------------


async def test_the_sweep_purges_audit_rows_older_than_audit_retention_days(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    """Failed authentications, blocks and the rest were kept forever: anyone who can reach
    the service could grow the log without end with wrong keys."""
    office = await open_office(audit_retention_days=2)
    alice, _bob = await keyed_agents(office, "alice", "bob")
    await failed_authentication(office)
    await office.directory.block(alice, "bob")
    clock.advance(DAY)
    await office.directory.unblock(alice, "bob")
    clock.advance(1.5 * DAY)
    await office.mailbox.sweep()
    assert await audited(office, actor="alice") == ["block.removed"]
    assert await audited(office, action="auth.failed") == []


async def test_the_audit_log_is_kept_a_year_by_default(
    office: PostOffice, clock: FakeClock
) -> None:
    """Longer than mail (`retention_days`, 30): who did what, and who failed to get in, is
    worth looking back on after the mail is gone."""
    await failed_authentication(office)
    clock.advance(364 * DAY)
    await office.mailbox.sweep()
    assert await audited(office, action="auth.failed") == ["auth.failed"]
    clock.advance(2 * DAY)
    await office.mailbox.sweep()
    assert await audited(office, action="auth.failed") == []


async def test_a_large_audit_log_is_purged_in_batches_to_the_last_row(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    office = await open_office(audit_retention_days=1)
    for _ in range(5):
        await failed_authentication(office)
    clock.advance(2 * DAY)
    await office.mailbox.sweep(batch=2)
    assert await audited(office, action="auth.failed") == []


# -- tasks --------------------------------------------------------------------------------------


async def task_titles(office: PostOffice, caller: Caller) -> list[str]:
    return sorted(t.title for t in await office.tasks.tasks(caller))


async def test_finished_tasks_go_with_their_history_once_finished_for_retention_days(
    office: PostOffice, clock: FakeClock
) -> None:
    """Tasks and their history were kept forever, finished or not. Finished ones go as
    handled mail does, counted from when they finished; one still open never goes, however
    old, nor one finished lately."""
    boss, worker = await agents(office, "boss", "worker")
    titles = ["done", "failed", "cancelled", "open", "in progress", "done lately"]
    made = {title: await office.tasks.delegate(boss, "worker", title) for title in titles}
    await office.tasks.update_task(worker, made["done"].id, "done", result={"ok": True})
    await office.tasks.update_task(worker, made["failed"].id, "failed")
    await office.tasks.update_task(boss, made["cancelled"].id, "cancelled")
    await office.tasks.update_task(worker, made["in progress"].id, "in_progress")
    clock.advance(31 * DAY)
    await office.tasks.update_task(worker, made["done lately"].id, "done")
    await office.mailbox.sweep()
    assert await task_titles(office, boss) == ["done lately", "in progress", "open"]
    assert await task_titles(office, worker) == ["done lately", "in progress", "open"]
    with pytest.raises(AgentpostError) as gone:
        await office.tasks.task(boss, made["done"].id)
    assert gone.value.code is ErrorCode.NOT_FOUND
    kept = await office.store.read(
        lambda conn: conn.execute(select(task_history.c.task_id).distinct()).scalars().all()
    )
    assert sorted(kept) == sorted(made[t].id for t in ("open", "in progress", "done lately"))
    clock.advance(31 * DAY)
    await office.mailbox.sweep()
    assert await task_titles(office, boss) == ["in progress", "open"]


async def test_old_finished_tasks_are_purged_in_batches_to_the_last(
    office: PostOffice, clock: FakeClock
) -> None:
    boss, worker = await agents(office, "boss", "worker")
    for n in range(5):
        task = await office.tasks.delegate(boss, "worker", f"task {n}")
        await office.tasks.update_task(worker, task.id, "done")
    clock.advance(31 * DAY)
    await office.mailbox.sweep(batch=2)
    assert await task_titles(office, boss) == []


# -- leader seats -------------------------------------------------------------------------------


async def test_a_seat_nobody_took_for_retention_days_is_forgotten_but_its_term_still_grows(
    office: PostOffice, clock: FakeClock
) -> None:
    """Every project name ever claimed kept its seat's row forever. One nobody has held for
    `retention_days` goes; a term is a fencing token, so a later claim still gets a greater
    term than any handed out before, and a seat held all along stays with its holder."""
    alice = await session_caller(office, "alice")
    bob = await session_caller(office, "bob", project="blog")
    await office.leadership.claim(alice)
    await office.leadership.release(alice)
    assert (await office.leadership.claim(alice)).term == 2
    await office.leadership.claim(bob)
    clock.advance(31 * DAY)
    await office.presence.heartbeat(bob.session_id or "")
    await office.mailbox.sweep()
    assert await office.store.read(lambda conn: seats(conn)) == ["leader:blog"]
    assert (await office.leadership.leader(bob)).leader == "bob"
    carol = await session_caller(office, "carol")
    assert (await office.leadership.leader(carol)).term == 0  # as if never taken
    assert (await office.leadership.claim(carol)).term == 3
    await office.leadership.release(carol)
    clock.advance(31 * DAY)  # bob falls silent too
    await office.mailbox.sweep()
    assert await office.store.read(lambda conn: seats(conn)) == []
    dave = await session_caller(office, "dave", project="blog")
    assert (await office.leadership.claim(dave)).term == 4


async def test_a_seat_held_for_weeks_and_just_given_up_is_kept(
    office: PostOffice, clock: FakeClock
) -> None:
    """Nobody has held it for a minute, not for `retention_days`: its term stays."""
    alice = await session_caller(office, "alice")
    await office.leadership.claim(alice)
    clock.advance(31 * DAY)
    await office.presence.heartbeat(alice.session_id or "")
    await office.leadership.release(alice)
    clock.advance(60)
    await office.mailbox.sweep()
    assert await office.store.read(lambda conn: seats(conn)) == ["leader:shop"]
    assert (await office.leadership.leader(alice)).term == 1


async def test_a_sessions_word_to_stand_aside_lives_as_long_as_the_session(
    office: PostOffice, clock: FakeClock
) -> None:
    """Kept in the store, so that every replica keeps it: while the session beats, however
    long, and not for ever after it fell silent."""
    alice = await session_caller(office, "alice")
    await office.leadership.claim(alice)
    await office.leadership.release(alice)

    def words(conn: Connection) -> list[str]:
        query = select(leases.c.name).where(leases.c.name.startswith("aside:"))
        return list(conn.execute(query).scalars())

    assert await office.store.read(words) == [f"aside:{alice.session_id}"]
    clock.advance(31 * DAY)
    await office.presence.heartbeat(alice.session_id or "")
    await office.mailbox.sweep()
    assert await office.store.read(words) == [f"aside:{alice.session_id}"]
    clock.advance(31 * DAY)
    await office.mailbox.sweep()
    assert await office.store.read(words) == []


# -- requests -----------------------------------------------------------------------------------


async def test_a_request_both_sides_handled_goes_with_its_answer_as_mail_does(
    office: PostOffice, clock: FakeClock
) -> None:
    """A request and its answer are messages: handled by both sides, they go with the mail
    (while either is open, both stay: see test_requests)."""
    alice, bob = await agents(office, "alice", "bob")
    asked = await office.requests.request(alice, "bob", "Ship it?", timeout_s=0)
    answer = await office.requests.respond(bob, asked.request_id, "yes")
    await office.mailbox.ack(bob, [asked.request_id])
    await office.mailbox.ack(alice, [answer.id])
    clock.advance(31 * DAY)
    assert await office.mailbox.sweep() == 2
    with pytest.raises(AgentpostError) as gone:
        await office.requests.check_request(alice, asked.request_id)
    assert gone.value.code is ErrorCode.NOT_FOUND
