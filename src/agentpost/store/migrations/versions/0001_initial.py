"""The first schema: agents, sessions, channels, messages, deliveries, rate windows.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

Seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

FTS_DDL = [
    "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5("
    "subject, body, content='messages', content_rowid='seq', tokenize='unicode61')",
    "CREATE TRIGGER IF NOT EXISTS messages_fts_ai AFTER INSERT ON messages BEGIN "
    "INSERT INTO messages_fts(rowid, subject, body) VALUES (new.seq, new.subject, new.body); END",
    "CREATE TRIGGER IF NOT EXISTS messages_fts_ad AFTER DELETE ON messages BEGIN "
    "INSERT INTO messages_fts(messages_fts, rowid, subject, body) "
    "VALUES ('delete', old.seq, old.subject, old.body); END",
    "CREATE TRIGGER IF NOT EXISTS messages_fts_au AFTER UPDATE OF subject, body ON messages BEGIN "
    "INSERT INTO messages_fts(messages_fts, rowid, subject, body) "
    "VALUES ('delete', old.seq, old.subject, old.body); "
    "INSERT INTO messages_fts(rowid, subject, body) VALUES (new.seq, new.subject, new.body); END",
]
FTS_DROP = [
    "DROP TRIGGER IF EXISTS messages_fts_au",
    "DROP TRIGGER IF EXISTS messages_fts_ad",
    "DROP TRIGGER IF EXISTS messages_fts_ai",
    "DROP TABLE IF EXISTS messages_fts",
]


def upgrade() -> None:
    op.create_table(
        "agents",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        sa.Column("project", sa.String(128)),
        sa.Column("capabilities", sa.Text, nullable=False, server_default="[]"),
        sa.Column("trust", sa.String(16), nullable=False, server_default="verified"),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("disabled_at", sa.Float),
    )
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("agent", sa.String(64), sa.ForeignKey("agents.name"), nullable=False),
        sa.Column("transport", sa.String(16), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer),
        sa.Column("project", sa.String(128)),
        sa.Column("worktree", sa.Text),
        sa.Column("branch", sa.Text),
        sa.Column("objective", sa.Text, nullable=False, server_default=""),
        sa.Column("status", sa.String(16), nullable=False, server_default="active"),
        sa.Column("derived_name", sa.Boolean, nullable=False, server_default="0"),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("heartbeat_at", sa.Float, nullable=False),
        sa.Column("ended_at", sa.Float),
        sa.Column("urgent_cursor", Seq, nullable=False, server_default="0"),
    )
    op.create_index("ix_sessions_agent_live", "sessions", ["agent", "ended_at"])
    op.create_table(
        "channel_members",
        sa.Column("channel", sa.String(64), primary_key=True),
        sa.Column("agent", sa.String(64), sa.ForeignKey("agents.name"), primary_key=True),
        sa.Column("joined_at", sa.Float, nullable=False),
    )
    op.create_index("ix_channel_members_agent", "channel_members", ["agent"])
    op.create_table(
        "messages",
        sa.Column("seq", Seq, primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(40), nullable=False, unique=True),
        sa.Column("sender", sa.String(64), nullable=False),
        sa.Column("recipients", sa.Text, nullable=False),
        sa.Column("channel", sa.String(64)),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("subject", sa.Text, nullable=False, server_default=""),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("data", sa.Text),
        sa.Column("thread_id", sa.String(64), nullable=False),
        sa.Column("reply_to", sa.String(40)),
        sa.Column("priority", sa.String(16), nullable=False),
        sa.Column("must_read", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float),
        sa.Column("trust", sa.String(16), nullable=False),
    )
    op.create_index("ix_messages_thread", "messages", ["thread_id", "seq"])
    op.create_index("ix_messages_sender", "messages", ["sender", "seq"])
    op.create_index("ix_messages_channel", "messages", ["channel", "seq"])
    op.create_index("ix_messages_created", "messages", ["created_at"])
    op.create_table(
        "deliveries",
        sa.Column("recipient", sa.String(64), primary_key=True),
        sa.Column("message_seq", Seq, sa.ForeignKey("messages.seq"), primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("urgent", sa.Boolean, nullable=False),
        sa.Column("expires_at", sa.Float),
        sa.Column("read_at", sa.Float),
        sa.Column("acked_at", sa.Float),
        sa.Column("expired_at", sa.Float),
    )
    op.create_index(
        "ix_deliveries_open", "deliveries", ["recipient", "state", "message_seq", "expires_at"]
    )
    op.create_index("ix_deliveries_message", "deliveries", ["message_seq"])
    op.create_index(
        "ix_deliveries_expiry",
        "deliveries",
        ["expires_at"],
        sqlite_where=sa.text("expires_at IS NOT NULL"),
        postgresql_where=sa.text("expires_at IS NOT NULL"),
    )
    op.create_table(
        "rate_windows",
        sa.Column("key", sa.String(160), primary_key=True),
        sa.Column("window_start", sa.Float, nullable=False),
        sa.Column("count", sa.Integer, nullable=False),
    )
    if op.get_bind().dialect.name == "sqlite":
        for statement in FTS_DDL:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for statement in FTS_DROP:
            op.execute(statement)
    for table in ("rate_windows", "deliveries", "messages", "channel_members", "sessions"):
        op.drop_table(table)
    op.drop_table("agents")
