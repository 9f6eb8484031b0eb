"""A reservation remembers the ttl it was last given: renewing it without one keeps that ttl.

Renewal without a ttl used to give every reservation the default hour, shortening a claim made
for a day. Existing rows have none recorded: renewing one without a ttl keeps the longer of the
default and what it has left.

Claims are compared in one Unicode spelling (NFC) from now on: each stored one is spelled so,
or a claim made in NFD (as macOS writes `é`) would neither conflict with nor be released by
its NFC spelling until it lapsed.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import unicodedata

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("reservations", sa.Column("ttl_s", sa.Float))
    conn = op.get_bind()
    claims = conn.execute(sa.text("SELECT id, pattern FROM reservations")).all()
    for claim_id, pattern in claims:
        spelled = unicodedata.normalize("NFC", pattern)
        if spelled != pattern:
            conn.execute(
                sa.text("UPDATE reservations SET pattern = :p WHERE id = :id"),
                {"p": spelled, "id": claim_id},
            )


def downgrade() -> None:
    op.drop_column("reservations", "ttl_s")
