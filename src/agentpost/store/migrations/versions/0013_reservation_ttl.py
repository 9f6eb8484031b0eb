"""A reservation remembers the ttl it was last given: renewing it without one keeps that ttl.

Renewal without a ttl used to give every reservation the default hour, shortening a claim made
for a day. Existing rows have none recorded: renewing one without a ttl keeps the longer of the
default and what it has left.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("reservations", sa.Column("ttl_s", sa.Float))


def downgrade() -> None:
    op.drop_column("reservations", "ttl_s")
