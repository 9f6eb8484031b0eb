"""Delegated tasks: their statuses, who may move a task where, and the records every face returns.

The move table is the whole rule, kept here without I/O so it can be read, and tested, at once:
the assignee reports progress, the creator may call the work off, nothing moves out of an end
state. A party asking for a move the table has for nobody gets `conflict`; a move that belongs
to the other party, or anyone who is no party, gets `forbidden`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any, Literal, get_args

from agentpost.domain.errors import AgentpostError, ErrorCode, forbidden, invalid
from agentpost.domain.models import Priority, Trust, from_fields, trust_read


class TaskStatus(StrEnum):
    OPEN = "open"
    ACCEPTED = "accepted"
    IN_PROGRESS = "in_progress"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Party(StrEnum):
    ASSIGNEE = "assignee"
    CREATOR = "creator"


_S = TaskStatus
MOVES: Mapping[tuple[TaskStatus, TaskStatus], Party] = {
    (_S.OPEN, _S.ACCEPTED): Party.ASSIGNEE,
    (_S.OPEN, _S.IN_PROGRESS): Party.ASSIGNEE,
    (_S.OPEN, _S.DONE): Party.ASSIGNEE,
    (_S.OPEN, _S.FAILED): Party.ASSIGNEE,
    (_S.ACCEPTED, _S.IN_PROGRESS): Party.ASSIGNEE,
    (_S.ACCEPTED, _S.DONE): Party.ASSIGNEE,
    (_S.ACCEPTED, _S.FAILED): Party.ASSIGNEE,
    (_S.IN_PROGRESS, _S.DONE): Party.ASSIGNEE,
    (_S.IN_PROGRESS, _S.FAILED): Party.ASSIGNEE,
    (_S.OPEN, _S.CANCELLED): Party.CREATOR,
    (_S.ACCEPTED, _S.CANCELLED): Party.CREATOR,
    (_S.IN_PROGRESS, _S.CANCELLED): Party.CREATOR,
}
"""(from, to) → the only party who may make that move."""

FINISHED = frozenset({TaskStatus.DONE, TaskStatus.FAILED, TaskStatus.CANCELLED})

TaskStatusName = Literal["open", "accepted", "in_progress", "done", "failed", "cancelled"]
TaskRole = Literal["assigned", "created", "all"]
"""Which of the caller's tasks a listing shows: given to them, made by them, or both."""
ROLES: tuple[str, ...] = get_args(TaskRole)


def check_status(value: str) -> TaskStatus:
    try:
        return TaskStatus(value)
    except ValueError:
        names = ", ".join(s.value for s in TaskStatus)
        raise invalid(f"status must be one of {names}", status=value) from None


def check_role(role: str) -> tuple[bool, bool]:
    """(assigned, created) for a listing's `role`."""
    if role not in ROLES:
        raise invalid(f"role must be one of {', '.join(ROLES)}", role=role)
    return role != "created", role != "assigned"


def parties(actor: str, creator: str, assignee: str) -> set[Party]:
    """The roles `actor` holds in a task (both, when someone delegated to themselves)."""
    held = set()
    if actor == creator:
        held.add(Party.CREATOR)
    if actor == assignee:
        held.add(Party.ASSIGNEE)
    return held


def check_move(
    actor: str, creator: str, assignee: str, current: TaskStatus, wanted: TaskStatus
) -> None:
    """Refuse a move `actor` may not make: `forbidden` for a non-party or the other party's
    move, `conflict` for a move the table has for nobody (out of an end state, backwards)."""
    held = parties(actor, creator, assignee)
    if not held:
        raise forbidden("only the task's creator and assignee may change it")
    allowed = MOVES.get((current, wanted))
    if allowed is None:
        raise AgentpostError(
            ErrorCode.CONFLICT,
            f"a task cannot move from {current.value} to {wanted.value}",
            details={"status": current.value, "wanted": wanted.value},
        )
    if allowed not in held:
        raise forbidden(
            f"only the task's {allowed.value} may move it from {current.value} to {wanted.value}",
            status=current.value,
            wanted=wanted.value,
        )


@dataclass(frozen=True, slots=True)
class TaskChange:
    """One entry of a task's history; the first is its creation (`from_status` None)."""

    at: float
    actor: str
    from_status: TaskStatus | None
    to_status: TaskStatus
    note: str
    trust: Trust = Trust.UNTRUSTED
    """The actor's when it made the change, as a message keeps its sender's: whether the note
    is a colleague's words or a stranger's, however the owner's vouch has changed since."""
    withheld: bool = False
    """The note was written while the other party blocked the actor: to them it reads as
    withheld, its `note` empty, as a blocked sender's mail is dropped (unblocking later shows
    it no more than it delivers that mail). Its actor sees it as written, never the flag."""

    def seen_by(self, viewer: str) -> TaskChange:
        """The change as `viewer` may see it: without a note withheld from them."""
        if not self.withheld:
            return self
        if viewer == self.actor:
            return replace(self, withheld=False)
        return replace(self, note="", withheld=True)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["from_status"] = None if self.from_status is None else self.from_status.value
        out["to_status"] = self.to_status.value
        out["trust"] = self.trust.value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TaskChange:
        before = data.get("from_status")
        return from_fields(
            cls,
            data,
            from_status=None if before is None else TaskStatus(before),
            to_status=TaskStatus(data["to_status"]),
            trust=trust_read(data),
        )


# A due is shown as a calendar date (to the creator, the assignee and in the overdue notice):
# outside these years no platform can spell it, and a notice that cannot be written would stop
# the post office each time it looked for dues passed.
EARLIEST_DUE = 0.0  # 1970-01-01T00:00:00Z
LATEST_DUE = 253402300799.0  # 9999-12-31T23:59:59Z


def check_due(due: object) -> float | None:
    """A task's due as stored: Unix seconds between 1970 and the end of year 9999, or none."""
    if due is None:
        return None
    if isinstance(due, bool) or not isinstance(due, int | float) or not math.isfinite(due):
        raise invalid("due must be a time in Unix seconds")
    if not EARLIEST_DUE <= due <= LATEST_DUE:
        raise invalid(
            f"due must lie between {EARLIEST_DUE:.0f} (1970) and {LATEST_DUE:.0f} (9999), "
            "in Unix seconds",
            min=EARLIEST_DUE,
            max=LATEST_DUE,
        )
    return float(due)


def is_overdue(status: TaskStatus, due: float | None, now: float) -> bool:
    """Whether work still to be done is past its due: a finished task is late no more."""
    return due is not None and status not in FINISHED and now > due


@dataclass(frozen=True, slots=True)
class Task:
    """A delegated unit of work. `thread_id` is the thread of the message that delivered it,
    where every change is told."""

    id: str
    project: str | None
    creator: str
    assignee: str
    title: str
    detail: str
    priority: Priority
    status: TaskStatus
    data: Any
    due: float | None
    result: Any
    thread_id: str
    created_at: float
    updated_at: float
    history: list[TaskChange] = field(default_factory=list)
    creator_trust: Trust = Trust.VERIFIED
    """The creator's when it delegated: whether the title and detail are a colleague's words
    or a stranger's (a vouch given or withdrawn since changes nothing of it)."""
    assignee_trust: Trust = Trust.VERIFIED
    """The assignee's as it stands now: who is doing the work. Its words carry their own (each
    change's `trust`, `result_trust`)."""
    overdue: bool = False
    """Past its `due` and not finished, by the post office's clock when it was read."""
    result_trust: Trust | None = None
    """The assignee's when it gave the result; None while there is no result."""
    result_withheld: bool = False
    """The assignee gave its result while the creator blocked it: to the creator the result
    reads as withheld (`result` and `result_trust` null), as the notes then are."""

    def seen_by(self, viewer: str) -> Task:
        """The task as `viewer` may see it: without the words withheld from them, and without
        telling the writer of those words that anything was withheld."""
        withheld = self.result_withheld and viewer != self.assignee
        return replace(
            self,
            history=[change.seen_by(viewer) for change in self.history],
            result=None if withheld else self.result,
            result_trust=None if withheld else self.result_trust,
            result_withheld=withheld,
        )

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "project": self.project,
            "creator": self.creator,
            "assignee": self.assignee,
            "title": self.title,
            "detail": self.detail,
            "priority": self.priority.value,
            "status": self.status.value,
            "data": self.data,
            "due": self.due,
            "result": self.result,
            "thread_id": self.thread_id,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "history": [c.to_dict() for c in self.history],
            "creator_trust": self.creator_trust.value,
            "assignee_trust": self.assignee_trust.value,
            "overdue": self.overdue,
            "result_trust": None if self.result_trust is None else self.result_trust.value,
            "result_withheld": self.result_withheld,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Task:
        return from_fields(
            cls,
            data,
            priority=Priority(data["priority"]),
            status=TaskStatus(data["status"]),
            history=[TaskChange.from_dict(c) for c in data.get("history", [])],
            creator_trust=trust_read(data, "creator_trust"),
            assignee_trust=trust_read(data, "assignee_trust"),
            # A result without a trust given (an older service's) reads as a stranger's.
            result_trust=None if data.get("result") is None else trust_read(data, "result_trust"),
        )
