"""Blocks and tasks: a block drops a sender's mail silently, and so it keeps the words of a
task from the blocker — a whole task delegated by the blocked agent, or the notes and result it
writes on a task the two share. The blocker still sees every change of status; the writer
never learns that its words were withheld."""

from __future__ import annotations

import pytest

from account_helpers import owner
from agentpost.domain.errors import ErrorCode
from agentpost.domain.tasks import Task, TaskStatus
from agentpost.services import PostOffice
from backends import agents, refused_without_change

pytestmark = pytest.mark.anyio


def notes(task: Task) -> list[tuple[str, str, str, bool]]:
    """Each change as its reader sees it: (actor, status, note, withheld)."""
    return [(c.actor, c.to_status.value, c.note, c.withheld) for c in task.history]


async def test_a_task_from_a_sender_the_assignee_blocks_is_withheld_from_the_assignee(
    office: PostOffice,
) -> None:
    """As a block drops mail silently: the assignee never sees the task, and the creator sees
    it delegated, as any task nobody took up yet."""
    pest, worker = await agents(office, "pest", "worker")
    await office.directory.block(worker, "pest")
    task = await office.tasks.delegate(pest, "worker", "Do my homework", "all of it")
    assert task.status is TaskStatus.OPEN

    assert await office.tasks.tasks(worker) == []
    assert await office.tasks.tasks(worker, role="assigned") == []
    assert (await office.mailbox.inbox(worker)).messages == []
    for refused in (
        office.tasks.task(worker, task.id),
        office.tasks.update_task(worker, task.id, "accepted"),
    ):
        await refused_without_change(office, ErrorCode.NOT_FOUND, refused)

    assert [t.id for t in await office.tasks.tasks(pest)] == [task.id]
    assert (await office.tasks.task(pest, task.id)).status is TaskStatus.OPEN
    cancelled = await office.tasks.update_task(pest, task.id, "cancelled")
    assert cancelled.status is TaskStatus.CANCELLED
    assert (await office.mailbox.inbox(worker)).messages == []


async def test_tasks_given_before_a_block_stay_with_the_assignee(office: PostOffice) -> None:
    boss, worker = await agents(office, "boss", "worker")
    task = await office.tasks.delegate(boss, "worker", "Before the falling-out")
    await office.directory.block(worker, "boss")
    assert [t.id for t in await office.tasks.tasks(worker)] == [task.id]
    assert (await office.tasks.update_task(worker, task.id, "accepted")).status is (
        TaskStatus.ACCEPTED
    )


async def test_news_of_a_withheld_task_never_reaches_the_assignee_even_once_unblocked(
    office: PostOffice,
) -> None:
    pest, worker = await agents(office, "pest", "worker")
    await office.directory.block(worker, "pest")
    task = await office.tasks.delegate(pest, "worker", "Do my homework")
    await office.directory.unblock(worker, "pest")
    await office.tasks.update_task(pest, task.id, "cancelled")
    assert (await office.mailbox.inbox(worker)).messages == []


async def test_the_notes_and_result_of_an_assignee_the_creator_blocks_are_withheld_from_it(
    office: PostOffice,
) -> None:
    boss, worker = await agents(office, "boss", "worker")
    task = await office.tasks.delegate(boss, "worker", "Fix the build")
    await office.directory.block(boss, "worker")
    await office.tasks.update_task(worker, task.id, "in_progress", note="on it, buy me a coffee")
    await office.tasks.update_task(
        worker, task.id, "done", note="click this link", result={"pr": "https://evil.example"}
    )

    seen = await office.tasks.task(boss, task.id)
    assert seen.status is TaskStatus.DONE
    assert notes(seen) == [
        ("boss", "open", "", False),
        ("worker", "in_progress", "", True),
        ("worker", "done", "", True),
    ]
    assert (seen.result, seen.result_trust, seen.result_withheld) == (None, None, True)
    [listed] = await office.tasks.tasks(boss)
    assert listed == seen
    assert seen.to_dict()["result_withheld"] is True
    assert [c["withheld"] for c in seen.to_dict()["history"]] == [False, True, True]
    assert (await office.mailbox.inbox(boss)).messages == []  # the notices were dropped

    # The writer sees its words as it wrote them, and nothing to say they were withheld.
    own = await office.tasks.task(worker, task.id)
    assert notes(own) == [
        ("boss", "open", "", False),
        ("worker", "in_progress", "on it, buy me a coffee", False),
        ("worker", "done", "click this link", False),
    ]
    assert (own.result, own.result_withheld) == ({"pr": "https://evil.example"}, False)


async def test_words_written_before_a_block_stay_and_those_during_it_stay_withheld(
    office: PostOffice,
) -> None:
    """As mail: what was delivered before the block stays, what was dropped during it is not
    delivered by an unblock, and what comes after it arrives again."""
    boss, worker = await agents(office, "boss", "worker")
    task = await office.tasks.delegate(boss, "worker", "Fix the build")
    await office.tasks.update_task(worker, task.id, "accepted", note="before")
    await office.directory.block(boss, "worker")
    await office.tasks.update_task(worker, task.id, "in_progress", note="during", result=1)
    await office.directory.unblock(boss, "worker")
    before_the_result = await office.tasks.task(boss, task.id)
    assert before_the_result.result_withheld
    done = await office.tasks.update_task(worker, task.id, "done", note="after", result=2)
    assert (done.result, done.result_withheld) == (2, False)

    seen = await office.tasks.task(boss, task.id)
    assert notes(seen)[1:] == [
        ("worker", "accepted", "before", False),
        ("worker", "in_progress", "", True),
        ("worker", "done", "after", False),
    ]
    assert (seen.result, seen.result_withheld) == (2, False)


async def test_a_creators_note_is_withheld_from_an_assignee_who_blocks_the_creator(
    office: PostOffice,
) -> None:
    """Both ways: the task given before the block stays with the assignee (its title and
    detail were delivered), but what the creator writes on it from then on does not reach it."""
    boss, worker = await agents(office, "boss", "worker")
    task = await office.tasks.delegate(boss, "worker", "Fix the build", "CI is red")
    await office.directory.block(worker, "boss")
    await office.tasks.update_task(boss, task.id, "cancelled", note="you are useless")

    seen = await office.tasks.task(worker, task.id)
    assert (seen.status, seen.title, seen.detail) == (
        TaskStatus.CANCELLED,
        "Fix the build",
        "CI is red",
    )
    assert notes(seen)[-1] == ("boss", "cancelled", "", True)
    assert notes(await office.tasks.task(boss, task.id))[-1] == (
        "boss",
        "cancelled",
        "you are useless",
        False,
    )


async def test_a_block_the_owner_sets_withholds_a_tasks_words_too(office: PostOffice) -> None:
    boss, worker = await agents(office, "boss", "worker")
    task = await office.tasks.delegate(boss, "worker", "Fix the build")
    await office.admin.set_block(await owner(office), "boss", "worker", True)
    await office.tasks.update_task(worker, task.id, "failed", note="no", result="nope")
    seen = await office.tasks.task(boss, task.id)
    assert notes(seen)[-1] == ("worker", "failed", "", True)
    assert (seen.result, seen.result_withheld) == (None, True)


async def test_a_blocked_assignees_update_sent_again_changes_nothing(office: PostOffice) -> None:
    """Its last update, sent again (the answer lost), is recognised by the words it wrote,
    withheld or not, and answered as the task stands, to it."""
    boss, worker = await agents(office, "boss", "worker")
    task = await office.tasks.delegate(boss, "worker", "Fix the build")
    await office.directory.block(boss, "worker")
    first = await office.tasks.update_task(worker, task.id, "done", note="x", result=[1])
    again = await office.tasks.update_task(worker, task.id, "done", note="x", result=[1])
    assert again == first
    assert notes(again)[-1] == ("worker", "done", "x", False)
    await refused_without_change(
        office,
        ErrorCode.CONFLICT,
        office.tasks.update_task(worker, task.id, "done", note="y"),
    )
