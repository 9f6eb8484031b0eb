"""A session remembers when it last said what it is doing: that, not its heartbeat, picks
which of an agent's live sessions `who` shows.

Two windows of one agent both heartbeat in the background, so "the freshest heartbeat" swapped
the branch, objective and status `who` showed with every beat. A session said what it was
doing when it opened, at the latest: existing rows take their start.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sessions", sa.Column("said_at", sa.Float))
    op.execute("UPDATE sessions SET said_at = started_at")


def downgrade() -> None:
    op.drop_column("sessions", "said_at")
