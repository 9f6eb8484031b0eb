"""A task delegated by a sender its assignee blocks is withheld from the assignee.

Blocks dropped the task's message but not the task: its title, detail and data still showed in
the assignee's task list. The new column marks such tasks; the creator still sees them as
delegated, so the block stays silent. Tasks made before stay as they were.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "tasks",
        sa.Column("withheld", sa.Boolean, nullable=False, server_default=sa.text("false")),
    )


def downgrade() -> None:
    # SQLite drops a plain column in place (3.35 and later): no table rebuild, which its
    # foreign keys from task_history would refuse.
    op.drop_column("tasks", "withheld")
