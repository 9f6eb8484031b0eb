"""Delegated tasks: handed out as a `task` message, moved along the table, every change kept with
its time and note and told to the other side — and every refusal changing nothing."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import update

from account_helpers import self_registered
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.limits import MAX_DATA_DEPTH
from agentpost.domain.models import Kind, Priority
from agentpost.domain.tasks import TaskStatus
from agentpost.services import PostOffice
from agentpost.store import agents as agent_rows
from agentpost.store.schema import tasks
from backends import (
    FakeClock,
    OpenOffice,
    agents,
    disable_agent,
    refused_without_change,
    seat_directly,
    session_caller,
    snapshot,
)

pytestmark = pytest.mark.anyio


async def test_delegate_creates_an_open_task_and_delivers_it_as_a_task_message(
    office: PostOffice, clock: FakeClock
) -> None:
    boss, worker = await agents(office, "boss", "worker")
    task = await office.tasks.delegate(
        boss,
        "worker",
        "Fix the build",
        "CI is red on main",
        priority="urgent",
        data={"pr": 12},
        due=clock.now + 3600,
    )
    assert task.id.startswith("t_")
    assert (task.creator, task.assignee, task.status) == ("boss", "worker", TaskStatus.OPEN)
    assert (task.title, task.detail, task.priority) == (
        "Fix the build",
        "CI is red on main",
        Priority.URGENT,
    )
    assert (task.data, task.due, task.result) == ({"pr": 12}, clock.now + 3600, None)
    [created] = task.history
    assert (created.at, created.actor, created.from_status, created.to_status) == (
        clock.now,
        "boss",
        None,
        TaskStatus.OPEN,
    )

    [message] = (await office.mailbox.inbox(worker)).messages
    assert message.kind is Kind.TASK
    assert (message.sender, message.subject, message.body) == (
        "boss",
        "Fix the build",
        "CI is red on main",
    )
    assert message.priority is Priority.URGENT
    assert message.must_read  # never expires unread, whatever the default TTL
    assert message.data["task_id"] == task.id
    assert message.thread_id == task.thread_id == message.id


async def test_the_assignee_moves_the_task_and_the_creator_is_told_each_time_in_its_thread(
    office: PostOffice, clock: FakeClock
) -> None:
    boss, worker = await agents(office, "boss", "worker")
    task = await office.tasks.delegate(boss, "worker", "Fix the build")
    await office.mailbox.inbox(worker)

    clock.advance(10)
    await office.tasks.update_task(worker, task.id, "accepted", note="on it")
    clock.advance(10)
    await office.tasks.update_task(worker, task.id, "in_progress")
    clock.advance(10)
    done = await office.tasks.update_task(
        worker, task.id, "done", note="green again", result={"commit": "abc123"}
    )

    assert done.status is TaskStatus.DONE
    assert done.result == {"commit": "abc123"}
    assert done.updated_at == clock.now
    assert [(c.actor, c.from_status, c.to_status, c.note) for c in done.history] == [
        ("boss", None, TaskStatus.OPEN, ""),
        ("worker", TaskStatus.OPEN, TaskStatus.ACCEPTED, "on it"),
        ("worker", TaskStatus.ACCEPTED, TaskStatus.IN_PROGRESS, ""),
        ("worker", TaskStatus.IN_PROGRESS, TaskStatus.DONE, "green again"),
    ]
    assert [c.at for c in done.history] == [
        clock.now - 30,
        clock.now - 20,
        clock.now - 10,
        clock.now,
    ]

    told = (await office.mailbox.inbox(boss)).messages
    assert [m.data["status"] for m in told] == ["accepted", "in_progress", "done"]
    assert all(m.kind is Kind.TASK and m.sender == "worker" for m in told)
    assert {m.thread_id for m in told} == {task.thread_id}
    assert "on it" in told[0].body
    assert told[2].data["result"] == {"commit": "abc123"}
    assert await office.tasks.task(boss, task.id) == done
    assert await office.tasks.task(worker, task.id) == done


async def test_the_creator_cancels_and_the_assignee_is_told(office: PostOffice) -> None:
    boss, worker = await agents(office, "boss", "worker")
    task = await office.tasks.delegate(boss, "worker", "Fix the build")
    await office.mailbox.inbox(worker)
    cancelled = await office.tasks.update_task(boss, task.id, "cancelled", note="not needed")
    assert cancelled.status is TaskStatus.CANCELLED
    [told] = (await office.mailbox.inbox(worker)).messages
    assert (told.kind, told.sender, told.thread_id) == (Kind.TASK, "boss", task.thread_id)
    assert told.data["status"] == "cancelled"


async def test_a_title_stored_under_an_older_one_line_rule_still_moves(
    office: PostOffice,
) -> None:
    """A break the rule now refuses (`\\u2028`) must not hold the task in its status: the
    notice's subject takes it as a space."""
    boss, worker = await agents(office, "boss", "worker")
    task = await office.tasks.delegate(boss, "worker", "Fix the build")
    await office.store.write(
        lambda conn: conn.execute(
            update(tasks).where(tasks.c.id == task.id).values(title="Fix\u2028the build")
        )
    )
    await office.mailbox.inbox(worker)
    await office.tasks.update_task(worker, task.id, "accepted")
    [told] = (await office.mailbox.inbox(boss)).messages
    assert told.subject == "[accepted] Fix the build"


async def test_cancel_by_assignee_is_forbidden(office: PostOffice) -> None:
    boss, worker = await agents(office, "boss", "worker")
    task = await office.tasks.delegate(boss, "worker", "Fix the build")
    await refused_without_change(
        office, ErrorCode.FORBIDDEN, office.tasks.update_task(worker, task.id, "cancelled")
    )


async def test_done_by_the_creator_is_forbidden(office: PostOffice) -> None:
    boss, _ = await agents(office, "boss", "worker")
    task = await office.tasks.delegate(boss, "worker", "Fix the build")
    await refused_without_change(
        office, ErrorCode.FORBIDDEN, office.tasks.update_task(boss, task.id, "done")
    )


async def test_a_stranger_may_neither_move_nor_read_a_task_nor_learn_it_is_there(
    office: PostOffice,
) -> None:
    boss, _, stranger = await agents(office, "boss", "worker", "stranger")
    task = await office.tasks.delegate(boss, "worker", "Fix the build")
    for status in ("accepted", "cancelled", "done"):
        await refused_without_change(
            office, ErrorCode.NOT_FOUND, office.tasks.update_task(stranger, task.id, status)
        )
    await refused_without_change(office, ErrorCode.NOT_FOUND, office.tasks.task(stranger, task.id))
    await refused_without_change(
        office, ErrorCode.NOT_FOUND, office.tasks.tasks(stranger, before=task.id)
    )
    assert await office.tasks.tasks(stranger) == []


async def test_a_finished_task_moves_no_more(office: PostOffice) -> None:
    boss, worker = await agents(office, "boss", "worker")
    task = await office.tasks.delegate(boss, "worker", "Fix the build")
    await office.tasks.update_task(worker, task.id, "failed", note="cannot reproduce")
    for who, status in ((worker, "in_progress"), (worker, "done"), (boss, "cancelled")):
        await refused_without_change(
            office, ErrorCode.CONFLICT, office.tasks.update_task(who, task.id, status)
        )


async def test_bad_input_is_refused_and_changes_nothing(office: PostOffice) -> None:
    boss, worker = await agents(office, "boss", "worker")
    task = await office.tasks.delegate(boss, "worker", "Fix the build")
    calls = [
        (ErrorCode.INVALID_ARGUMENT, office.tasks.delegate(boss, "worker", "  ")),
        (ErrorCode.INVALID_ARGUMENT, office.tasks.delegate(boss, "worker", "two\nlines")),
        (ErrorCode.INVALID_ARGUMENT, office.tasks.delegate(boss, "worker", "t", priority="high")),
        (ErrorCode.INVALID_ARGUMENT, office.tasks.delegate(boss, "#general", "t")),
        (ErrorCode.INVALID_ARGUMENT, office.tasks.delegate(boss, "worker", "t", due=float("nan"))),
        (ErrorCode.UNKNOWN_RECIPIENT, office.tasks.delegate(boss, "nobody", "t")),
        (ErrorCode.INVALID_ARGUMENT, office.tasks.update_task(worker, task.id, "finished")),
        (ErrorCode.NOT_FOUND, office.tasks.update_task(worker, "t_nope", "done")),
        (ErrorCode.NOT_FOUND, office.tasks.task(worker, "t_nope")),
        (ErrorCode.INVALID_ARGUMENT, office.tasks.tasks(worker, role="mine")),
        (ErrorCode.INVALID_ARGUMENT, office.tasks.tasks(worker, status="finished")),
    ]
    for code, call in calls:
        await refused_without_change(office, code, call)


async def test_a_refused_title_is_named_title(office: PostOffice) -> None:
    """A title becomes its message's subject, but the caller sent no `subject`."""
    boss, _ = await agents(office, "boss", "worker")
    too_long = "x" * (office.settings.max_subject_chars + 1)
    for title, start in [("two\nlines", "title must be one line"), (too_long, "title is")]:
        with pytest.raises(AgentpostError) as refused:
            await office.tasks.delegate(boss, "worker", title)
        assert refused.value.message.startswith(start), refused.value.message


async def test_a_refused_result_is_named_result(office: PostOffice) -> None:
    """A result is checked as data is, but the caller sent no `data`: told "data is too large"
    it would look for a field it never gave."""
    boss, worker = await agents(office, "boss", "worker")
    task = await office.tasks.delegate(boss, "worker", "Report")
    too_deep: object = "bottom"
    for _ in range(MAX_DATA_DEPTH + 1):
        too_deep = [too_deep]
    too_large = "r" * office.settings.limits.max_data_bytes
    for result, code, start in [
        (too_large, ErrorCode.TOO_LARGE, "result is"),
        (too_deep, ErrorCode.INVALID_ARGUMENT, "result nests"),
        ({1j}, ErrorCode.INVALID_ARGUMENT, "result must be JSON"),
    ]:
        call = office.tasks.update_task(worker, task.id, "done", result=result)
        refused = await refused_without_change(office, code, call)
        assert refused.message.startswith(start), refused.message


async def test_tasks_lists_the_callers_tasks_by_role_and_status_newest_first(
    office: PostOffice, clock: FakeClock
) -> None:
    boss, worker, other = await agents(office, "boss", "worker", "other")
    first = await office.tasks.delegate(boss, "worker", "first")
    clock.advance(1)
    second = await office.tasks.delegate(boss, "worker", "second")
    clock.advance(1)
    upward = await office.tasks.delegate(worker, "boss", "upward")
    clock.advance(1)
    await office.tasks.delegate(boss, "other", "elsewhere")
    await office.tasks.update_task(worker, first.id, "in_progress")

    def titles(found: list[object]) -> list[str]:
        return [t.title for t in found]  # type: ignore[attr-defined]

    assert titles(await office.tasks.tasks(worker, role="assigned")) == ["second", "first"]
    assert titles(await office.tasks.tasks(worker, role="created")) == ["upward"]
    assert titles(await office.tasks.tasks(worker)) == ["upward", "second", "first"]
    assert titles(await office.tasks.tasks(worker, status="open")) == ["upward", "second"]
    assert titles(await office.tasks.tasks(worker, role="assigned", status="in_progress")) == [
        "first"
    ]
    assert [t.id for t in await office.tasks.tasks(boss, role="assigned")] == [upward.id]
    assert second.id in [t.id for t in await office.tasks.tasks(boss, role="created")]
    assert titles(await office.tasks.tasks(other)) == ["elsewhere"]


async def test_tasks_pages_back_past_any_page_with_before(
    office: PostOffice, clock: FakeClock
) -> None:
    boss, worker, other = await agents(office, "boss", "worker", "other")
    made = []
    for n in range(5):
        made.append(await office.tasks.delegate(boss, "worker", f"task {n}"))
        clock.advance(1)
    elsewhere = await office.tasks.delegate(boss, "other", "elsewhere")
    pages, before = [], None
    while True:
        page = await office.tasks.tasks(worker, role="assigned", limit=2, before=before)
        if not page:
            break
        pages.append([t.title for t in page])
        before = page[-1].id
    assert pages == [["task 4", "task 3"], ["task 2", "task 1"], ["task 0"]]
    older = await office.tasks.tasks(boss, status="open", limit=500, before=made[2].id)
    assert [t.title for t in older] == ["task 1", "task 0"]
    for stranger_or_none in (elsewhere.id, "t_nope"):
        await refused_without_change(
            office,
            ErrorCode.NOT_FOUND,
            office.tasks.tasks(worker, before=stranger_or_none),
        )
    await refused_without_change(
        office,
        ErrorCode.INVALID_ARGUMENT,
        office.tasks.tasks(worker, before=7),  # type: ignore[arg-type]
    )
    assert [t.title for t in await office.tasks.tasks(other, before=elsewhere.id)] == []


async def test_a_task_whose_message_is_refused_is_not_stored(open_office: OpenOffice) -> None:
    office = await open_office(max_unacked=1)
    boss, _ = await agents(office, "boss", "worker")
    await office.mailbox.send(boss, "worker", "fills the inbox")
    await refused_without_change(
        office, ErrorCode.INBOX_FULL, office.tasks.delegate(boss, "worker", "Fix the build")
    )
    assert await office.tasks.tasks(boss) == []


async def test_the_assignee_finishes_a_task_whose_creator_was_disabled_meanwhile(
    office: PostOffice,
) -> None:
    boss, worker = await agents(office, "boss", "worker")
    task = await office.tasks.delegate(boss, "worker", "Fix the build")
    await disable_agent(office.store, "boss")
    done = await office.tasks.update_task(worker, task.id, "done", note="green again")
    assert done.status is TaskStatus.DONE
    assert (await office.tasks.task(worker, task.id)).status is TaskStatus.DONE
    [notice] = await office.history.sent(worker)  # kept in the thread
    assert (notice.message.thread_id, notice.message.data["status"]) == (task.thread_id, "done")
    await office.store.write(lambda conn: agent_rows.update_agent(conn, "boss", disabled_at=None))
    assert (await office.mailbox.inbox(boss)).messages == []  # passed over while disabled


async def test_the_assignee_finishes_a_task_while_the_creators_inbox_is_full(
    open_office: OpenOffice,
) -> None:
    office = await open_office(max_unacked=2)
    boss, worker = await agents(office, "boss", "worker")
    task = await office.tasks.delegate(boss, "worker", "Fix the build")
    await office.mailbox.send(worker, "boss", "one")
    await office.mailbox.send(worker, "boss", "two")
    done = await office.tasks.update_task(worker, task.id, "done")
    assert done.status is TaskStatus.DONE
    told = (await office.mailbox.inbox(boss)).messages
    assert [m.body for m in told] == ["one", "two"]  # the notice passed over the full inbox
    # An ordinary send still meets the full inbox.
    await refused_without_change(
        office, ErrorCode.INBOX_FULL, office.mailbox.send(worker, "boss", "three")
    )


async def test_the_assignee_finishes_a_task_while_over_its_send_rate(
    open_office: OpenOffice,
) -> None:
    office = await open_office(send_rate_per_minute=1)
    boss, worker = await agents(office, "boss", "worker")
    task = await office.tasks.delegate(boss, "worker", "Fix the build")
    await office.mailbox.send(worker, "boss", "uses up the minute")
    await refused_without_change(
        office, ErrorCode.RATE_LIMITED, office.mailbox.send(worker, "boss", "one more")
    )
    done = await office.tasks.update_task(worker, task.id, "done")
    assert done.status is TaskStatus.DONE
    told = (await office.mailbox.inbox(boss)).messages
    assert [m.data["status"] for m in told if m.kind is Kind.TASK] == ["done"]


async def test_the_creator_cancels_a_task_whose_assignee_was_disabled(office: PostOffice) -> None:
    boss, _ = await agents(office, "boss", "worker")
    task = await office.tasks.delegate(boss, "worker", "Fix the build")
    await disable_agent(office.store, "worker")
    cancelled = await office.tasks.update_task(boss, task.id, "cancelled")
    assert cancelled.status is TaskStatus.CANCELLED


async def test_with_delegate_requires_leader_only_the_projects_leader_delegates(
    open_office: OpenOffice,
) -> None:
    office = await open_office(delegate_requires_leader=True, auto_lead=False)
    lead = await session_caller(office, "lead", project="shop", branch="main")
    dev = await session_caller(office, "dev", project="shop", branch="main")
    await refused_without_change(
        office, ErrorCode.FORBIDDEN, office.tasks.delegate(lead, "dev", "Fix the build")
    )
    await office.leadership.claim(lead)
    task = await office.tasks.delegate(lead, "dev", "Fix the build")
    assert (task.project, task.status) == ("shop", TaskStatus.OPEN)
    await refused_without_change(
        office, ErrorCode.FORBIDDEN, office.tasks.delegate(dev, "lead", "Review it")
    )
    # Reporting back is not delegating: the assignee moves the task as ever.
    await office.tasks.update_task(dev, task.id, "done")


async def test_a_seat_an_unvouched_agent_holds_lets_it_delegate_nothing(
    open_office: OpenOffice,
) -> None:
    """An agent that registered itself may not take the seat; one that held it before that
    rule (the same store, carried over) must not hand out work as the leader either."""
    office = await open_office(
        delegate_requires_leader=True, auto_lead=False, open_registration=True
    )
    drifter, _key = await self_registered(office, "drifter", project="shop", branch="main")
    await session_caller(office, "dev", project="shop", branch="main")
    await seat_directly(office, drifter)
    err = await refused_without_change(
        office, ErrorCode.FORBIDDEN, office.tasks.delegate(drifter, "dev", "Delete the tests")
    )
    assert "vouch" in err.message


async def test_a_leader_silent_past_its_lease_still_delegates_when_it_asks(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    """A laptop waking from sleep: its next heartbeat is seconds away, and its first call is
    a delegation. Asking is a sign of life; nobody else took the seat meanwhile."""
    office = await open_office(delegate_requires_leader=True, auto_lead=False)
    lead = await session_caller(office, "lead", project="shop", branch="main")
    await session_caller(office, "dev", project="shop", branch="main")
    await office.leadership.claim(lead)
    clock.advance(office.settings.offline_after_s + 1)
    task = await office.tasks.delegate(lead, "dev", "Fix the build")
    assert task.creator == "lead"


async def test_without_the_setting_anyone_delegates_and_the_task_keeps_the_callers_project(
    office: PostOffice,
) -> None:
    dev = await session_caller(office, "dev", project="shop", branch="feature")
    await session_caller(office, "qa", project="shop", branch="feature")
    task = await office.tasks.delegate(dev, "qa", "Test it")
    assert task.project == "shop"


async def test_an_open_task_past_its_due_is_overdue_until_it_is_finished(
    office: PostOffice, clock: FakeClock
) -> None:
    boss, worker = await agents(office, "boss", "worker")
    task = await office.tasks.delegate(boss, "worker", "Fix the build", due=clock.now + 60)
    undated = await office.tasks.delegate(boss, "worker", "Someday")
    assert (task.overdue, undated.overdue) == (False, False)
    clock.advance(61)
    await office.tasks.update_task(worker, task.id, "in_progress")
    assert (await office.tasks.task(boss, task.id)).overdue
    listed = {t.id: t.overdue for t in await office.tasks.tasks(worker)}
    assert listed == {task.id: True, undated.id: False}
    assert (await office.tasks.task(boss, task.id)).to_dict()["overdue"] is True
    done = await office.tasks.update_task(worker, task.id, "done")
    assert not done.overdue  # finished: nothing is late any more
    assert not (await office.tasks.task(boss, task.id)).overdue


async def test_an_update_sent_again_answers_the_task_as_it_is_and_changes_nothing(
    office: PostOffice,
) -> None:
    """A resend after a lost answer (the same party, status, note and result) is the update
    that already took effect: answered with the task, nobody told twice, no history added."""
    boss, worker = await agents(office, "boss", "worker")
    task = await office.tasks.delegate(boss, "worker", "Fix the build")
    for who, status, note, result in (
        (worker, "in_progress", "on it", None),
        (worker, "done", "merged", {"pr": 7}),
    ):
        moved = await office.tasks.update_task(who, task.id, status, note=note, result=result)
        before = await snapshot(office.store)
        again = await office.tasks.update_task(who, task.id, status, note=note, result=result)
        assert again == moved
        assert await snapshot(office.store) == before
    other = await office.tasks.delegate(boss, "worker", "Write the docs")
    cancelled = await office.tasks.update_task(boss, other.id, "cancelled", note="not needed")
    assert await office.tasks.update_task(boss, other.id, "cancelled", note="not needed") == (
        cancelled
    )


async def test_a_different_update_to_a_finished_task_is_still_a_conflict(
    office: PostOffice,
) -> None:
    boss, worker = await agents(office, "boss", "worker")
    task = await office.tasks.delegate(boss, "worker", "Fix the build")
    await office.tasks.update_task(worker, task.id, "done", note="merged", result={"pr": 7})
    for who, status, note, result in (
        (worker, "done", "merged", {"pr": 8}),  # another result
        (worker, "done", "merged again", {"pr": 7}),  # another note
        (worker, "done", None, {"pr": 7}),
        (worker, "failed", "merged", {"pr": 7}),  # another status
        (boss, "cancelled", None, None),
    ):
        await refused_without_change(
            office,
            ErrorCode.CONFLICT,
            office.tasks.update_task(who, task.id, status, note=note, result=result),
        )
    # The creation is no update to repeat: `open` is never a move.
    await refused_without_change(
        office, ErrorCode.CONFLICT, office.tasks.update_task(boss, task.id, "open")
    )


async def test_the_same_update_twice_at_once_applies_once_and_answers_both(
    open_office: OpenOffice,
) -> None:
    first, second = await open_office(), await open_office()
    boss, worker = await agents(first, "boss", "worker")
    task = await first.tasks.delegate(boss, "worker", "Fix the build")
    outcomes = await asyncio.gather(
        first.tasks.update_task(worker, task.id, "done", result={"pr": 7}),
        second.tasks.update_task(worker, task.id, "done", result={"pr": 7}),
    )
    assert outcomes[0] == outcomes[1]
    assert [c.to_status for c in outcomes[0].history] == [TaskStatus.OPEN, TaskStatus.DONE]


async def test_two_moves_at_once_one_applies_and_the_other_is_a_conflict(
    open_office: OpenOffice,
) -> None:
    first, second = await open_office(), await open_office()
    boss, worker = await agents(first, "boss", "worker")
    task = await first.tasks.delegate(boss, "worker", "Fix the build")
    outcomes = await asyncio.gather(
        first.tasks.update_task(worker, task.id, "done"),
        second.tasks.update_task(boss, task.id, "cancelled"),
        return_exceptions=True,
    )
    won = [o for o in outcomes if not isinstance(o, BaseException)]
    lost = [o for o in outcomes if isinstance(o, AgentpostError)]
    assert len(won) == 1, outcomes
    assert [e.code for e in lost] == [ErrorCode.CONFLICT]
    final = await first.tasks.task(boss, task.id)
    assert final.status is won[0].status
    assert len(final.history) == 2


async def test_a_cancel_carries_no_result_and_leaves_the_assignees_as_it_was(
    office: PostOffice,
) -> None:
    """The result is the assignee's report of the work; the creator calling the work off must
    not replace it with words of their own."""
    boss, worker = await agents(office, "boss", "worker")
    task = await office.tasks.delegate(boss, "worker", "Fix the build")
    await office.tasks.update_task(worker, task.id, "in_progress", result={"fixed": 3})
    refused = await refused_without_change(
        office,
        ErrorCode.INVALID_ARGUMENT,
        office.tasks.update_task(boss, task.id, "cancelled", result={"fixed": 0}),
    )
    assert "result" in refused.message
    cancelled = await office.tasks.update_task(boss, task.id, "cancelled", note="not needed")
    assert (cancelled.status, cancelled.result) == (TaskStatus.CANCELLED, {"fixed": 3})


async def test_cancelling_a_finished_task_is_a_conflict_and_keeps_its_result(
    office: PostOffice,
) -> None:
    boss, worker = await agents(office, "boss", "worker")
    for end in ("done", "failed"):
        task = await office.tasks.delegate(boss, "worker", f"Fix the build ({end})")
        await office.tasks.update_task(worker, task.id, end, result={"report": end})
        await refused_without_change(
            office, ErrorCode.CONFLICT, office.tasks.update_task(boss, task.id, "cancelled")
        )
        kept = await office.tasks.task(boss, task.id)
        assert (kept.status.value, kept.result) == (end, {"report": end})


async def test_of_a_finish_and_a_cancel_at_once_the_result_is_the_winners(
    open_office: OpenOffice,
) -> None:
    first, second = await open_office(), await open_office()
    boss, worker = await agents(first, "boss", "worker")
    for attempt in range(6):
        task = await first.tasks.delegate(boss, "worker", f"Race {attempt}")
        await first.tasks.update_task(worker, task.id, "in_progress")
        calls = [
            first.tasks.update_task(worker, task.id, "done", result={"by": "worker"}),
            second.tasks.update_task(boss, task.id, "cancelled", note="stop"),
        ]
        if attempt % 2:
            calls.reverse()
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        assert [type(o) for o in outcomes].count(AgentpostError) == 1, outcomes
        final = await first.tasks.task(boss, task.id)
        assert final.result == ({"by": "worker"} if final.status is TaskStatus.DONE else None)
        assert [c.to_status for c in final.history][-1] is final.status
        assert len(final.history) == 3


async def test_a_tasks_data_and_result_may_nest_as_deep_as_any_messages(
    office: PostOffice,
) -> None:
    """The task's message wraps them in an envelope of its own: that level is not theirs."""
    boss, worker = await agents(office, "boss", "worker")
    deepest: object = "bottom"
    for _ in range(MAX_DATA_DEPTH):
        deepest = [deepest]
    task = await office.tasks.delegate(boss, "worker", "Deep", data=deepest)
    assert task.data == deepest
    done = await office.tasks.update_task(worker, task.id, "done", result=deepest)
    assert done.result == deepest
    with pytest.raises(AgentpostError) as refused:
        await office.tasks.delegate(boss, "worker", "Deeper", data=[deepest])
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT


async def test_a_tasks_note_data_and_result_may_each_be_as_large_as_a_messages(
    office: PostOffice,
) -> None:
    """Their envelope is the post office's words around them: its bytes are not theirs."""
    limits = office.settings.limits
    boss, worker = await agents(office, "boss", "worker")
    largest = "d" * (limits.max_data_bytes - 2)  # as JSON, with its quotes: exactly the limit
    note = "n" * limits.max_body_bytes
    task = await office.tasks.delegate(boss, "worker", "Large", data=largest)
    done = await office.tasks.update_task(worker, task.id, "done", note=note, result=largest)
    assert (done.data, done.result, done.history[-1].note) == (largest, largest, note)
    [told] = (await office.mailbox.inbox(boss)).messages
    assert (told.data["note"], told.data["result"]) == (note, largest)
    assert told.body.endswith(note)
    for too_large in (
        office.tasks.delegate(boss, "worker", "Larger", data=largest + "d"),
        office.tasks.update_task(worker, task.id, "done", note=note + "n"),
    ):
        with pytest.raises(AgentpostError) as refused:
            await too_large
        assert refused.value.code is ErrorCode.TOO_LARGE


async def test_a_retried_delegate_under_the_same_idempotency_key_makes_one_task(
    office: PostOffice,
) -> None:
    boss, worker = await agents(office, "boss", "worker")
    first = await office.tasks.delegate(
        boss, "worker", "Fix the build", data={"pr": 1, "ci": "red"}, idempotency_key="fix-1"
    )
    before = await snapshot(office.store)
    again = await office.tasks.delegate(  # its data's keys in another order, `1` as `1.0`
        boss, "worker", "Fix the build", data={"ci": "red", "pr": 1.0}, idempotency_key="fix-1"
    )
    assert again == first
    assert await snapshot(office.store) == before  # no task, no message, no history
    assert [t.id for t in await office.tasks.tasks(worker)] == [first.id]


async def test_a_retried_delegate_answers_with_the_task_as_it_stands_now(
    office: PostOffice,
) -> None:
    boss, worker = await agents(office, "boss", "worker")
    first = await office.tasks.delegate(boss, "worker", "Fix the build", idempotency_key="fix-1")
    await office.tasks.update_task(worker, first.id, "in_progress")
    again = await office.tasks.delegate(boss, "worker", "Fix the build", idempotency_key="fix-1")
    assert (again.id, again.status) == (first.id, TaskStatus.IN_PROGRESS)


@pytest.mark.parametrize(
    "changes",
    [{"title": "Fix the docs"}, {"to": "other"}, {"detail": "now"}, {"data": {"pr": 2}}],
)
async def test_another_delegate_under_the_same_idempotency_key_is_a_conflict(
    office: PostOffice, changes: dict[str, object]
) -> None:
    boss, _worker, _other = await agents(office, "boss", "worker", "other")
    asked: dict[str, object] = {"to": "worker", "title": "Fix the build", "data": {"pr": 1}}
    await office.tasks.delegate(boss, **asked, idempotency_key="fix-1")  # type: ignore[arg-type]
    error = await refused_without_change(
        office,
        ErrorCode.CONFLICT,
        office.tasks.delegate(boss, **(asked | changes), idempotency_key="fix-1"),  # type: ignore[arg-type]
    )
    assert error.details == {"idempotency_key": "fix-1"}


async def test_a_key_that_sent_a_message_is_a_conflict_for_a_delegate(office: PostOffice) -> None:
    boss, _worker = await agents(office, "boss", "worker")
    await office.mailbox.send(boss, "worker", "Fix the build", idempotency_key="k")
    await refused_without_change(
        office,
        ErrorCode.CONFLICT,
        office.tasks.delegate(boss, "worker", "Fix the build", idempotency_key="k"),
    )


async def test_a_malformed_idempotency_key_for_a_delegate_is_refused(office: PostOffice) -> None:
    boss, _worker = await agents(office, "boss", "worker")
    await refused_without_change(
        office,
        ErrorCode.INVALID_ARGUMENT,
        office.tasks.delegate(boss, "worker", "Fix the build", idempotency_key="with space"),
    )


@pytest.mark.parametrize("blank", ["", "   "])
async def test_a_blank_task_or_request_id_is_an_invalid_argument_wherever_one_is_named(
    office: PostOffice, blank: str
) -> None:
    """As a blank message id is: no task or request is named, so none is missing (the Python
    client refused a blank id before sending, local sessions answered `not_found`)."""
    boss, worker = await agents(office, "boss", "worker")
    await office.tasks.delegate(boss, "worker", "Fix the build")
    calls = (
        lambda: office.tasks.task(worker, blank),
        lambda: office.tasks.update_task(worker, blank, "accepted"),
        lambda: office.tasks.tasks(worker, before=blank),
        lambda: office.requests.respond(worker, blank, "yes"),
        lambda: office.requests.check_request(boss, blank),
    )
    for call in calls:
        await refused_without_change(office, ErrorCode.INVALID_ARGUMENT, call())
