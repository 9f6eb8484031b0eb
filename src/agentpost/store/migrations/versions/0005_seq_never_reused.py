"""On SQLite, `messages.seq` and `events.seq` are never handed out twice (AUTOINCREMENT).

A plain INTEGER PRIMARY KEY takes max(seq) + 1: once retention purged the newest mail, new
mail took seqs again that cursors (a session's urgent previews, a stdio server's push, `tail`)
had already passed, and went unannounced. AUTOINCREMENT keeps the high-water mark in
`sqlite_sequence`; each mark starts at least at the furthest cursor the database holds (a
session's for messages, a webhook's for events), so a reuse that happened before this upgrade
ends here too. (Cursors outside the database, the hook's files and older processes still
running, are not known here.) PostgreSQL's sequences never reuse: nothing changes there.

SQLite cannot add AUTOINCREMENT to a table, so each table is rebuilt: copied aside, dropped,
created anew under its own name and filled again, its rows (seqs included), indexes and
triggers as they were. `deliveries` keeps referring to `messages` throughout; the foreign keys
are deferred, so SQLite checks at commit that every delivery still has its message. A downgrade
brings back max(seq) + 1, so it moves the cursors back to the newest row left, from where the
seqs handed out again still come after them.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

Seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _messages(name: str, *, autoincrement: bool) -> None:
    op.create_table(
        name,
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
        sqlite_autoincrement=autoincrement,
    )


def _events(name: str, *, autoincrement: bool) -> None:
    op.create_table(
        name,
        sa.Column("seq", Seq, primary_key=True, autoincrement=True),
        sa.Column("agent", sa.String(64), nullable=False),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("message_id", sa.String(40)),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("data", sa.Text),
        sqlite_autoincrement=autoincrement,
    )


_MESSAGES_FLOOR = (
    "SELECT max(coalesce((SELECT max(seq) FROM messages), 0), "
    "coalesce((SELECT max(urgent_cursor) FROM sessions), 0))"
)
"""Where new messages start: beyond every message left and every session's cursor."""
_EVENTS_FLOOR = (
    "SELECT max(coalesce((SELECT max(seq) FROM events), 0), "
    "coalesce((SELECT max(cursor) FROM webhooks), 0), "
    "coalesce((SELECT max(event_seq) FROM webhook_deliveries), 0))"
)
"""Where new events start: beyond every event left, every webhook's cursor and delivery."""


def _rebuild(
    table: str, create: Callable[..., None], *, autoincrement: bool, floor: str | None = None
) -> None:
    bind = op.get_bind()
    # Indexes and triggers go with the table: kept as SQLite has them, to be made again.
    # (An index SQLite made for a UNIQUE or PRIMARY KEY has no sql: the new table makes it.)
    kept = list(
        bind.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE tbl_name = ? AND type IN ('index', 'trigger') "
            "AND sql IS NOT NULL ORDER BY type, name",
            (table,),
        ).scalars()
    )
    high_water = None if floor is None else bind.exec_driver_sql(floor).scalar()
    aside_name = f"_rebuild_{table}"
    aside = f"temp.{aside_name}"
    op.execute("PRAGMA defer_foreign_keys = ON")  # until this transaction commits
    op.execute(f"CREATE TABLE {aside} AS SELECT * FROM {table}")
    op.execute(f"DROP TABLE {table}")  # fires no trigger: the full-text index stays as it is
    create(table, autoincrement=autoincrement)
    names = [row[1] for row in bind.exec_driver_sql(f"PRAGMA table_info({table})")]
    old_names = [row[1] for row in bind.exec_driver_sql(f"PRAGMA temp.table_info({aside_name})")]
    if sorted(names) != sorted(old_names):  # a column this revision does not know would be lost
        raise RuntimeError(f"{table} has the columns {old_names}, this revision {names}")
    columns = ", ".join(f'"{name}"' for name in names)
    op.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {aside}")
    op.execute(f"DROP TABLE {aside}")
    for statement in kept:
        bind.exec_driver_sql(statement)  # as SQLite wrote it: no bind parameters parsed
    if high_water is not None:
        bind.exec_driver_sql("DELETE FROM sqlite_sequence WHERE name = ?", (table,))
        bind.exec_driver_sql(
            "INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (table, high_water)
        )


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    _rebuild("messages", _messages, autoincrement=True, floor=_MESSAGES_FLOOR)
    _rebuild("events", _events, autoincrement=True, floor=_EVENTS_FLOOR)


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    _rebuild("events", _events, autoincrement=False)
    _rebuild("messages", _messages, autoincrement=False)
    op.execute("DELETE FROM sqlite_sequence WHERE name IN ('messages', 'events')")
    for table, cursor, log in (
        ("sessions", "urgent_cursor", "messages"),
        ("webhooks", "cursor", "events"),
    ):
        newest = f"(SELECT coalesce(max(seq), 0) FROM {log})"
        op.execute(f"UPDATE {table} SET {cursor} = {newest} WHERE {cursor} > {newest}")
