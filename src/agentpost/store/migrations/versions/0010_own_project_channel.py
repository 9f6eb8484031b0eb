"""An agent's membership of its own project's channel is dropped: it belongs there by project.

Before joining one's own project's channel recorded nothing, `join('#shop')` by an agent of
project shop stored a membership, which outlived the project: an agent that moved to another
project (or cleared it) still got #shop's broadcasts and read its history. Such rows are
deleted; the agent stays in the channel by its project, and leaves it with the project.

A membership of a channel other than the agent's project is kept, whenever it was recorded:
a row of an agent that has already moved away cannot be told from a later, deliberate join.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "DELETE FROM channel_members WHERE EXISTS (SELECT 1 FROM agents"
        " WHERE agents.name = channel_members.agent AND agents.project = channel_members.channel)"
    )


def downgrade() -> None:
    """Nothing to put back: the agents are members of those channels by their projects."""
