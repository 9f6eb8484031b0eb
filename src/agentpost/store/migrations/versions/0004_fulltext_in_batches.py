"""SQLite's full-text index is brought up to date in batches, no longer inside every send.

The insert trigger goes; a cursor (`messages_fts_cursor`) holds the newest message indexed,
starting at the newest message of now, which the old trigger indexed. Edits and deletions
reach the index only for messages it holds, and deletions keep the cursor within the messages
left (see `agentpost.store.fulltext`). PostgreSQL has
no such index yet: nothing changes there.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_INDEXED = "(SELECT seq FROM messages_fts_cursor)"
_NEWEST = "(SELECT coalesce(max(seq), 0) FROM messages)"
_DELETE_OLD = (
    "INSERT INTO messages_fts(messages_fts, rowid, subject, body) "
    "VALUES ('delete', old.seq, old.subject, old.body);"
)
_INSERT_NEW = (
    "INSERT INTO messages_fts(rowid, subject, body) VALUES (new.seq, new.subject, new.body);"
)
_DROP_TRIGGERS = [
    "DROP TRIGGER messages_fts_ai",
    "DROP TRIGGER messages_fts_ad",
    "DROP TRIGGER messages_fts_au",
]


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for statement in _DROP_TRIGGERS:
        op.execute(statement)
    op.execute(
        "CREATE TABLE messages_fts_cursor "
        "(id INTEGER PRIMARY KEY CHECK (id = 1), seq INTEGER NOT NULL)"
    )
    op.execute(f"INSERT INTO messages_fts_cursor SELECT 1, {_NEWEST}")
    # A deleted message leaves the index if it was in it; and the cursor never stays beyond
    # the newest message left, as SQLite hands out max(seq) + 1: a `seq` handed out again
    # must still be indexed.
    op.execute(
        "CREATE TRIGGER messages_fts_ad AFTER DELETE ON messages BEGIN "
        "INSERT INTO messages_fts(messages_fts, rowid, subject, body) "
        "SELECT 'delete', old.seq, old.subject, old.body "
        "FROM messages_fts_cursor WHERE old.seq <= seq; "
        f"UPDATE messages_fts_cursor SET seq = {_NEWEST} WHERE seq > {_NEWEST}; END"
    )
    op.execute(
        "CREATE TRIGGER messages_fts_au AFTER UPDATE OF subject, body ON messages "
        f"WHEN old.seq <= {_INDEXED} BEGIN {_DELETE_OLD} {_INSERT_NEW} END"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    # What the cursor had not reached yet is indexed first: the old triggers assume it all is.
    op.execute(
        "INSERT INTO messages_fts(rowid, subject, body) SELECT seq, subject, body FROM messages "
        f"WHERE seq > {_INDEXED}"
    )
    for statement in _DROP_TRIGGERS[1:]:
        op.execute(statement)
    op.execute("DROP TABLE messages_fts_cursor")
    op.execute(f"CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages BEGIN {_INSERT_NEW} END")
    op.execute(f"CREATE TRIGGER messages_fts_ad AFTER DELETE ON messages BEGIN {_DELETE_OLD} END")
    op.execute(
        "CREATE TRIGGER messages_fts_au AFTER UPDATE OF subject, body ON messages BEGIN "
        f"{_DELETE_OLD} {_INSERT_NEW} END"
    )
