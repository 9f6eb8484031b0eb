"""The expiry index leads with the delivery's state: the look for due mail walks unread mail only.

Only unread (`queued`) mail falls due, but the index held every delivery with a TTL by its
expiry alone, so each look for due mail (the sweeper's, at every TTL that falls due, and
hourly) stepped through every tombstone and all mail read before its TTL passed, which stay
until retention removes them: some 3.6 ms at 20,000 read on SQLite, growing with them. Led by
the state, the look starts at the unread mail.

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    _expiry_index(["state", "expires_at"])


def downgrade() -> None:
    _expiry_index(["expires_at"])


def _expiry_index(columns: list[str]) -> None:
    """The index made anew on `columns`, holding only mail with a TTL, as 0001 made it."""
    op.drop_index("ix_deliveries_expiry", table_name="deliveries")
    op.create_index(
        "ix_deliveries_expiry",
        "deliveries",
        columns,
        sqlite_where=sa.text("expires_at IS NOT NULL"),
        postgresql_where=sa.text("expires_at IS NOT NULL"),
    )
