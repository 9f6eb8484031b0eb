"""The tables, in SQLAlchemy Core: one schema for SQLite and PostgreSQL.

Times are Unix seconds as floats, decided by the store's clock. `messages.seq` orders the log:
cursors, pages and "since" all count in it. Migrations create exactly this (a test compares).

A partial index names its rows for SQLite only (`sqlite_where`); `store.postgres` says the
same for PostgreSQL when it loads. Naming `postgresql_where` here would load SQLAlchemy's
PostgreSQL dialect into every process, about 90 ms of each local agent's start.
"""

from __future__ import annotations

from typing import Any

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
    literal,
    select,
    text,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

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
    # What tells the session's process from a later one given its pid (`notes.process_start`).
    Column("pid_start", Text),
    Column("project", String(128)),
    Column("worktree", Text),
    Column("branch", Text),  # git allows branch names of any length
    Column("objective", Text, nullable=False, server_default=""),
    Column("status", String(16), nullable=False, server_default="active"),
    Column("derived_name", Boolean, nullable=False, server_default="0"),
    Column("started_at", Float, nullable=False),
    Column("heartbeat_at", Float, nullable=False),
    # When the session last said what it is doing (opened, or set its status or objective):
    # of an agent's live sessions, the one that said so last speaks for it in `who`.
    Column("said_at", Float),
    Column("ended_at", Float),
    # Ended as the owner disabled its agent (0022): its process may run on, and a command
    # beside it is refused as the agent's (`Presence.session_of_process`), enabled or not.
    Column("ended_by_owner", Boolean, nullable=False, server_default=text("false")),
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
    # Broadcasts only (0023): a direct message's send need not write to it.
    Index("ix_messages_channel", "channel", "seq", sqlite_where=text("channel IS NOT NULL")),
    sqlite_autoincrement=True,
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
    # Only unread mail with a TTL is ever due: the sweep finds it without reading the rest,
    # and read mail past its TTL (kept until retention) stays out of the range it walks (0019).
    Index(
        "ix_deliveries_expiry",
        "state",
        "expires_at",
        sqlite_where=text("expires_at IS NOT NULL"),
    ),
)

silent_expiries = Table(
    "silent_expiries",
    metadata,
    # A direct message's recipient who blocks its sender gets nothing, but when its TTL falls
    # due the sender is told it expired, as for a recipient who never reads: the block stays
    # silent in the event log as in the receipts. Only mail with a TTL has rows here.
    Column("message_seq", SeqType, ForeignKey("messages.seq"), primary_key=True),
    Column("recipient", String(64), primary_key=True),
    Column("expires_at", Float, nullable=False),
    Index("ix_silent_expiries_due", "expires_at"),
)

withheld = Table(
    "withheld",
    metadata,
    # Recipients (or channel members) a message was withheld from because they block its
    # sender: a broadcast's receipts show them as unread, as for members who never read, and
    # retention keeps such mail as long as unread mail, so the block stays silent.
    Column("message_seq", SeqType, ForeignKey("messages.seq"), primary_key=True),
    Column("recipient", String(64), primary_key=True),
)

rate_windows = Table(
    "rate_windows",
    metadata,
    Column("key", String(160), primary_key=True),
    Column("window_start", Float, nullable=False),
    Column("count", Integer, nullable=False),
)

# -- the service: keys, audit, idempotency, blocks, events, webhooks (migration 0002) ----------

agent_limits = Table(
    "agent_limits",
    metadata,
    Column("agent", String(64), ForeignKey("agents.name"), primary_key=True),
    Column("send_rate_per_minute", Integer),
    Column("max_unacked", Integer),
    Column("max_channels_per_agent", Integer),  # migration 0016
    Column("max_open_tasks_per_agent", Integer),  # migration 0017
)
"""The owner's per-agent overrides of the settings' limits; a NULL keeps the default."""

keys = Table(
    "keys",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("agent", String(64), ForeignKey("agents.name"), nullable=False),
    Column("hash", String(64), nullable=False, unique=True),  # SHA-256 hex of the secret
    Column("admin", Boolean, nullable=False, server_default="0"),
    Column("label", Text, nullable=False, server_default=""),
    Column("created_at", Float, nullable=False),
    Column("revoked_at", Float),
    Column("last_used_at", Float),
    Index("ix_keys_agent", "agent"),
)

audit = Table(
    "audit",
    metadata,
    Column("seq", SeqType, primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False),
    Column("actor", String(64), nullable=False),  # an agent, or "-" before authentication
    Column("action", String(64), nullable=False),
    Column("target", Text),
    Column("ip", String(64)),
    Column("detail", Text),  # JSON
    Index("ix_audit_actor", "actor", "seq"),
)

idempotency = Table(
    "idempotency",
    metadata,
    Column("agent", String(64), primary_key=True),
    Column("key", String(200), primary_key=True),
    Column("request_hash", String(64), nullable=False),
    Column("response", Text, nullable=False),  # JSON of the first answer
    Column("created_at", Float, nullable=False),
    Index("ix_idempotency_created", "created_at"),
)

blocks = Table(
    "blocks",
    metadata,
    Column("recipient", String(64), ForeignKey("agents.name"), primary_key=True),
    Column("sender", String(64), primary_key=True),
    Column("created_at", Float, nullable=False),
    Column("created_by", String(64), nullable=False),
)

events = Table(
    "events",
    metadata,
    Column("seq", SeqType, primary_key=True, autoincrement=True),
    Column("agent", String(64), nullable=False),  # whose stream it is in
    Column("type", String(32), nullable=False),  # message.created|read|acked|expired, ...
    Column("message_id", String(40)),
    Column("at", Float, nullable=False),
    Column("data", Text),  # JSON
    Index("ix_events_agent", "agent", "seq"),
    sqlite_autoincrement=True,
)
"""Each agent's event log: what SSE streams (ids are `seq`) and what webhooks deliver."""

webhooks = Table(
    "webhooks",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("agent", String(64), ForeignKey("agents.name"), nullable=False),
    Column("url", Text, nullable=False),
    Column("events", Text, nullable=False),  # JSON list of event types
    Column("secret", Text, nullable=False),  # kept to sign with; shown to the agent once
    Column("created_at", Float, nullable=False),
    Column("deleted_at", Float),
    Column("cursor", SeqType, nullable=False, server_default="0"),  # events.seq enqueued so far
    Column("key_id", String(40)),  # the key that made it: revoking the key deletes it
    Index("ix_webhooks_agent", "agent"),
    Index("ix_webhooks_key", "key_id"),
)

webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("webhook_id", String(40), ForeignKey("webhooks.id"), nullable=False),
    Column("event_seq", SeqType, nullable=False),
    Column("event", String(32), nullable=False),
    Column("payload", Text, nullable=False),
    Column("state", String(16), nullable=False),  # pending|delivered|failed
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("next_attempt_at", Float),
    Column("last_status", Integer),
    Column("last_error", Text),
    Column("created_at", Float, nullable=False),
    Column("delivered_at", Float),
    Index("ix_webhook_deliveries_due", "state", "next_attempt_at"),
    Index("ix_webhook_deliveries_hook", "webhook_id", "created_at"),
)

# -- coordination: leases, tasks, reservations, one response per request (migration 0003) -----

leases = Table(
    "leases",
    metadata,
    Column("name", String(200), primary_key=True),  # "leader:<project>", "aside:<session>"
    Column("holder", String(64)),  # the agent when it claimed; NULL once released
    Column("session_id", String(40)),  # the holder's session: the lease lives while it does
    Column("term", SeqType, nullable=False),  # grows with every new holder, never reused
    Column("acquired_at", Float, nullable=False),  # taken, or last released
    Index("ix_leases_session", "session_id"),
)
"""Named locks with a fencing term, held while the holder's session is live: every heartbeat
renews the lease and a session that ends or goes quiet lets it lapse, with no write of its own.
A release clears the holder; the row lives on, so its term keeps growing across holders, until
nobody has held it for the retention (`leases.forget_lapsed`: the next term still grows)."""

tasks = Table(
    "tasks",
    metadata,
    Column("id", String(40), primary_key=True),  # "t_…"
    Column("project", String(128)),
    Column("creator", String(64), nullable=False),
    Column("assignee", String(64), nullable=False),
    Column("title", Text, nullable=False),
    Column("detail", Text, nullable=False, server_default=""),
    Column("priority", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("data", Text),  # JSON
    Column("due", Float),
    Column("result", Text),  # JSON
    Column("message_id", String(40), nullable=False),  # the `task` message that delivered it
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    # The assignee blocked the creator when it was delegated: only the creator sees it.
    Column("withheld", Boolean, nullable=False, server_default=text("false")),
    # The trust each side's words were written with, as a message keeps its sender's: the
    # creator's title and detail; the result (NULL while there is none).
    Column("creator_trust", String(16), nullable=False, server_default="untrusted"),
    Column("result_trust", String(16)),
    # The result was given while the creator blocked the assignee: withheld from the creator.
    Column("result_withheld", Boolean, nullable=False, server_default=text("false")),  # 0018
    # When a sweep saw its due pass (and told its parties, were it not finished): once only.
    Column("due_passed_at", Float),
    Index("ix_tasks_assignee", "assignee", "status"),
    Index("ix_tasks_creator", "creator", "status"),
    Index("ix_tasks_due", "due_passed_at", "due"),  # the dues still to pass, soonest first
)

task_history = Table(
    "task_history",
    metadata,
    Column("seq", SeqType, primary_key=True, autoincrement=True),
    Column("task_id", String(40), ForeignKey("tasks.id"), nullable=False),
    Column("at", Float, nullable=False),
    Column("actor", String(64), nullable=False),
    Column("from_status", String(16)),  # NULL for the creation
    Column("to_status", String(16), nullable=False),
    Column("note", Text, nullable=False, server_default=""),
    Column("trust", String(16), nullable=False, server_default="untrusted"),  # the actor's
    # Written while the other party blocked the actor: the note is withheld from them (0018).
    Column("withheld", Boolean, nullable=False, server_default=text("false")),
    Index("ix_task_history_task", "task_id", "seq"),
)

reservations = Table(
    "reservations",
    metadata,
    Column("id", String(40), primary_key=True),  # "r_…"
    Column("project", String(128), nullable=False),
    Column("agent", String(64), nullable=False),
    Column("session_id", String(40)),
    Column("worktree", Text),  # where the holder works: the commit guard lets it through
    Column("pattern", Text, nullable=False),  # a path or git-style glob, relative to the root
    Column("exclusive", Boolean, nullable=False),
    Column("reason", Text, nullable=False, server_default=""),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Column("ttl_s", Float),  # the ttl last given: a renewal without one keeps it
    Column("released_at", Float),
    Index("ix_reservations_project", "project", "released_at", "expires_at"),
    Index("ix_reservations_agent", "agent", "released_at"),
)

# A request is answered once: the store refuses a second response, whoever races for it.
Index(
    "ux_messages_response",
    messages.c.reply_to,
    unique=True,
    sqlite_where=text("kind = 'response'"),
)


ONE_ROW = select(literal(1).label("one")).subquery("one_row")
"""A table of one row: the base of a read that must answer with a row even when the tables
outer-joined to it hold no match (several lookups in one statement)."""


class by_code_point(FunctionElement[str]):
    """A text column to order by, in the order of its characters' code points on both
    databases: SQLite compares bytes, as does PostgreSQL's "C" collation, where the
    database's own collation (`en_US.UTF-8`, an ICU locale) would put `A` before `a_a`
    before `a-b` and list the same names otherwise on PostgreSQL than on SQLite."""

    type = Text()
    inherit_cache = True


@compiles(by_code_point)
def _as_stored(element: by_code_point, compiler: SQLCompiler, **kw: Any) -> str:
    return str(compiler.process(element.clauses, **kw))


@compiles(by_code_point, "postgresql")
def _collate_c(element: by_code_point, compiler: SQLCompiler, **kw: Any) -> str:
    return f'{compiler.process(element.clauses, **kw)} COLLATE "C"'
