"""A webhook remembers the key that made it, so revoking that key deletes it.

A key revoked after a leak stopped every request made with it, but not a webhook it had made:
that went on sending the agent's mail to whatever URL it named. Webhooks made before have no
key: they stay until their agent deletes them, or the agent is disabled.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("webhooks", sa.Column("key_id", sa.String(40)))
    op.create_index("ix_webhooks_key", "webhooks", ["key_id"])


def downgrade() -> None:
    # Plain ALTER on both databases (SQLite 3.35+): a batch would rebuild the table, which
    # the deliveries' foreign key forbids.
    op.drop_index("ix_webhooks_key", table_name="webhooks")
    op.drop_column("webhooks", "key_id")
