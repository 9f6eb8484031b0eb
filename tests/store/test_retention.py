"""Retention's purge of mail: what goes and what stays, and what a batch reads."""

from __future__ import annotations

import pytest
from sqlalchemy import Connection

from agentpost.store import mail, retention
from agentpost.store.database import Store
from backends import FakeClock
from store.test_mail import put, states

pytestmark = pytest.mark.anyio


async def purge(store: Store, before: float) -> int:
    """One batch of 100 from the oldest, at `before`: how many messages went."""
    return await store.write(lambda c: retention.purge_handled(c, before, 100, before).count)


async def test_purging_takes_only_old_fully_handled_messages(
    store: Store, clock: FakeClock
) -> None:
    acked, _ = await put(store, "alice", ["bob"], "acked")
    await put(store, "alice", ["bob"], "queued")
    await put(store, "alice", [], "nobody to tell", channel="empty")
    await store.write(lambda c: mail.ack(c, "bob", [acked], clock()))
    clock.advance(10)
    await put(store, "alice", ["bob"], "too young")
    young, _ = await put(store, "alice", ["bob"], "young and acked")
    await store.write(lambda c: mail.ack(c, "bob", [young], clock()))
    assert await purge(store, clock.now) == 2
    remaining = await store.read(lambda c: [r.body for r in mail.messages_after(c, 0, 100)])
    assert remaining == ["queued", "too young", "young and acked"]
    assert await states(store, "bob") == {
        "queued": "queued",
        "too young": "queued",
        "young and acked": "acked",
    }


async def test_a_retention_batch_walks_the_next_messages_and_says_where_the_next_begins(
    store: Store, clock: FakeClock
) -> None:
    """Mail a batch keeps is not walked again by the next; the walk ends after a batch that
    held no mail old enough, or at the newest message."""
    ids = [(await put(store, "alice", ["bob"], body))[0] for body in ("a", "kept", "b")]
    await store.write(lambda c: mail.ack(c, "bob", [ids[0], ids[2]], clock()))
    before = clock.advance(10)
    young = [(await put(store, "alice", ["bob"], body))[0] for body in ("y1", "y2", "y3")]
    await store.write(lambda c: mail.ack(c, "bob", young, clock()))
    seqs = await store.read(lambda c: [r.seq for r in mail.messages_after(c, 0, 10)])

    async def batch(after: int, limit: int = 2) -> tuple[int, int | None]:
        done = await store.write(lambda c: retention.purge_handled(c, before, limit, before, after))
        return done.count, done.after

    assert await batch(0) == (1, seqs[1])  # "a" purged, "kept" kept
    assert await batch(seqs[1]) == (1, seqs[3])  # "b", and "y1" too young
    assert await batch(seqs[3]) == (0, None)  # a whole batch too young
    assert await batch(seqs[3], limit=5) == (0, None)  # the newest reached
    remaining = await store.read(lambda c: [r.body for r in mail.messages_after(c, 0, 10)])
    assert remaining == ["kept", "y1", "y2", "y3"]


_ROWS_READ = """
    SELECT (SELECT sum(seq_tup_read + idx_tup_fetch) FROM pg_stat_xact_user_tables
            WHERE relid = ANY(tables))
         + (SELECT sum(pg_stat_get_xact_tuples_returned(indexrelid)) FROM pg_index
            WHERE indrelid = ANY(tables))
    FROM (SELECT ARRAY['messages'::regclass, 'deliveries'::regclass, 'withheld'::regclass,
                       'silent_expiries'::regclass]::oid[] AS tables) AS t
"""
"""Rows this transaction has read so far from the tables of mail, and entries of their
indexes: PostgreSQL counts them as it goes (`pg_stat_xact_*`)."""


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_a_retention_batch_reads_the_mail_it_walks_not_the_whole_store(
    store: Store, clock: FakeClock
) -> None:
    """Asked for the first purgeable messages, PostgreSQL read every delivery of the store
    for each batch (a merge anti join), every message to find the open requests and every
    withheld row (hashed subplans): 70 ms to 1 s a batch at 200,000 messages, sends waiting
    meanwhile."""
    now = clock()

    def load(conn: Connection) -> None:
        # Every 10th message a request, the next its response; all acked, all old.
        conn.exec_driver_sql(
            "INSERT INTO messages (id, sender, recipients, kind, body, thread_id, reply_to,"
            " priority, must_read, created_at, trust)"
            " SELECT 'm_' || i, 'alice', '[\"bob\"]',"
            " CASE i % 10 WHEN 1 THEN 'request' WHEN 2 THEN 'response' ELSE 'message' END,"
            " 'old', 't_' || i, CASE i % 10 WHEN 2 THEN 'm_' || (i - 1) END,"
            f" 'normal', false, {now - 100}, 'verified' FROM generate_series(1, 20000) AS i"
        )
        conn.exec_driver_sql(
            "INSERT INTO deliveries (recipient, message_seq, state, urgent, acked_at)"
            f" SELECT 'bob', seq, 'acked', false, {now - 50} FROM messages"
        )
        # Each withheld from carol too, who blocks alice; its TTL passed, it goes all the same.
        conn.exec_driver_sql(f"UPDATE messages SET expires_at = {now - 10}")
        conn.exec_driver_sql(
            "INSERT INTO withheld (message_seq, recipient) SELECT seq, 'carol' FROM messages"
        )
        conn.exec_driver_sql("ANALYZE messages, deliveries, withheld, silent_expiries")

    await store.write(load, lengthy=True)

    def batch(conn: Connection) -> tuple[int, int]:
        start = int(conn.exec_driver_sql(_ROWS_READ).scalar() or 0)
        purged = retention.purge_handled(conn, now, 20, now).count
        return purged, int(conn.exec_driver_sql(_ROWS_READ).scalar() or 0) - start

    purged, read = await store.write(batch, lengthy=True)
    assert purged == 20
    assert read < 1_000, read  # some 300 (deletes and their key checks too); once 40,000


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_the_full_text_index_stays_consistent_after_a_purge(
    store: Store, clock: FakeClock
) -> None:
    ids = [(await put(store, "alice", ["bob"], f"purged words {i}"))[0] for i in range(3)]
    await put(store, "alice", ["bob"], "kept words")
    await store.index_for_search()
    await store.write(lambda c: mail.ack(c, "bob", ids, clock()))
    clock.advance(1)
    assert await purge(store, clock.now) == 3
    await store.index_for_search()

    def check(conn: Connection) -> list[int]:
        # FTS5 compares the index with the messages, and says "malformed" where they differ.
        conn.exec_driver_sql(
            "INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)"
        )
        # An index entry whose row is gone would still match: that is what stale looks like.
        found = conn.exec_driver_sql(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'words'"
        )
        return [row[0] for row in found]

    (kept,) = await store.write(check)
    assert await store.read(lambda c: [r.seq for r in mail.messages_after(c, 0, 10)]) == [kept]
