"""The service's tables: per-agent limits, keys, audit, idempotency, blocks, events, webhooks.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

Seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

TABLES = (
    "webhook_deliveries",
    "webhooks",
    "events",
    "blocks",
    "idempotency",
    "audit",
    "keys",
    "agent_limits",
)


def upgrade() -> None:
    op.create_table(
        "agent_limits",
        sa.Column("agent", sa.String(64), sa.ForeignKey("agents.name"), primary_key=True),
        sa.Column("send_rate_per_minute", sa.Integer),
        sa.Column("max_unacked", sa.Integer),
    )
    op.create_table(
        "keys",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("agent", sa.String(64), sa.ForeignKey("agents.name"), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False, unique=True),
        sa.Column("admin", sa.Boolean, nullable=False, server_default="0"),
        sa.Column("label", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("revoked_at", sa.Float),
        sa.Column("last_used_at", sa.Float),
    )
    op.create_index("ix_keys_agent", "keys", ["agent"])
    op.create_table(
        "audit",
        sa.Column("seq", Seq, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("actor", sa.String(64), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.Text),
        sa.Column("ip", sa.String(64)),
        sa.Column("detail", sa.Text),
    )
    op.create_index("ix_audit_at", "audit", ["at"])
    op.create_index("ix_audit_actor", "audit", ["actor", "seq"])
    op.create_table(
        "idempotency",
        sa.Column("agent", sa.String(64), primary_key=True),
        sa.Column("key", sa.String(200), primary_key=True),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("response", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_idempotency_created", "idempotency", ["created_at"])
    op.create_table(
        "blocks",
        sa.Column("recipient", sa.String(64), sa.ForeignKey("agents.name"), primary_key=True),
        sa.Column("sender", sa.String(64), primary_key=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("created_by", sa.String(64), nullable=False),
    )
    op.create_table(
        "events",
        sa.Column("seq", Seq, primary_key=True, autoincrement=True),
        sa.Column("agent", sa.String(64), nullable=False),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("message_id", sa.String(40)),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("data", sa.Text),
    )
    op.create_index("ix_events_agent", "events", ["agent", "seq"])
    op.create_index("ix_events_at", "events", ["at"])
    op.create_table(
        "webhooks",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("agent", sa.String(64), sa.ForeignKey("agents.name"), nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("events", sa.Text, nullable=False),
        sa.Column("secret", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("deleted_at", sa.Float),
        sa.Column("cursor", Seq, nullable=False, server_default="0"),
    )
    op.create_index("ix_webhooks_agent", "webhooks", ["agent"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("webhook_id", sa.String(40), sa.ForeignKey("webhooks.id"), nullable=False),
        sa.Column("event_seq", Seq, nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_attempt_at", sa.Float),
        sa.Column("last_status", sa.Integer),
        sa.Column("last_error", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("delivered_at", sa.Float),
    )
    op.create_index("ix_webhook_deliveries_due", "webhook_deliveries", ["state", "next_attempt_at"])
    op.create_index(
        "ix_webhook_deliveries_hook", "webhook_deliveries", ["webhook_id", "created_at"]
    )


def downgrade() -> None:
    for table in TABLES:
        op.drop_table(table)
