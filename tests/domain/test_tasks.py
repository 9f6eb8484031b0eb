"""The task table: every move, by each party and by a stranger, allowed or refused.

The table of issue 4, written out again here by hand (not read from the code), is the
specification: the assignee reports progress, the creator may cancel unfinished work.
"""

from __future__ import annotations

import itertools
from typing import get_args

import pytest

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.models import Priority, Trust
from agentpost.domain.tasks import (
    Task,
    TaskChange,
    TaskStatus,
    TaskStatusName,
    check_move,
    check_status,
)

S = TaskStatus
ASSIGNEE_MOVES = {
    (S.OPEN, S.ACCEPTED),
    (S.OPEN, S.IN_PROGRESS),
    (S.OPEN, S.DONE),
    (S.OPEN, S.FAILED),
    (S.ACCEPTED, S.IN_PROGRESS),
    (S.ACCEPTED, S.DONE),
    (S.ACCEPTED, S.FAILED),
    (S.IN_PROGRESS, S.DONE),
    (S.IN_PROGRESS, S.FAILED),
}
CREATOR_MOVES = {
    (S.OPEN, S.CANCELLED),
    (S.ACCEPTED, S.CANCELLED),
    (S.IN_PROGRESS, S.CANCELLED),
}
EVERY_PAIR = list(itertools.product(S, S))


def refusal(actor: str, current: TaskStatus, wanted: TaskStatus) -> ErrorCode | None:
    """The code `actor` gets for the move (None: allowed) on a task from boss to worker."""
    try:
        check_move(actor, "boss", "worker", current, wanted)
    except AgentpostError as err:
        return err.code
    return None


@pytest.mark.parametrize(("current", "wanted"), EVERY_PAIR, ids=lambda s: s.value)
def test_the_assignee_may_make_exactly_the_assignee_moves(
    current: TaskStatus, wanted: TaskStatus
) -> None:
    code = refusal("worker", current, wanted)
    if (current, wanted) in ASSIGNEE_MOVES:
        assert code is None
    elif (current, wanted) in CREATOR_MOVES:
        assert code is ErrorCode.FORBIDDEN  # the creator's move: not the assignee's to make
    else:
        assert code is ErrorCode.CONFLICT


@pytest.mark.parametrize(("current", "wanted"), EVERY_PAIR, ids=lambda s: s.value)
def test_the_creator_may_make_exactly_the_creator_moves(
    current: TaskStatus, wanted: TaskStatus
) -> None:
    code = refusal("boss", current, wanted)
    if (current, wanted) in CREATOR_MOVES:
        assert code is None
    elif (current, wanted) in ASSIGNEE_MOVES:
        assert code is ErrorCode.FORBIDDEN
    else:
        assert code is ErrorCode.CONFLICT


@pytest.mark.parametrize(("current", "wanted"), EVERY_PAIR, ids=lambda s: s.value)
def test_anyone_else_is_forbidden_every_move(current: TaskStatus, wanted: TaskStatus) -> None:
    assert refusal("stranger", current, wanted) is ErrorCode.FORBIDDEN


def test_cancel_by_assignee_is_forbidden() -> None:
    assert refusal("worker", S.IN_PROGRESS, S.CANCELLED) is ErrorCode.FORBIDDEN


def test_nothing_moves_out_of_an_end_state() -> None:
    for end in (S.DONE, S.FAILED, S.CANCELLED):
        for wanted in S:
            assert refusal("worker", end, wanted) is ErrorCode.CONFLICT
            assert refusal("boss", end, wanted) is ErrorCode.CONFLICT


def test_who_delegated_to_themselves_holds_both_roles() -> None:
    check_move("solo", "solo", "solo", S.OPEN, S.DONE)
    check_move("solo", "solo", "solo", S.OPEN, S.CANCELLED)
    with pytest.raises(AgentpostError) as caught:
        check_move("solo", "solo", "solo", S.DONE, S.OPEN)
    assert caught.value.code is ErrorCode.CONFLICT


def test_an_unknown_status_is_invalid() -> None:
    with pytest.raises(AgentpostError) as caught:
        check_status("finished")
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert check_status("in_progress") is S.IN_PROGRESS


def done_task(*, withheld: bool = False) -> Task:
    """boss's task, done by worker with a note and a result (`withheld` from boss)."""
    return Task(
        id="t_1",
        project="shop",
        creator="boss",
        assignee="worker",
        title="Fix the build",
        detail="CI is red",
        priority=Priority.URGENT,
        status=S.DONE,
        data={"pr": 12},
        due=1_800_000_100.0,
        result={"commit": "abc"},
        thread_id="m_1",
        created_at=1_800_000_000.0,
        updated_at=1_800_000_050.0,
        history=[
            TaskChange(1_800_000_000.0, "boss", None, S.OPEN, "", Trust.VERIFIED),
            TaskChange(
                1_800_000_050.0, "worker", S.OPEN, S.DONE, "fixed", Trust.UNTRUSTED, withheld
            ),
        ],
        result_trust=Trust.UNTRUSTED,
        result_withheld=withheld,
    )


def test_a_task_reads_itself_back_from_its_json() -> None:
    task = done_task()
    as_json = task.to_dict()
    assert as_json["status"] == "done"
    assert as_json["history"][0]["from_status"] is None
    assert as_json["history"][1] == {
        "at": 1_800_000_050.0,
        "actor": "worker",
        "from_status": "open",
        "to_status": "done",
        "note": "fixed",
        "trust": "untrusted",
        "withheld": False,
    }
    assert as_json["result_trust"] == "untrusted"
    assert as_json["result_withheld"] is False
    assert Task.from_dict(as_json) == task
    assert task.finished


def test_words_withheld_from_the_blocker_are_left_out_for_it_alone() -> None:
    """The notes and result written while the creator blocked the assignee: the creator sees
    the moves without them; the assignee sees its words, and no sign of the block."""
    task = done_task(withheld=True)
    blocker = task.seen_by("boss")
    assert [(c.to_status, c.note, c.withheld) for c in blocker.history] == [
        (S.OPEN, "", False),
        (S.DONE, "", True),
    ]
    assert (blocker.result, blocker.result_trust, blocker.result_withheld) == (None, None, True)
    assert Task.from_dict(blocker.to_dict()) == blocker
    writer = task.seen_by("worker")
    assert writer == done_task()


def test_words_an_older_service_gives_no_trust_for_read_as_a_strangers() -> None:
    """A service from before words kept their trust says none for a note or a result."""
    older = {
        "id": "t_1",
        "project": None,
        "creator": "boss",
        "assignee": "worker",
        "title": "Fix",
        "detail": "",
        "priority": "normal",
        "status": "done",
        "data": None,
        "due": None,
        "result": {"ok": True},
        "thread_id": "m_1",
        "created_at": 1.0,
        "updated_at": 2.0,
        "history": [{"at": 2.0, "actor": "worker", "from_status": "open", "to_status": "done",
                     "note": "fixed"}],
        "creator_trust": "verified",
        "assignee_trust": "verified",
    }  # fmt: skip
    task = Task.from_dict(older)
    assert (task.result_trust, task.history[0].trust) == (Trust.UNTRUSTED, Trust.UNTRUSTED)
    assert Task.from_dict({**older, "result": None}).result_trust is None


def test_the_status_names_are_the_statuses() -> None:
    assert set(get_args(TaskStatusName)) == {s.value for s in TaskStatus}
