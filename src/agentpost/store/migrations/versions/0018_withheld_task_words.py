"""A task's note or result written by an agent the other party blocks is withheld from them.

A block dropped the notice of a task's change, but the note and the result still reached the
blocker through the task's history and result. The new columns mark the words written while
the other party blocked their writer; what was written before stays as it was.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "task_history",
        sa.Column("withheld", sa.Boolean, nullable=False, server_default=sa.text("false")),
    )
    op.add_column(
        "tasks",
        sa.Column("result_withheld", sa.Boolean, nullable=False, server_default=sa.text("false")),
    )


def downgrade() -> None:
    # Code of 0017 knows nothing of withheld words: after a downgrade it shows them to the
    # blocker, as it did before this revision (and as 0006's downgrade shows withheld tasks).
    # In place, as 0006's: SQLite (3.35 and later) rebuilds no table, which the foreign keys
    # from task_history would refuse.
    op.drop_column("tasks", "result_withheld")
    op.drop_column("task_history", "withheld")
