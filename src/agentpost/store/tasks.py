"""Queries on delegated tasks and their history.

A status change is a compare-and-set on the status it was decided from, so of two changes made
at once on the same task only the first applies; the other finds the task moved and is refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Row,
    and_,
    delete,
    exists,
    false,
    func,
    insert,
    or_,
    select,
    update,
)

from agentpost.domain.limits import never_stored
from agentpost.domain.models import Priority, Trust
from agentpost.domain.tasks import FINISHED, Task, TaskChange, TaskStatus, is_overdue
from agentpost.store import agents as agent_rows
from agentpost.store.schema import task_history, tasks


def insert_task(conn: Connection, **values: Any) -> None:
    conn.execute(insert(tasks).values(**values))


def record_change(
    conn: Connection,
    task_id: str,
    *,
    at: float,
    actor: str,
    from_status: TaskStatus | None,
    to_status: TaskStatus,
    note: str,
    trust: Trust,
    withheld: bool = False,
) -> None:
    """One change, with the trust its actor has as it makes it (and writes its note), and
    whether the other party blocks the actor as it does (its note `withheld` from them)."""
    conn.execute(
        insert(task_history).values(
            task_id=task_id,
            at=at,
            actor=actor,
            from_status=None if from_status is None else from_status.value,
            to_status=to_status.value,
            note=note,
            trust=trust.value,
            withheld=withheld,
        )
    )


def last_change(conn: Connection, task_id: str) -> Row[Any] | None:
    """The task's newest history entry."""
    query = select(task_history).where(task_history.c.task_id == task_id)
    return conn.execute(query.order_by(task_history.c.seq.desc()).limit(1)).first()


def get_task(conn: Connection, task_id: str) -> Row[Any] | None:
    if never_stored(task_id):
        return None
    return conn.execute(select(tasks).where(tasks.c.id == task_id)).first()


def move(
    conn: Connection,
    task_id: str,
    *,
    current: TaskStatus,
    wanted: TaskStatus,
    result: str | None,
    trust: Trust,
    now: float,
    withheld: bool = False,
) -> bool:
    """Set the status if it still is `current` (and the result, when given, with the `trust`
    of its author and whether it is `withheld` from the creator); False if not."""
    values: dict[str, Any] = {"status": wanted.value, "updated_at": now}
    if result is not None:
        values["result"] = result
        values["result_trust"] = trust.value
        values["result_withheld"] = withheld
    stmt = update(tasks).where(tasks.c.id == task_id, tasks.c.status == current.value)
    return bool(conn.execute(stmt.values(**values)).rowcount)


def _passing(now: float) -> ColumnElement[bool]:
    """The tasks whose due passed before `now` and that no sweep has marked yet."""
    return and_(tasks.c.due_passed_at.is_(None), tasks.c.due < now)  # ix_tasks_due serves it


def any_due_passed(conn: Connection, now: float) -> bool:
    """Whether `pass_dues` would mark any task at `now`: a read, so the sweeper's look takes
    the write lock only when a due has passed (mostly none has)."""
    return bool(conn.execute(select(exists().where(_passing(now)))).scalar())


def open_count(conn: Connection, creator: str) -> int:
    """How many tasks `creator` delegated that are not finished (those withheld from their
    assignee too: the creator sees them as delegated, so they count as any other)."""
    query = select(func.count()).where(tasks.c.creator == creator, tasks.c.status.not_in(_FINISHED))
    return int(conn.execute(query).scalar_one())


def pass_dues(conn: Connection, now: float, limit: int) -> list[Row[Any]]:
    """Mark up to `limit` tasks whose due passed before `now` as past it, and return them
    (those to tell of, and those finished already). The statement that marks decides: it marks
    a task only while it is unmarked, so of processes sweeping at once exactly one marks each
    task (on PostgreSQL the others wait on its row, then find it marked and pass it by)."""
    pending = select(tasks.c.id).where(_passing(now)).order_by(tasks.c.due).limit(limit)
    stmt = (
        update(tasks)
        .where(tasks.c.id.in_(pending.scalar_subquery()), _passing(now))
        .values(due_passed_at=now)
        .returning(
            tasks.c.id,
            tasks.c.creator,
            tasks.c.assignee,
            tasks.c.status,
            tasks.c.due,
            tasks.c.message_id,
            tasks.c.withheld,
        )
    )
    return sorted(conn.execute(stmt), key=lambda row: (row.due, row.id))


def next_due(conn: Connection, now: float) -> float | None:
    """When the soonest due of an unfinished task passes, from `now` on; None: no such due."""
    query = select(func.min(tasks.c.due)).where(
        tasks.c.due_passed_at.is_(None),
        tasks.c.due >= now,
        tasks.c.status.not_in([s.value for s in FINISHED]),
    )
    found = conn.execute(query).scalar()
    return None if found is None else float(found)


def purge_finished(conn: Connection, before: float, limit: int) -> int:
    """Retention: delete up to `limit` tasks that finished before `before`, with their
    history; returns how many went. Nothing moves out of an end state, so a task chosen here
    cannot be reopened meanwhile, and one not finished is never chosen."""
    ids = list(
        conn.execute(
            select(tasks.c.id)
            .where(tasks.c.status.in_(_FINISHED), tasks.c.updated_at < before)
            .order_by(tasks.c.updated_at)
            .limit(limit)
        ).scalars()
    )
    if ids:
        conn.execute(delete(task_history).where(task_history.c.task_id.in_(ids)))
        conn.execute(delete(tasks).where(tasks.c.id.in_(ids)))
    return len(ids)


_FINISHED = sorted(s.value for s in FINISHED)


def task_rows(
    conn: Connection,
    agent: str,
    *,
    assigned: bool,
    created: bool,
    status: TaskStatus | None,
    limit: int,
    before: str | None = None,
) -> list[Row[Any]]:
    """`agent`'s tasks (given to them, made by them, or both), newest first (those older
    than the task `before`, when given: ids sort by time)."""
    mine = []
    if assigned:
        mine.append(and_(tasks.c.assignee == agent, tasks.c.withheld.is_(false())))
    if created:
        mine.append(tasks.c.creator == agent)
    query = select(tasks).where(or_(*mine))
    if status is not None:
        query = query.where(tasks.c.status == status.value)
    if before is not None:
        query = query.where(tasks.c.id < before)
    return list(conn.execute(query.order_by(tasks.c.id.desc()).limit(limit)))


def histories(conn: Connection, task_ids: Sequence[str]) -> dict[str, list[TaskChange]]:
    """Each task's changes, oldest first."""
    out: dict[str, list[TaskChange]] = {task_id: [] for task_id in task_ids}
    if not task_ids:
        return out
    query = (
        select(task_history)
        .where(task_history.c.task_id.in_(list(task_ids)))
        .order_by(task_history.c.seq)
    )
    for row in conn.execute(query):
        out[row.task_id].append(
            TaskChange(
                at=row.at,
                actor=row.actor,
                from_status=None if row.from_status is None else TaskStatus(row.from_status),
                to_status=TaskStatus(row.to_status),
                note=row.note,
                trust=Trust(row.trust),
                withheld=bool(row.withheld),
            )
        )
    return out


def task_from_row(
    row: Row[Any], history: list[TaskChange], trust: Mapping[str, Trust], now: float
) -> Task:
    """A task as it stands at `now`; the assignee's trust as it stands now is looked up in
    `trust` (an agent not found there: untrusted), its words' as they were written."""
    status = TaskStatus(row.status)
    return Task(
        id=row.id,
        project=row.project,
        creator=row.creator,
        assignee=row.assignee,
        title=row.title,
        detail=row.detail,
        priority=Priority(row.priority),
        status=status,
        data=None if row.data is None else json.loads(row.data),
        due=row.due,
        result=None if row.result is None else json.loads(row.result),
        thread_id=row.message_id,
        created_at=row.created_at,
        updated_at=row.updated_at,
        history=history,
        creator_trust=Trust(row.creator_trust),
        assignee_trust=trust.get(row.assignee, Trust.UNTRUSTED),
        overdue=is_overdue(status, row.due, now),
        result_trust=None if row.result is None else Trust(row.result_trust or "untrusted"),
        result_withheld=bool(row.result_withheld),
    )


def load(conn: Connection, found: Sequence[Row[Any]], now: float, viewer: str) -> list[Task]:
    """Tasks of `found` rows as they stand at `now`, each with its history, as `viewer` may
    see them (without the words withheld from them)."""
    changes = histories(conn, [row.id for row in found])
    trust = agent_rows.trust_of(conn, sorted({r.assignee for r in found}))
    return [task_from_row(row, changes[row.id], trust, now).seen_by(viewer) for row in found]
