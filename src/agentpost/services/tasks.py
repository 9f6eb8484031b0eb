"""Delegated tasks: handed out as a message of kind `task`, moved along the table of
agentpost.domain.tasks, every change kept with its time and note and told to the other side.

A task and the message that tells of it are written in one transaction (`Mailbox.send_in`):
there is never a task nobody was told of, nor a message about a task that is not there.

A block between the two parties holds back words as it drops mail: a task delegated by an
agent its assignee blocks is withheld from the assignee, and a note or result written while
the other party blocks its writer is withheld from that party (`Task.seen_by`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agentpost.config import Settings
from agentpost.domain import limits as rules
from agentpost.domain.errors import AgentpostError, ErrorCode, forbidden, invalid, not_found
from agentpost.domain.ids import task_id as new_task_id
from agentpost.domain.leadership import check_vouched, lease_name
from agentpost.domain.models import Caller, Kind, check_priority
from agentpost.domain.names import check_name
from agentpost.domain.tasks import (
    FINISHED,
    Task,
    TaskStatus,
    check_due,
    check_move,
    check_role,
    check_status,
)
from agentpost.services import accounts, outbox
from agentpost.services.heartbeats import beat_asking
from agentpost.services.mailbox import Mailbox
from agentpost.store import agents as agent_rows
from agentpost.store import blocks, leases
from agentpost.store import tasks as task_rows
from agentpost.store.database import Connection, Row, Store


def _title(title: str, settings: Settings) -> str:
    if not isinstance(title, str) or not title.strip():
        raise invalid("title must be non-empty text")
    return rules.check_subject(title.strip(), settings.limits, "title")


def _text(value: str | None, what: str, settings: Settings) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise invalid(f"{what} must be text")
    rules.check_text(value, what)
    size, limit = len(value.encode("utf-8")), settings.limits.max_body_bytes
    if size > limit:
        raise rules.too_large(what, size, limit, "bytes")
    return value


def _repeats(
    conn: Connection,
    row: Row[Any],
    caller: Caller,
    wanted: TaskStatus,
    note: str,
    result_json: str | None,
) -> bool:
    """Whether the update asked for is the one that took effect last: the same party moved
    the task to `wanted` with the same note, and the result asked for is the one it holds
    (or none, which leaves a result as it is). Applied again it would change nothing."""
    if row.status != wanted.value or (result_json is not None and result_json != row.result):
        return False
    last = task_rows.last_change(conn, row.id)
    return (
        last is not None
        and last.from_status is not None  # the creation is no update
        and (last.actor, last.to_status, last.note) == (caller.agent, wanted.value, note)
    )


def _blocked_by_other(conn: Connection, caller: Caller, row: Row[Any]) -> bool:
    """Whether the task's other party blocks the caller now: the words it writes now (a note,
    a result) are then withheld from them, as its mail to them is dropped."""
    other = row.creator if caller.agent == row.assignee else row.assignee
    return other != caller.agent and bool(blocks.blocking(conn, caller.agent, [other]))


def _no_sweeper(at: float) -> None:
    """No sweeper listens (a one-shot command's post office)."""


class Tasks:
    def __init__(self, store: Store, settings: Settings, mailbox: Mailbox) -> None:
        self.store = store
        self.settings = settings
        self.mailbox = mailbox
        self.on_due: Callable[[float], None] = _no_sweeper
        """Told (store clock) when a task delegated here falls due: the sweeper's alarm."""

    async def delegate(
        self,
        caller: Caller,
        to: str,
        title: str,
        detail: str | None = None,
        *,
        priority: str = "normal",
        data: Any = None,
        due: float | None = None,
        idempotency_key: str | None = None,
    ) -> Task:
        """Create a task for `to` and deliver it as a message of kind `task`, in one go.

        A retry under the same `idempotency_key` (24 h, the caller's own, as `send` keeps
        them) makes no second task: it answers with the first, as it stands now."""
        assignee = check_name(to, "assignee")
        title = _title(title, self.settings)
        detail = _text(detail, "detail", self.settings)
        level = check_priority(priority)
        data_json = rules.encode_data(data, self.settings.limits)
        when = check_due(due)
        retry = outbox.Retry.of(
            idempotency_key,
            "delegate",
            lambda: {
                "to": assignee,
                "title": title,
                "detail": detail,
                "priority": level.value,
                "data": outbox.by_value(data_json),
                "due": when,
            },
        )

        def tx(conn: Connection) -> Task:
            now = self.store.clock()
            first = None if retry is None else retry.first(conn, caller.agent, now)
            if first is not None:
                return self._one(conn, first["task_id"], caller)
            project = self._project(conn, caller)
            if self.settings.delegate_requires_leader:
                self._check_leader(conn, caller, project, now)
            self._check_room(conn, caller)  # after: a non-leader hears it may not delegate
            tid = new_task_id(now)
            sent = self.mailbox.send_in(
                conn,
                caller,
                assignee,
                detail if detail.strip() else title,
                subject=title,
                data={"task_id": tid, "status": TaskStatus.OPEN.value, "due": when, "data": data},
                priority=level.value,
                must_read=True,  # work handed out never expires unread
                kind=Kind.TASK,
                envelope=True,  # `data` was checked above
            )
            writer = accounts.as_stored(conn, caller).trust  # as the message was stamped
            task_rows.insert_task(
                conn,
                id=tid,
                project=project,
                creator=caller.agent,
                assignee=assignee,
                title=title,
                detail=detail,
                priority=level.value,
                status=TaskStatus.OPEN.value,
                data=data_json,
                due=when,
                message_id=sent.id,
                created_at=now,
                updated_at=now,
                # As the block dropped the message: silently, the creator sees it as sent.
                withheld=bool(blocks.blocking(conn, caller.agent, [assignee])),
                creator_trust=writer.value,
            )
            task_rows.record_change(
                conn,
                tid,
                at=now,
                actor=caller.agent,
                from_status=None,
                to_status=TaskStatus.OPEN,
                note="",
                trust=writer,
            )
            if retry is not None:
                retry.remember(conn, self.store, caller.agent, {"task_id": tid})
            return self._one(conn, tid, caller)

        task = await self.store.write(tx)
        if task.due is not None and not task.finished:
            self.on_due(task.due)
        return task

    async def update_task(
        self,
        caller: Caller,
        task_id: str,
        status: str,
        note: str | None = None,
        result: Any = None,
    ) -> Task:
        """Move a task (see the table in agentpost.domain.tasks) and tell the other side.

        The update that took effect last, sent again by its party (its answer lost, say),
        answers the task as it is and changes nothing; any other update it has no move for
        is a `conflict`."""
        rules.check_id(task_id, "task_id", "task")
        wanted = check_status(status)
        if wanted is TaskStatus.CANCELLED and result is not None:
            # The result is the assignee's report of the work; calling it off adds none.
            raise invalid("a cancel takes no result: the result is the assignee's to give")
        note = _text(note, "note", self.settings)
        result_json = rules.encode_data(result, self.settings.limits, what="result")

        def tx(conn: Connection) -> Task:
            now = self.store.clock()
            row = self._row(conn, task_id, caller)
            if _repeats(conn, row, caller, wanted, note, result_json):
                return self._one(conn, row.id, caller)
            current = TaskStatus(row.status)
            check_move(caller.agent, row.creator, row.assignee, current, wanted)
            # Kept with the note and result, as a message keeps its sender's: a vouch given or
            # withdrawn later changes how the actor's next words read, not these.
            writer = accounts.as_stored(conn, caller).trust
            withheld = _blocked_by_other(conn, caller, row)
            moved = task_rows.move(
                conn,
                row.id,
                current=current,
                wanted=wanted,
                result=result_json,
                trust=writer,
                now=now,
                withheld=withheld,
            )
            if not moved:  # another change came first: decided against what no longer holds
                row = self._row(conn, task_id, caller)
                if _repeats(conn, row, caller, wanted, note, result_json):
                    return self._one(conn, row.id, caller)  # it was this very update, sent twice
                raise AgentpostError(
                    ErrorCode.CONFLICT, f"task {task_id!r} changed meanwhile; read it again"
                )
            task_rows.record_change(
                conn,
                row.id,
                at=now,
                actor=caller.agent,
                from_status=current,
                to_status=wanted,
                note=note,
                trust=writer,
                withheld=withheld,
            )
            self._tell(conn, caller, row, current, wanted, note, result)
            return self._one(conn, row.id, caller)

        return await self.store.write(tx)

    async def tasks(
        self,
        caller: Caller,
        role: str = "all",
        status: str | None = None,
        limit: int = 50,
        before: str | None = None,
    ) -> list[Task]:
        """The caller's tasks, newest first, each with its history; `before` (the id of one
        of them, the last of a page) pages back past it."""
        assigned, created = check_role(role)
        wanted = None if status is None else check_status(status)
        rules.check_limit(limit)
        if before is not None:
            rules.check_id(before, "before", "task")

        def tx(conn: Connection) -> list[Task]:
            if before is not None:
                self._row(conn, before, caller)
            found = task_rows.task_rows(
                conn,
                caller.agent,
                assigned=assigned,
                created=created,
                status=wanted,
                limit=limit,
                before=before,
            )
            return task_rows.load(conn, found, self.store.clock(), caller.agent)

        return await self.store.read(tx)

    async def task(self, caller: Caller, task_id: str) -> Task:
        """One task with its history; only its creator and assignee may read it."""
        rules.check_id(task_id, "task_id", "task")

        def tx(conn: Connection) -> Task:
            row = self._row(conn, task_id, caller)
            return self._one(conn, row.id, caller)

        return await self.store.read(tx)

    async def tell_overdue(self, *, batch: int = 500) -> float | None:
        """Tell the creator and assignee of each task whose due passed unfinished, once, by
        `system` in the task's thread (the sweeper's look). Which of the processes looking at
        once tells of a task is decided by the statement that marks it. Returns when the
        next due of an unfinished task passes (store clock); None: none is to pass.

        A read looks first, and the write lock is taken only when a due has passed, as
        `Mailbox.expire_due` does: most looks find none."""
        rules.check_limit(batch, name="batch")

        def look(conn: Connection) -> tuple[bool, float | None]:
            now = self.store.clock()
            return task_rows.any_due_passed(conn, now), task_rows.next_due(conn, now)

        passed_any, next_due = await self.store.read(look)
        if not passed_any:
            return next_due

        def tx(conn: Connection) -> tuple[int, float | None]:
            now = self.store.clock()
            passed = task_rows.pass_dues(conn, now, batch)
            for row in passed:
                if TaskStatus(row.status) not in FINISHED:
                    self._tell_overdue(conn, row)
            return len(passed), task_rows.next_due(conn, now)

        while True:
            marked, next_at = await self.store.write(tx, lengthy=True, touches_accounts=False)
            if marked < batch:
                return next_at

    # -- inside the transaction --------------------------------------------------------------

    def _row(self, conn: Connection, task_id: str, viewer: Caller | None = None) -> Row[Any]:
        """The task; one the viewer is no party to, or one withheld from its assignee, does
        not exist for them: whoever is not told of a task hears the same answer as for an id
        no task has (ids made in one millisecond follow one another, so a neighbour of one's
        own is a guess that lands)."""
        row = task_rows.get_task(conn, task_id) if isinstance(task_id, str) else None
        hidden = (
            row is not None
            and viewer is not None
            and (
                viewer.agent not in (row.creator, row.assignee)
                or (row.withheld and viewer.agent == row.assignee != row.creator)
            )
        )
        if row is None or hidden:
            raise not_found(f"no task {rules.quoted(task_id)!r}", task_id=rules.quoted(task_id))
        return row

    def _one(self, conn: Connection, task_id: str, viewer: Caller) -> Task:
        row = self._row(conn, task_id)
        return task_rows.load(conn, [row], self.store.clock(), viewer.agent)[0]

    def _project(self, conn: Connection, caller: Caller) -> str | None:
        """The project the caller works in: its session's, else its agent's."""
        if caller.session_id is not None:
            session = agent_rows.get_session(conn, caller.session_id)
            if session is not None and session.project:
                return str(session.project)
        agent = agent_rows.get_agent(conn, caller.agent)
        return str(agent.project) if agent is not None and agent.project else None

    def _check_room(self, conn: Connection, caller: Caller) -> None:
        """Refuse a task past the caller's cap on open tasks delegated: each one stores a task
        and a message that never expires unread, so delegating alone must not fill the store."""
        limits = accounts.limits_in_effect(conn, self.settings, [caller.agent])[caller.agent]
        cap = limits.max_open_tasks_per_agent or self.settings.max_open_tasks_per_agent
        count = task_rows.open_count(conn, caller.agent)
        rules.check_cap(
            count,
            cap,
            f"{caller.agent} may have at most {cap} open tasks delegated and has {count}; "
            "cancel one, or wait until one is done or failed",
        )

    def _check_leader(
        self, conn: Connection, caller: Caller, project: str | None, now: float
    ) -> None:
        if project is None:
            raise forbidden("only a project's leader may delegate, and you have no project")
        # A seat taken before unvouched agents were kept off it, or by a local session under
        # the name of one, or before the owner withdrew the vouch.
        check_vouched(accounts.as_stored(conn, caller))
        beat_asking(conn, caller.session_id, now)  # a leader waking from sleep still leads
        holder = leases.holder_of(
            conn, lease_name(project), now=now, ttl_s=self.settings.offline_after_s
        )
        if holder != caller.agent:
            raise forbidden(
                f"only the leader of {project} may delegate (delegate_requires_leader)",
                project=project,
                leader=holder,
            )

    def _tell(
        self,
        conn: Connection,
        caller: Caller,
        row: Row[Any],
        current: TaskStatus,
        wanted: TaskStatus,
        note: str,
        result: Any,
    ) -> None:
        """Tell the other side of the task, in the task's thread: as a notice, which passes
        over a disabled agent or a full inbox and counts against no send rate, so that
        neither side's mail can hold a task in a status it has left."""
        other = row.creator if caller.agent == row.assignee else row.assignee
        if other == caller.agent:
            return  # a task one gave oneself: nobody else to tell
        if row.withheld and other == row.assignee:
            return  # withheld from the assignee, as is all news of it (unblocked or not)
        said = f"{caller.agent} moved task {row.id} from {current.value} to {wanted.value}"
        self.mailbox.send_in(
            conn,
            caller,
            other,
            f"{said}: {note}" if note.strip() else f"{said}.",
            # A title stored under an older one-line rule may hold a break the rule now refuses.
            subject=rules.as_one_line(f"[{wanted.value}] {row.title}")[
                : self.settings.max_subject_chars
            ],
            data={
                "task_id": row.id,
                "status": wanted.value,
                "from_status": current.value,
                "note": note,
                "result": result,
            },
            thread_id=row.message_id,
            kind=Kind.TASK,
            notice=True,  # the move stands even when the other side cannot take mail now
            envelope=True,  # `result` was checked by update_task
        )

    def _tell_overdue(self, conn: Connection, row: Row[Any]) -> None:
        """The post office's notice of a due passed, to each party who may hear of the task
        (not an assignee it is withheld from) and can take mail. Its own words only: a title
        is the creator's, and a `system` notice reads as verified."""
        parties = [row.creator]
        if row.assignee != row.creator and not row.withheld:
            parties.append(row.assignee)
        known = agent_rows.existing_names(conn, parties)
        roster = self.settings.agents
        to = [n for n in parties if known.get(n) and (roster is None or n in roster)]
        if not to:
            return
        due = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(row.due))
        self.mailbox.system_post_in(
            conn,
            to,
            f"Task {row.id} ({row.creator} -> {row.assignee}) was due at {due} and is still "
            f"{row.status}; `task` shows it.",
            subject="task overdue",
            data={
                "event": "task.overdue",
                "task_id": row.id,
                "status": row.status,
                "due": row.due,
                "creator": row.creator,
                "assignee": row.assignee,
            },
            thread_id=row.message_id,
        )
