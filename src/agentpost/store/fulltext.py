"""SQLite's full-text index of messages (FTS5), brought up to date in batches, not per send.

Indexing a message inside its send cost a quarter of the send: FTS5 writes a new segment
for every transaction, seven of the send's twenty-four pages. So a send only stores the
message; `index_new` indexes every message stored since the last run, many to a segment.
The store runs it within a second of this process's sends, and before every search, so a
search still finds all mail sent before it: whichever process sent it, and whether or not
that process is still running.

`messages_fts_cursor` holds the newest `seq` indexed (migration 0004). Edits and deletions of
indexed messages reach the index through triggers; those of messages not yet indexed must not
(FTS5 would take a "delete" of a row it never had as a corrupt index), and need not:
`index_new` takes them as they are by then. A deletion also moves the cursor back to the
newest message left, if it was beyond (migration 0004 did so for SQLite's max(seq) + 1;
since 0005 a `seq` is never handed out again, and the cursor is simply never ahead).

A deletion (or an edit: a body cleared on ack) is a marker in a new segment, and the words
stay in the older segments, and in the marker, until a merge reaches them: searches no longer
find them, but the file still holds them. So the triggers also note it (`purge`, migration
0014), and `purge_step` merges the index, a bounded number of pages a transaction, until it
is one segment with no word of such mail. The pages it frees are overwritten with zeros
(`PRAGMA secure_delete`, set on every connection by `store.sqlite`). SQLite 3.42's FTS5
option `secure-delete` would remove the words at once, but the SQLite Python links may be
older.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Integer, column, text
from sqlalchemy.sql import Select
from sqlalchemy.sql.schema import Table

BATCH = 5_000
"""Messages indexed per transaction, so a long backlog never holds the write lock for long; the
store leaves it free a moment between two (`database.INDEX_PAUSE_S`), for the sends."""
PURGE_PAGES = 500
"""Index pages (4 KB) after which a purge step ends, for the same reason; but FTS5 ends a step
only between two words, so a step is at least the whole list of the word it is in, however
many pages that takes (docs/BENCHMARKS.md: the purge of wiped words)."""

_CURSOR = text("SELECT seq FROM messages_fts_cursor")
_BEHIND = text(
    "SELECT EXISTS (SELECT 1 FROM messages WHERE seq > (SELECT seq FROM messages_fts_cursor))"
)
_NEXT_BATCH = text(
    "SELECT count(*), max(seq) FROM "
    "(SELECT seq FROM messages WHERE seq > :indexed ORDER BY seq LIMIT :n)"
)
_ADVANCE = text("UPDATE messages_fts_cursor SET seq = :upto")
_WIPED = text("SELECT purge FROM messages_fts_cursor")
_MERGE = text("INSERT INTO messages_fts(messages_fts, rank) VALUES ('merge', :pages)")
_CHANGES = text("SELECT total_changes()")
_PURGED = text("UPDATE messages_fts_cursor SET purge = 0")
_INDEX = text(
    "INSERT INTO messages_fts(rowid, subject, body) "
    "SELECT seq, subject, body FROM messages WHERE seq > :indexed AND seq <= :upto"
)


def indexed_up_to(conn: Connection) -> int:
    return int(conn.execute(_CURSOR).scalar_one())


def behind(conn: Connection) -> bool:
    """Whether any message waits to be indexed: one indexed read, where `index_new` would
    take the write lock to find nothing."""
    return bool(conn.execute(_BEHIND).scalar_one())


def index_new(conn: Connection) -> bool:
    """Index the next batch of messages stored since the last run (in a write transaction);
    True when more are waiting."""
    indexed = indexed_up_to(conn)
    count, upto = conn.execute(_NEXT_BATCH, {"indexed": indexed, "n": BATCH}).one()
    if not count:
        return False
    conn.execute(_INDEX, {"indexed": indexed, "upto": upto})
    conn.execute(_ADVANCE, {"upto": upto})
    return int(count) >= BATCH


def wiped(conn: Connection) -> bool:
    """Whether words of wiped or purged mail may still be in the index: one row read."""
    return bool(conn.execute(_WIPED).scalar_one())


def purge_step(conn: Connection) -> bool:
    """Merge the next pages of the index (in a write transaction); True when more are left.
    A negative 'merge' takes every segment into one, as 'optimize' does, but a few pages at a
    time; it changes under 2 rows when there was nothing to merge (FTS5's documented test)."""
    if not wiped(conn):
        return False
    before = conn.execute(_CHANGES).scalar_one()
    conn.execute(_MERGE, {"pages": -PURGE_PAGES})
    if conn.execute(_CHANGES).scalar_one() - before >= 2:
        return True
    conn.execute(_PURGED)
    return False


def fts_query(words: list[str]) -> str:
    """Each word as a quoted FTS5 string: user text is matched, never parsed as syntax."""
    return " ".join('"' + word.replace('"', '""') + '"' for word in words)


def search(select: Select[Any], table: Table, words: list[str]) -> Select[Any]:
    """`select` narrowed to the messages matching every word (once `index_new` has run)."""
    matching = text("SELECT rowid FROM messages_fts WHERE messages_fts MATCH :fts").bindparams(
        fts=fts_query(words)
    )
    return select.where(table.c.seq.in_(matching.columns(column("rowid", Integer))))
