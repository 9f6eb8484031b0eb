"""The owner may set how many open tasks one agent may have delegated, as its other caps.

`max_open_tasks_per_agent` caps the tasks an agent delegated that are not finished yet; a NULL
keeps the setting, as the other per-agent limits do.

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("agent_limits", sa.Column("max_open_tasks_per_agent", sa.Integer))


def downgrade() -> None:
    """A row holding only a task cap then holds no override at all: it goes."""
    op.execute(
        "DELETE FROM agent_limits WHERE send_rate_per_minute IS NULL AND max_unacked IS NULL"
        " AND max_channels_per_agent IS NULL"
    )
    op.drop_column("agent_limits", "max_open_tasks_per_agent")
