"""The log's queries: inboxes, states, tombstones, receipts, visibility and search."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import Connection, delete, select, update

from agentpost.domain.ids import message_id
from agentpost.domain.models import DeliveryState
from agentpost.store import expiry, mail, reading
from agentpost.store.database import Store
from agentpost.store.schema import deliveries, messages
from backends import FakeClock

pytestmark = pytest.mark.anyio


def insert(
    conn: Connection,
    now: float,
    sender: str,
    to: list[str],
    body: str = "hello",
    *,
    subject: str = "",
    channel: str | None = None,
    thread: str | None = None,
    urgent: bool = False,
    ttl: float | None = None,
    kind: str = "message",
    reply_to: str | None = None,
) -> tuple[str, int]:
    """Store one message and its deliveries in `conn`, as `send` does; returns (id, seq)."""
    mid = message_id(now)
    expires = now + ttl if ttl else None
    seq = mail.insert_message(
        conn,
        id=mid,
        sender=sender,
        recipients=json.dumps(to if channel is None else [f"#{channel}"]),
        channel=channel,
        kind=kind,
        subject=subject,
        body=body,
        data=None,
        thread_id=thread or mid,
        reply_to=reply_to,
        priority="urgent" if urgent else "normal",
        must_read=False,
        created_at=now,
        expires_at=expires,
        trust="verified",
    )
    if to:
        mail.insert_deliveries(conn, seq, to, urgent=urgent, expires_at=expires)
    return mid, seq


async def put(
    store: Store, sender: str, to: list[str], body: str = "hello", **options: Any
) -> tuple[str, int]:
    """`insert` (with its keyword `options`) in a write transaction of `store`, at its
    clock's time."""
    return await store.write(lambda conn: insert(conn, store.clock(), sender, to, body, **options))


async def search(store: Store, reader: str, words: list[str], limit: int = 10) -> list[Any]:
    """As the search service does: the index brought up to date, then the matching rows."""
    await store.index_for_search()
    now = store.clock()
    return await store.read(
        lambda c: reading.search_rows(c, store.dialect, reader, [], words, limit, now)
    )


async def inbox(store: Store, who: str, **options: Any) -> list[tuple[str, str]]:
    options = {"unread_only": True, "limit": 50, **options}

    def tx(conn: Connection) -> list[tuple[str, str]]:
        rows = mail.inbox_rows(conn, who, now=store.clock(), **options)
        return [(r.body, r.delivery_state) for r in rows]

    return await store.read(tx)


async def states(store: Store, who: str) -> dict[str, str]:
    def tx(conn: Connection) -> dict[str, str]:
        rows = conn.execute(
            select(messages.c.body, deliveries.c.state)
            .join(deliveries, deliveries.c.message_seq == messages.c.seq)
            .where(deliveries.c.recipient == who)
        )
        return dict(rows.all())

    return await store.read(tx)


async def test_an_inbox_lists_the_recipients_mail_oldest_first(store: Store) -> None:
    for body in ["one", "two", "three"]:
        await put(store, "alice", ["bob"], body)
    await put(store, "alice", ["carol"], "not for bob")
    assert await inbox(store, "bob") == [("one", "queued"), ("two", "queued"), ("three", "queued")]
    assert await inbox(store, "bob", limit=2) == [("one", "queued"), ("two", "queued")]


async def test_the_message_seq_grows_with_every_message(store: Store) -> None:
    seqs = [(await put(store, "alice", ["bob"], str(i)))[1] for i in range(5)]
    assert seqs == sorted(set(seqs))


async def test_marking_read_touches_only_queued_mail_of_that_recipient(
    store: Store, clock: FakeClock
) -> None:
    _, first = await put(store, "alice", ["bob", "carol"], "first")
    await put(store, "alice", ["bob"], "second")
    await store.write(lambda c: mail.mark_read(c, "bob", [first], clock()))
    assert await states(store, "bob") == {"first": "read", "second": "queued"}
    assert await states(store, "carol") == {"first": "queued"}
    assert await inbox(store, "bob") == [("second", "queued")]
    assert await inbox(store, "bob", unread_only=False) == [("first", "read"), ("second", "queued")]


@pytest.mark.parametrize("names", [["bob"], ["bob", "carol", "dave", "erin"]])
async def test_an_inbox_is_at_its_cap_only_with_mail_that_still_holds_a_place(
    store: Store, clock: FakeClock, names: list[str]
) -> None:
    # bob: two open, one read past its TTL (read mail keeps its place); carol: two unread
    # past their TTL (they hold none); dave: one acked, one open; erin: nothing.
    _, read_soon = await put(store, "alice", ["bob"], "read, soon past its TTL", ttl=5)
    await put(store, "alice", ["bob", "carol"], "gone soon", ttl=5)
    await put(store, "alice", ["carol"], "gone soon too", ttl=5)
    await put(store, "alice", ["bob", "dave"], "stays")
    done, _ = await put(store, "alice", ["dave"], "handled")
    await store.write(lambda c: mail.mark_read(c, "bob", [read_soon], clock()))
    await store.write(lambda c: mail.ack(c, "dave", [done], clock()))
    clock.advance(6)
    caps = {"bob": 2, "carol": 2, "dave": 2, "erin": 1}

    async def at_cap(cap_of: dict[str, int]) -> list[str]:
        wanted = {n: cap_of[n] for n in names}
        return await store.read(lambda c: mail.at_cap(c, wanted, clock()))

    assert await at_cap(caps) == ["bob"]
    assert await at_cap({**caps, "bob": 3, "dave": 1}) == ([] if names == ["bob"] else ["dave"])


async def test_ack_acks_own_open_mail_and_refuses_others_and_unknown_ids(
    store: Store, clock: FakeClock
) -> None:
    mine, _ = await put(store, "alice", ["bob"], "mine")
    theirs, _ = await put(store, "alice", ["carol"], "theirs")
    acked = await store.write(lambda c: mail.ack(c, "bob", [mine, theirs, "m_nope"], clock()))
    assert acked == [mine]
    assert await states(store, "bob") == {"mine": "acked"}
    assert await states(store, "carol") == {"theirs": "queued"}
    again = await store.write(lambda c: mail.ack(c, "bob", [mine], clock()))
    assert again == [mine]  # acking twice is harmless


async def test_unread_mail_past_its_ttl_becomes_a_tombstone_and_leaves_the_inbox(
    store: Store, clock: FakeClock
) -> None:
    await put(store, "alice", ["bob"], "short", ttl=10)
    await put(store, "alice", ["bob"], "forever")
    clock.advance(10)
    assert await inbox(store, "bob") == [("forever", "queued")]  # hidden even before expiry runs
    assert await store.read(lambda c: mail.unread_count(c, "bob", clock())) == 1
    assert len(await store.write(lambda c: expiry.expire_due(c, clock(), "bob"))) == 1
    assert await states(store, "bob") == {"short": "expired", "forever": "queued"}
    assert len(await store.write(lambda c: expiry.expire_due(c, clock()))) == 0


async def test_read_mail_does_not_expire(store: Store, clock: FakeClock) -> None:
    _, seq = await put(store, "alice", ["bob"], "seen", ttl=10)
    await store.write(lambda c: mail.mark_read(c, "bob", [seq], clock()))
    clock.advance(60)
    assert len(await store.write(lambda c: expiry.expire_due(c, clock()))) == 0
    assert await states(store, "bob") == {"seen": "read"}


def _plan(conn: Connection, now: float) -> str:
    """How the database walks the sweeper's look (`any_due`) at `now`, each step on a line;
    PostgreSQL told to use an index where it can (it scans a table this small whatever)."""
    look = expiry._ANY_DUE.statement.params(now=now)
    sql = str(look.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
    if conn.dialect.name == "sqlite":
        steps = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql)
        return "\n".join(str(row[-1]) for row in steps)
    conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
    return "\n".join(str(row[0]) for row in conn.exec_driver_sql("EXPLAIN " + sql))


async def test_the_look_for_due_mail_starts_at_unread_mail(store: Store, clock: FakeClock) -> None:
    """Read mail past its TTL stays until retention removes it. Were the look to step through
    it (as it did before 0019: 3.6 ms at 20,000 on SQLite), each look would slow with every
    message ever read; it seeks the unread mail by the expiry index's leading state instead."""
    read_ones = [(await put(store, "alice", ["bob"], f"seen {i}", ttl=5))[1] for i in range(30)]
    await store.write(lambda c: mail.mark_read(c, "bob", read_ones, clock()))
    await put(store, "alice", ["bob"], "unread", ttl=10)
    clock.advance(10)

    plan = await store.read(lambda c: _plan(c, clock()))
    assert "ix_deliveries_expiry" in plan, plan
    if store.dialect.__name__.endswith("sqlite"):
        assert "ix_deliveries_expiry (state=? AND expires_at" in plan, plan
    else:
        assert "Index Cond: ((state = 'queued'::text) AND (expires_at <=" in plan, plan
    assert await store.read(lambda c: expiry.any_due(c, clock()))
    assert len(await store.write(lambda c: expiry.expire_due(c, clock()))) == 1
    assert not await store.read(lambda c: expiry.any_due(c, clock()))
    seen = await states(store, "bob")
    assert seen.pop("unread") == "expired"
    assert set(seen.values()) == {"read"}


async def test_the_next_expiry_is_the_earliest_unread_mail_still_to_fall_due(
    store: Store, clock: FakeClock
) -> None:
    async def next_expiry() -> float | None:
        return await store.read(lambda c: expiry.next_expiry(c, clock()))

    assert await next_expiry() is None
    await put(store, "alice", ["bob"], "forever")
    assert await next_expiry() is None  # no TTL, no expiry
    _, seen = await put(store, "alice", ["bob"], "seen", ttl=5)
    await store.write(lambda c: mail.mark_read(c, "bob", [seen], clock()))
    assert await next_expiry() is None  # read mail never expires
    await put(store, "alice", ["bob", "carol"], "later", ttl=30)
    await put(store, "alice", ["carol"], "sooner", ttl=20)
    assert await next_expiry() == clock.now + 20
    clock.advance(20)
    assert await next_expiry() == clock.now + 10  # what is due now is the sweep's, not next
    clock.advance(10)
    assert await next_expiry() is None


async def test_receipts_show_each_recipients_state_and_due_mail_as_expired(
    store: Store, clock: FakeClock
) -> None:
    mid, seq = await put(store, "alice", ["bob", "carol"], "hi", ttl=30)
    await store.write(lambda c: mail.ack(c, "bob", [mid], clock()))
    clock.advance(31)
    receipts = await store.read(lambda c: mail.receipts(c, [seq], clock()))
    by_name = {r.to: r for r in receipts[seq]}
    assert by_name["bob"].state is DeliveryState.ACKED
    assert by_name["bob"].read_at == by_name["bob"].acked_at == clock.now - 31
    assert by_name["carol"].state is DeliveryState.EXPIRED
    assert by_name["carol"].expired_at == clock.now - 1


async def test_urgent_mail_is_listed_after_a_cursor_only(store: Store, clock: FakeClock) -> None:
    _, first = await put(store, "alice", ["bob"], "u1", urgent=True)
    await put(store, "alice", ["bob"], "normal")
    await put(store, "alice", ["bob"], "u2", urgent=True)

    def since(cursor: int) -> Any:
        return lambda c: [r.body for r in mail.urgent_since(c, "bob", cursor, clock())]

    assert await store.read(since(0)) == ["u1", "u2"]
    assert await store.read(since(first)) == ["u2"]


async def test_a_reader_sees_what_they_sent_received_or_can_read_in_a_channel(
    store: Store,
) -> None:
    await put(store, "alice", ["bob"], "private", thread="t")
    await put(store, "bob", ["alice"], "reply", thread="t")
    await put(store, "carol", [], "to ops", channel="ops", thread="t")

    def thread(reader: str, channels: list[str]) -> Any:
        now = store.clock()
        return lambda c: [r.body for r in reading.thread_rows(c, reader, channels, "t", 50, now)]

    assert await store.read(thread("alice", [])) == ["private", "reply"]
    assert await store.read(thread("dave", [])) == []
    assert await store.read(thread("dave", ["ops"])) == ["to ops"]
    assert await store.read(thread("carol", [])) == ["to ops"]


async def test_channel_history_pages_back_from_a_cursor_oldest_first(store: Store) -> None:
    seqs = [(await put(store, "alice", [], f"c{i}", channel="ops"))[1] for i in range(5)]
    await put(store, "alice", [], "elsewhere", channel="dev")

    def page(before: int | None) -> Any:
        now = store.clock()
        return lambda c: [r.body for r in reading.channel_rows(c, "bob", "ops", 2, before, now)]

    assert await store.read(page(None)) == ["c3", "c4"]
    assert await store.read(page(seqs[3])) == ["c1", "c2"]


SYNTAX_BODY = "a plain body AND ( with OR syntax body:x it's"


@pytest.mark.parametrize(
    ("query", "matches"),
    [
        (['"'], False),
        (["AND", "("], True),
        (["OR"], True),
        (["body:x"], True),
        (["it's"], True),
        (["NEAR(a"], False),  # the words "near" and "a": no "near" in the body
        (["*"], False),
        (["-", "^"], False),
    ],
)
async def test_search_takes_query_syntax_as_plain_words_never_as_an_error(
    store: Store, query: list[str], matches: bool
) -> None:
    await put(store, "alice", ["bob"], SYNTAX_BODY)

    found = [r.body for r in await search(store, "bob", query)]
    assert found == ([SYNTAX_BODY] if matches else [])


async def test_search_matches_every_word_in_subject_or_body(store: Store) -> None:
    await put(store, "alice", ["bob"], "deploy the billing service", subject="release")
    await put(store, "alice", ["bob"], "deploy the web site")
    await put(store, "alice", ["carol"], "billing for carol only")

    async def find(*words: str) -> list[str]:
        return [r.body for r in await search(store, "bob", list(words))]

    assert await find("billing") == ["deploy the billing service"]
    assert await find("deploy") == ["deploy the web site", "deploy the billing service"]
    assert await find("release", "billing") == ["deploy the billing service"]
    assert await find("DEPLOY", "site") == ["deploy the web site"]
    assert await find("nowhere") == []


@pytest.mark.parametrize(
    ("body", "word", "matches"),
    [
        ("un café crème", "cafe", True),
        ("un cafe creme", "café", True),
        ("UN CAFÉ", "café", True),
        ("un cafe\u0301 decomposed", "café", True),  # e and a combining accent
        ("Ångström units", "angstrom", True),
        ("el niño", "NINO", True),
        ("Ölbild", "olbild", True),
        ("façade", "facade", True),
        ("naïve-approach", "naive", True),
        ("the caféteria", "cafe", False),  # a whole word, as ever
        ("Øresund", "oresund", False),  # ø, ß, æ are letters of their own on SQLite
        ("straße", "strasse", False),
        ("Æsir", "aesir", False),
        ("Ἀθῆναι", "αθηναι", False),  # only Latin letters lose their accents
    ],
)
async def test_search_ignores_diacritics_of_latin_letters_alike_on_both_databases(
    store: Store, body: str, word: str, matches: bool
) -> None:
    await put(store, "alice", ["bob"], body)
    found = [r.body for r in await search(store, "bob", [word])]
    assert found == ([body] if matches else [])


async def test_search_takes_as_many_words_as_the_longest_query_holds(store: Store) -> None:
    """A query of 500 characters holds 250 one-letter words: each is a phrase of its own,
    all of them required, on PostgreSQL as on SQLite."""
    body = " ".join("abcdefghij")
    await put(store, "alice", ["bob"], body)
    assert [r.body for r in await search(store, "bob", list("abcdefghij" * 25))] == [body]


async def edit(store: Store, seq: int, body: str) -> None:
    await store.write(
        lambda c: c.execute(update(messages).where(messages.c.seq == seq).values(body=body))
    )


async def remove(store: Store, seq: int) -> None:
    def tx(conn: Connection) -> None:
        conn.execute(delete(deliveries).where(deliveries.c.message_seq == seq))
        conn.execute(delete(messages).where(messages.c.seq == seq))

    await store.write(tx)


async def test_full_text_search_follows_edits_and_deletions(store: Store) -> None:
    _, seq = await put(store, "alice", ["bob"], "original words")

    async def find(word: str) -> list[int]:
        return [r.seq for r in await search(store, "alice", [word], 5)]

    assert await find("original") == [seq]  # indexed now: what follows goes through triggers
    await edit(store, seq, "edited")
    assert await find("original") == []
    assert await find("edited") == [seq]
    await remove(store, seq)
    assert await find("edited") == []


async def test_full_text_search_takes_mail_edited_or_deleted_before_it_was_indexed(
    store: Store,
) -> None:
    _, edited = await put(store, "alice", ["bob"], "original words")
    _, removed = await put(store, "alice", ["bob"], "removed words")
    await put(store, "alice", ["bob"], "newest words")
    await edit(store, edited, "edited words")
    await remove(store, removed)

    async def find(word: str) -> list[str]:
        return [r.body for r in await search(store, "alice", [word], 5)]

    assert await find("words") == ["newest words", "edited words"]
    assert await find("original") == []
    assert await find("removed") == []


async def test_the_whole_log_can_be_followed_from_a_cursor(store: Store) -> None:
    seqs = [(await put(store, "alice", ["bob"], f"m{i}"))[1] for i in range(3)]
    assert await store.read(mail.newest_seq) == seqs[-1]
    after = await store.read(lambda c: [r.body for r in mail.messages_after(c, seqs[0], 10)])
    assert after == ["m1", "m2"]
    assert await store.read(lambda c: mail.newest_delivery_seq(c, "bob")) == seqs[-1]
    assert await store.read(lambda c: mail.newest_delivery_seq(c, "nobody")) == 0


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
    assert (
        await store.write(
            lambda c: mail.purge_handled(c, mail.written_before(c, clock.now), 100, clock.now)
        )
        == 2
    )
    remaining = await store.read(lambda c: [r.body for r in mail.messages_after(c, 0, 100)])
    assert remaining == ["queued", "too young", "young and acked"]
    assert await states(store, "bob") == {
        "queued": "queued",
        "too young": "queued",
        "young and acked": "acked",
    }


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_the_full_text_index_stays_consistent_after_a_purge(
    store: Store, clock: FakeClock
) -> None:
    ids = [(await put(store, "alice", ["bob"], f"purged words {i}"))[0] for i in range(3)]
    await put(store, "alice", ["bob"], "kept words")
    await store.index_for_search()
    await store.write(lambda c: mail.ack(c, "bob", ids, clock()))
    clock.advance(1)
    assert (
        await store.write(
            lambda c: mail.purge_handled(c, mail.written_before(c, clock.now), 100, clock.now)
        )
        == 3
    )
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
