"""A local session records when its process started, so a pid handed on is not taken for it.

A session's process that died without ending its row (killed, crashed, the machine rebooted)
left a pid the system soon gives to another process: the session looked live, kept its
reservations and its leader's seat, and after a reboot a command could be taken for its agent.
The start (clock ticks since boot, and the boot's id) tells the two apart. Sessions opened
before have none and are judged by their pid alone, as they were.

Revision ID: 0021
Revises: 0020
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sessions", sa.Column("pid_start", sa.Text))


def downgrade() -> None:
    op.drop_column("sessions", "pid_start")
