"""The cap on open tasks: an agent has at most `max_open_tasks_per_agent` tasks delegated and
not finished, so delegating alone cannot fill the store; past it, `conflict`, and nothing is
stored or sent."""

from __future__ import annotations

import pytest

from account_helpers import owner
from agentpost.domain.errors import ErrorCode
from agentpost.domain.tasks import TaskStatus
from agentpost.services import PostOffice
from backends import OpenOffice, agents, refused_without_change, session_caller

pytestmark = pytest.mark.anyio


async def test_delegating_past_the_cap_is_a_conflict_that_changes_nothing(
    open_office: OpenOffice,
) -> None:
    office = await open_office(max_open_tasks_per_agent=2)
    boss, worker, other = await agents(office, "boss", "worker", "other")
    await office.tasks.delegate(boss, "worker", "One")
    await office.tasks.delegate(boss, "boss", "A note to self")  # one given oneself counts too
    refused = await refused_without_change(
        office, ErrorCode.CONFLICT, office.tasks.delegate(boss, "worker", "Three")
    )
    assert refused.details == {"limit": 2}
    assert refused.message == (
        "boss may have at most 2 open tasks delegated and has 2; "
        "cancel one, or wait until one is done or failed"
    )
    assert [m.subject for m in (await office.mailbox.inbox(worker)).messages] == ["One"]
    assert len(await office.tasks.tasks(boss, role="created")) == 2
    # The cap is each creator's: the worker's own delegations are not boss's.
    assert (await office.tasks.delegate(worker, "other", "Mine")).status is TaskStatus.OPEN
    assert (await office.tasks.delegate(other, "boss", "Theirs")).status is TaskStatus.OPEN


@pytest.mark.parametrize(
    ("who", "status"),
    [("worker", "done"), ("worker", "failed"), ("boss", "cancelled")],
)
async def test_a_finished_task_makes_room_for_another(
    open_office: OpenOffice, who: str, status: str
) -> None:
    office = await open_office(max_open_tasks_per_agent=1)
    boss, worker = await agents(office, "boss", "worker")
    first = await office.tasks.delegate(boss, "worker", "First")
    await office.tasks.update_task(worker, first.id, "in_progress")  # still open: still counts
    await refused_without_change(
        office, ErrorCode.CONFLICT, office.tasks.delegate(boss, "worker", "Second")
    )
    await office.tasks.update_task(boss if who == "boss" else worker, first.id, status)
    second = await office.tasks.delegate(boss, "worker", "Second")
    assert second.status is TaskStatus.OPEN


async def test_a_non_leader_at_the_cap_hears_it_may_not_delegate_at_all(
    open_office: OpenOffice,
) -> None:
    """Where only the leader delegates, the seat is what stands in the way: making room
    under the cap would not let this agent delegate."""
    office = await open_office(
        delegate_requires_leader=True, auto_lead=False, max_open_tasks_per_agent=1
    )
    lead = await session_caller(office, "lead", project="shop", branch="main")
    dev = await session_caller(office, "dev", project="shop", branch="main")
    await office.leadership.claim(dev)
    await office.tasks.delegate(dev, "lead", "Fix the build")  # its one open task
    await office.leadership.release(dev)
    await office.leadership.claim(lead)
    err = await refused_without_change(
        office, ErrorCode.FORBIDDEN, office.tasks.delegate(dev, "lead", "Review it")
    )
    assert "leader" in err.message


async def test_a_task_withheld_from_its_assignee_counts_as_any_other(
    open_office: OpenOffice,
) -> None:
    """The creator of a task its assignee never sees must not learn of the block by being
    let past the cap."""
    office = await open_office(max_open_tasks_per_agent=1)
    pest, worker = await agents(office, "pest", "worker")
    await office.directory.block(worker, "pest")
    await office.tasks.delegate(pest, "worker", "Do my homework")
    await refused_without_change(
        office, ErrorCode.CONFLICT, office.tasks.delegate(pest, "worker", "And this")
    )


async def test_a_retried_delegation_at_the_cap_answers_with_the_task_it_made(
    open_office: OpenOffice,
) -> None:
    office = await open_office(max_open_tasks_per_agent=1)
    boss, _ = await agents(office, "boss", "worker")
    first = await office.tasks.delegate(boss, "worker", "Fix it", idempotency_key="fix-1")
    again = await office.tasks.delegate(boss, "worker", "Fix it", idempotency_key="fix-1")
    assert again.id == first.id


async def test_the_owner_sets_one_agents_task_cap_and_null_gives_back_the_setting(
    office: PostOffice,
) -> None:
    admin = await owner(office)
    boss, worker = await agents(office, "boss", "worker")
    limits = await office.admin.set_limits(
        admin, "boss", send_rate_per_minute=None, max_unacked=None, max_open_tasks_per_agent=1
    )
    assert limits.max_open_tasks_per_agent == 1
    (usage,) = await office.admin.usage(admin, "boss")
    assert usage.max_open_tasks_per_agent == 1
    await office.tasks.delegate(boss, "worker", "One")
    refused = await refused_without_change(
        office, ErrorCode.CONFLICT, office.tasks.delegate(boss, "worker", "Two")
    )
    assert refused.details == {"limit": 1}
    await office.tasks.delegate(worker, "boss", "One back")
    await office.tasks.delegate(worker, "boss", "Two back")  # the worker keeps the setting's

    restored = await office.admin.set_limits(
        admin, "boss", send_rate_per_minute=None, max_unacked=None
    )
    assert restored.max_open_tasks_per_agent == 200
    await office.tasks.delegate(boss, "worker", "Two")
    await office.admin.set_limits(
        admin, "boss", send_rate_per_minute=None, max_unacked=None, max_open_tasks_per_agent=1
    )
    lowered = await refused_without_change(
        office, ErrorCode.CONFLICT, office.tasks.delegate(boss, "worker", "Three")
    )
    assert "at most 1 open tasks delegated and has 2" in lowered.message


async def test_by_default_an_agent_has_at_most_200_open_tasks_delegated(
    open_office: OpenOffice,
) -> None:
    office = await open_office(send_rate_per_minute=1000)  # the send rate would come first
    boss, _ = await agents(office, "boss", "worker")
    for n in range(200):
        await office.tasks.delegate(boss, "worker", f"Task {n}")
    refused = await refused_without_change(
        office, ErrorCode.CONFLICT, office.tasks.delegate(boss, "worker", "One too many")
    )
    assert refused.details == {"limit": 200}
