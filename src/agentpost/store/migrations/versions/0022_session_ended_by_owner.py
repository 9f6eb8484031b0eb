"""A session the owner ended by disabling its agent says so, after the agent is enabled too.

Disabling an agent ends its sessions while their `agentpost mcp` may run on; a command its
client runs beside one is that agent's, refused, never the owner's. Which sessions disabling
ended was read from the agent's `disabled_at`, which enabling clears: the old process, still
refused on every call, then let a command beside it speak as the owner. Sessions disabling
ended before are marked as that reading found them: of an agent disabled now, those ended since.

Revision ID: 0022
Revises: 0021
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "sessions",
        sa.Column("ended_by_owner", sa.Boolean, nullable=False, server_default=sa.text("false")),
    )
    op.execute(
        "UPDATE sessions SET ended_by_owner = true WHERE transport = 'stdio' AND ended_at >= "
        "(SELECT disabled_at FROM agents WHERE agents.name = sessions.agent)"
    )


def downgrade() -> None:
    # In place, as 0021's: SQLite (3.35 and later) rebuilds no table.
    op.drop_column("sessions", "ended_by_owner")
