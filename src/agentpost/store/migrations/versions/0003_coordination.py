"""Coordination: leases (leadership), delegated tasks and their history, file reservations, and
the rule that a request is answered once.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

Seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

RESPONSE_ONLY = sa.text("kind = 'response'")


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("holder", sa.String(64)),
        sa.Column("session_id", sa.String(40)),
        sa.Column("term", Seq, nullable=False),
        sa.Column("acquired_at", sa.Float, nullable=False),
    )
    op.create_index("ix_leases_session", "leases", ["session_id"])
    op.create_table(
        "tasks",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("project", sa.String(128)),
        sa.Column("creator", sa.String(64), nullable=False),
        sa.Column("assignee", sa.String(64), nullable=False),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("detail", sa.Text, nullable=False, server_default=""),
        sa.Column("priority", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("data", sa.Text),
        sa.Column("due", sa.Float),
        sa.Column("result", sa.Text),
        sa.Column("message_id", sa.String(40), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_index("ix_tasks_assignee", "tasks", ["assignee", "status"])
    op.create_index("ix_tasks_creator", "tasks", ["creator", "status"])
    op.create_table(
        "task_history",
        sa.Column("seq", Seq, primary_key=True, autoincrement=True),
        sa.Column("task_id", sa.String(40), sa.ForeignKey("tasks.id"), nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("actor", sa.String(64), nullable=False),
        sa.Column("from_status", sa.String(16)),
        sa.Column("to_status", sa.String(16), nullable=False),
        sa.Column("note", sa.Text, nullable=False, server_default=""),
    )
    op.create_index("ix_task_history_task", "task_history", ["task_id", "seq"])
    op.create_table(
        "reservations",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("project", sa.String(128), nullable=False),
        sa.Column("agent", sa.String(64), nullable=False),
        sa.Column("session_id", sa.String(40)),
        sa.Column("worktree", sa.Text),
        sa.Column("pattern", sa.Text, nullable=False),
        sa.Column("exclusive", sa.Boolean, nullable=False),
        sa.Column("reason", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
        sa.Column("released_at", sa.Float),
    )
    op.create_index(
        "ix_reservations_project", "reservations", ["project", "released_at", "expires_at"]
    )
    op.create_index("ix_reservations_agent", "reservations", ["agent", "released_at"])
    op.create_index(
        "ux_messages_response",
        "messages",
        ["reply_to"],
        unique=True,
        sqlite_where=RESPONSE_ONLY,
        postgresql_where=RESPONSE_ONLY,
    )


def downgrade() -> None:
    op.drop_index("ux_messages_response", table_name="messages")
    for table in ("reservations", "task_history", "tasks", "leases"):
        op.drop_table(table)
