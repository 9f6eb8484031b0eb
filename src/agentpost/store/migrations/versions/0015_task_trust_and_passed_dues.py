"""A task's words keep the trust they were written with, as a message keeps its sender's.

A task's title and detail, each note of its history and its result were framed with their
author's trust as it was when they were read: what an agent wrote before the owner vouched for
it read as verified afterwards, and what it wrote while vouched for read as untrusted once the
vouch was withdrawn. Now `tasks.creator_trust`, `tasks.result_trust` and `task_history.trust`
hold it. Rows written before this revision have no record of it: they take their author's trust
as it stands at the upgrade, the best that is known (an author no longer found: `untrusted`).

A task's due passing is told once to its creator and assignee by the sweep, which marks the
task in `tasks.due_passed_at` as it tells (`agentpost.store.tasks.pass_dues`). Tasks whose due
had passed before this revision are marked passed at the upgrade, untold: nothing told of a due
before, and a flood of notices of long-past dues at the first sweep would tell nobody anything
the task lists do not already say (`overdue`).

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def _trust_of(column: str) -> str:
    return f"(SELECT trust FROM agents WHERE agents.name = {column})"


def upgrade() -> None:
    op.add_column(
        "tasks",
        sa.Column("creator_trust", sa.String(16), nullable=False, server_default="untrusted"),
    )
    op.add_column("tasks", sa.Column("result_trust", sa.String(16)))
    op.add_column(
        "task_history",
        sa.Column("trust", sa.String(16), nullable=False, server_default="untrusted"),
    )
    known = "coalesce({}, 'untrusted')"
    op.execute(
        f"UPDATE tasks SET creator_trust = {known.format(_trust_of('tasks.creator'))}, "
        "result_trust = CASE WHEN result IS NULL THEN NULL "
        f"ELSE {known.format(_trust_of('tasks.assignee'))} END"
    )
    op.execute(f"UPDATE task_history SET trust = {known.format(_trust_of('task_history.actor'))}")

    op.add_column("tasks", sa.Column("due_passed_at", sa.Float))
    op.create_index("ix_tasks_due", "tasks", ["due_passed_at", "due"])
    op.get_bind().execute(
        sa.text("UPDATE tasks SET due_passed_at = :now WHERE due < :now"), {"now": time.time()}
    )


def downgrade() -> None:
    # SQLite drops a plain column in place (3.35 and later): no table rebuild, which the
    # foreign key from task_history would refuse.
    op.drop_index("ix_tasks_due", "tasks")
    op.drop_column("tasks", "due_passed_at")
    op.drop_column("task_history", "trust")
    op.drop_column("tasks", "result_trust")
    op.drop_column("tasks", "creator_trust")
