"""The owner may set how many channels one agent may have joined, as its send rate and inbox cap.

`max_channels_per_agent` caps the channels an agent joins (each join of a new name makes one);
a NULL keeps the setting, as the other per-agent limits do.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("agent_limits", sa.Column("max_channels_per_agent", sa.Integer))


def downgrade() -> None:
    """A row holding only a channel cap then holds no override at all: it goes."""
    op.execute(
        "DELETE FROM agent_limits WHERE send_rate_per_minute IS NULL AND max_unacked IS NULL"
    )
    op.drop_column("agent_limits", "max_channels_per_agent")
