"""A send writes to four B-trees fewer: its commit writes some 15 pages where it wrote 20.

Each index a send inserts into is one more page in the WAL at its commit (some 4-6 µs a page
here), paid before the sender hears back. Four held what a send never needs:

- `ix_messages_channel` held every direct message under a NULL channel; it now holds
  broadcasts only, the rows every query on it asks for (`channel = ?`, `channel IN (...)`).
- `ix_messages_created`, `ix_events_at` and `ix_audit_at` ordered rows by time for the
  retention sweep alone. Rows are written in time order, so the sweep now walks them by `seq`,
  from the oldest up to the first one still kept (`store.retained`).

Revision ID: 0023
Revises: 0022
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

_BY_TIME = [
    ("ix_messages_created", "messages", "created_at"),
    ("ix_events_at", "events", "at"),
    ("ix_audit_at", "audit", "at"),
]


def upgrade() -> None:
    for name, table, _ in _BY_TIME:
        op.drop_index(name, table_name=table)
    op.drop_index("ix_messages_channel", table_name="messages")
    op.create_index(
        "ix_messages_channel",
        "messages",
        ["channel", "seq"],
        sqlite_where=sa.text("channel IS NOT NULL"),
        postgresql_where=sa.text("channel IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_messages_channel", table_name="messages")
    op.create_index("ix_messages_channel", "messages", ["channel", "seq"])
    for name, table, column in _BY_TIME:
        op.create_index(name, table, [column])
