"""Words of wiped or purged mail leave SQLite's full-text index, not only its answers.

FTS5 takes a deletion as a marker in a new segment: the words stay in the older segments (and
in the marker) until a merge reaches them, so a body cleared on ack or purged by retention was
still readable in the database file. The edit and deletion triggers now also note, in
`messages_fts_cursor.purge`, that the index holds such words; the store merges the index in
short steps until none are left (`agentpost.store.fulltext.purge_step`). Set at once here: a
file may already hold words wiped before this revision. PostgreSQL has no FTS5 index: nothing
changes there.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
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


def _triggers(noting: bool) -> list[str]:
    """Migration 0004's triggers; `noting`, they also note that wiped words wait in the index."""
    note = "UPDATE messages_fts_cursor SET purge = 1 WHERE old.seq <= seq; " if noting else ""
    return [
        "DROP TRIGGER messages_fts_ad",
        "DROP TRIGGER messages_fts_au",
        "CREATE TRIGGER messages_fts_ad AFTER DELETE ON messages BEGIN "
        "INSERT INTO messages_fts(messages_fts, rowid, subject, body) "
        "SELECT 'delete', old.seq, old.subject, old.body "
        f"FROM messages_fts_cursor WHERE old.seq <= seq; {note}"
        f"UPDATE messages_fts_cursor SET seq = {_NEWEST} WHERE seq > {_NEWEST}; END",
        "CREATE TRIGGER messages_fts_au AFTER UPDATE OF subject, body ON messages "
        f"WHEN old.seq <= {_INDEXED} BEGIN {_DELETE_OLD} {_INSERT_NEW} {note}END",
    ]


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    op.execute("ALTER TABLE messages_fts_cursor ADD COLUMN purge INTEGER NOT NULL DEFAULT 1")
    for statement in _triggers(noting=True):
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for statement in _triggers(noting=False):
        op.execute(statement)
    op.execute("ALTER TABLE messages_fts_cursor DROP COLUMN purge")
