"""Recipients who block a sender are told as expired when the TTL falls due.

The sender's receipt already showed such a recipient's mail as unread, then expired, as for a
recipient who never reads; but no `message.expired` event came, since nothing was delivered
to expire. The new table keeps, for direct mail with a TTL, whom it was withheld from and
when it falls due. Mail sent before has no rows: it stays as it was.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

Seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "silent_expiries",
        sa.Column("message_seq", Seq, sa.ForeignKey("messages.seq"), primary_key=True),
        sa.Column("recipient", sa.String(64), primary_key=True),
        sa.Column("expires_at", sa.Float, nullable=False),
    )
    op.create_index("ix_silent_expiries_due", "silent_expiries", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_silent_expiries_due", table_name="silent_expiries")
    op.drop_table("silent_expiries")
