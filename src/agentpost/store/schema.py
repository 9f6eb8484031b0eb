"""The tables, in SQLAlchemy Core: one schema for SQLite and PostgreSQL.

Times are Unix seconds as floats, decided by the store's clock. `messages.seq` orders the log:
cursors, pages and "since" all count in it. Migrations create exactly this (a test compares).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    text,
)

metadata = MetaData()

# SQLite makes an INTEGER PRIMARY KEY the rowid; PostgreSQL wants a 64-bit identity.
SeqType = BigInteger().with_variant(Integer(), "sqlite")

agents = Table(
    "agents",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("description", Text, nullable=False, server_default=""),
    Column("project", String(128)),
    Column("capabilities", Text, nullable=False, server_default="[]"),
    Column("trust", String(16), nullable=False, server_default="verified"),
    Column("created_at", Float, nullable=False),
    Column("disabled_at", Float),
)

sessions = Table(
    "sessions",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("agent", String(64), ForeignKey("agents.name"), nullable=False),
    Column("transport", String(16), nullable=False),
    Column("host", String(255), nullable=False),
    Column("pid", Integer),
    Column("project", String(128)),
    Column("worktree", Text),
    Column("branch", Text),  # git allows branch names of any length
    Column("objective", Text, nullable=False, server_default=""),
    Column("status", String(16), nullable=False, server_default="active"),
    Column("derived_name", Boolean, nullable=False, server_default="0"),
    Column("started_at", Float, nullable=False),
    Column("heartbeat_at", Float, nullable=False),
    Column("ended_at", Float),
    Column("urgent_cursor", SeqType, nullable=False, server_default="0"),
    Index("ix_sessions_agent_live", "agent", "ended_at"),
)

channel_members = Table(
    "channel_members",
    metadata,
    Column("channel", String(64), primary_key=True),
    Column("agent", String(64), ForeignKey("agents.name"), primary_key=True),
    Column("joined_at", Float, nullable=False),
    Index("ix_channel_members_agent", "agent"),
)

messages = Table(
    "messages",
    metadata,
    Column("seq", SeqType, primary_key=True, autoincrement=True),
    Column("id", String(40), nullable=False, unique=True),
    Column("sender", String(64), nullable=False),
    Column("recipients", Text, nullable=False),
    Column("channel", String(64)),
    Column("kind", String(16), nullable=False),
    Column("subject", Text, nullable=False, server_default=""),
    Column("body", Text, nullable=False),
    Column("data", Text),
    Column("thread_id", String(64), nullable=False),
    Column("reply_to", String(40)),
    Column("priority", String(16), nullable=False),
    Column("must_read", Boolean, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float),
    Column("trust", String(16), nullable=False),
    Index("ix_messages_thread", "thread_id", "seq"),
    Index("ix_messages_sender", "sender", "seq"),
    Index("ix_messages_channel", "channel", "seq"),
    Index("ix_messages_created", "created_at"),
)

deliveries = Table(
    "deliveries",
    metadata,
    Column("recipient", String(64), primary_key=True),
    Column("message_seq", SeqType, ForeignKey("messages.seq"), primary_key=True),
    Column("state", String(16), nullable=False),
    Column("urgent", Boolean, nullable=False),
    Column("expires_at", Float),
    Column("read_at", Float),
    Column("acked_at", Float),
    Column("expired_at", Float),
    # Covers the unread count too (expires_at is in it), so counting never reads the table.
    Index("ix_deliveries_open", "recipient", "state", "message_seq", "expires_at"),
    Index("ix_deliveries_message", "message_seq"),
    # Only mail with a TTL is ever due: the sweep finds it without reading the rest.
    Index(
        "ix_deliveries_expiry",
        "expires_at",
        sqlite_where=text("expires_at IS NOT NULL"),
        postgresql_where=text("expires_at IS NOT NULL"),
    ),
)

rate_windows = Table(
    "rate_windows",
    metadata,
    Column("key", String(160), primary_key=True),
    Column("window_start", Float, nullable=False),
    Column("count", Integer, nullable=False),
)
