"""A broadcast's receipts show the members who block its sender, as unread.

A channel message was delivered to every member but those who block its sender, and its
receipts listed only the others: the sender could read who blocks it off a broadcast's
receipts. The new table keeps whom a broadcast was withheld from. Broadcasts sent before have
no rows: they stay as they were.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

Seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "withheld",
        sa.Column("message_seq", Seq, sa.ForeignKey("messages.seq"), primary_key=True),
        sa.Column("recipient", sa.String(64), primary_key=True),
    )


def downgrade() -> None:
    op.drop_table("withheld")
