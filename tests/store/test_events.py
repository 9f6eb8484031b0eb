"""The event log's rows: written in the mail's own transactions, read by cursor, kept by age."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import Connection, func, insert, select

from agentpost.domain.events import Event
from agentpost.store import agents, events, expiry, mail, schema, webhooks
from agentpost.store.database import Store
from backends import FakeClock
from store.test_mail import put

pytestmark = pytest.mark.anyio


async def log_of(store: Store, agent: str, after: int = 0) -> list[Event]:
    return await store.read(lambda c: events.events_after(c, agent, after, 500))


async def kinds(store: Store, agent: str) -> list[tuple[str, str | None, dict[str, object]]]:
    return [(e.type, e.message_id, e.data) for e in await log_of(store, agent)]


async def test_a_delivery_writes_message_created_into_each_recipients_log_only(
    store: Store,
) -> None:
    mid, _ = await put(store, "alice", ["bob", "carol"], subject="lunch?", thread="t1")
    about = {
        "from": "alice",
        "subject": "lunch?",
        "thread_id": "t1",
        "kind": "message",
        "priority": "normal",
        "trust": "verified",
        "channel": None,
    }
    assert await kinds(store, "bob") == [("message.created", mid, about)]
    assert await kinds(store, "carol") == [("message.created", mid, about)]
    assert await kinds(store, "alice") == []


@pytest.mark.parametrize(
    "subject", ['say "hi"\\n', "line one\nline two", "ünïcødé ✓ 🚀", "'); DROP TABLE events;--"]
)
async def test_any_subject_survives_the_events_json_unchanged(store: Store, subject: str) -> None:
    await put(store, "alice", ["bob"], subject=subject, channel="ops")
    (created,) = await log_of(store, "bob")
    assert created.data["subject"] == subject
    assert created.data["channel"] == "#ops"


async def test_a_rolled_back_send_leaves_no_event(store: Store) -> None:
    class Refused(Exception):
        pass

    def tx(conn: Connection) -> None:
        seq = mail.insert_message(
            conn,
            id="m_refused",
            sender="alice",
            recipients='["bob"]',
            kind="message",
            body="never",
            thread_id="m_refused",
            priority="normal",
            must_read=False,
            created_at=store.clock(),
            trust="verified",
        )
        mail.insert_deliveries(conn, seq, ["bob"], urgent=False, expires_at=None)
        raise Refused

    with pytest.raises(Refused):
        await store.write(tx)
    assert await log_of(store, "bob") == []


async def test_reading_tells_the_sender_once_which_recipient_read(
    store: Store, clock: FakeClock
) -> None:
    mid, seq = await put(store, "alice", ["bob", "carol"])
    clock.advance(5)
    for _ in range(2):  # the second mark finds nothing queued: no second event
        await store.write(lambda c: mail.mark_read(c, "bob", [seq], clock()))
    (read,) = await log_of(store, "alice")
    assert (read.type, read.message_id, read.data, read.at) == (
        "message.read",
        mid,
        {"to": "bob"},
        clock(),
    )


async def test_an_ack_tells_the_sender_once_and_a_refused_ack_not_at_all(
    store: Store, clock: FakeClock
) -> None:
    mine, _ = await put(store, "alice", ["bob"], "mine")
    await put(store, "alice", ["carol"], "theirs")
    for _ in range(2):
        await store.write(lambda c: mail.ack(c, "bob", [mine, "m_nope"], clock()))
    assert await kinds(store, "alice") == [("message.acked", mine, {"to": "bob"})]


async def test_expiry_tells_each_sender_whose_recipient_let_mail_expire(
    store: Store, clock: FakeClock
) -> None:
    short, _ = await put(store, "alice", ["bob", "carol"], ttl=10)
    other, _ = await put(store, "dave", ["bob"], ttl=10)
    await put(store, "alice", ["bob"], "forever")
    clock.advance(10)
    assert len(await store.write(lambda c: expiry.expire_due(c, clock()))) == 3
    assert len(await store.write(lambda c: expiry.expire_due(c, clock()))) == 0
    assert sorted(await kinds(store, "alice"), key=json.dumps) == [
        ("message.expired", short, {"to": "bob"}),
        ("message.expired", short, {"to": "carol"}),
    ]
    assert await kinds(store, "dave") == [("message.expired", other, {"to": "bob"})]


async def test_events_after_a_cursor_are_exactly_the_later_ones_oldest_first(
    store: Store,
) -> None:
    for i in range(5):
        await put(store, "alice", ["bob"], str(i))
    everything = await log_of(store, "bob")
    seqs = [e.seq for e in everything]
    assert seqs == sorted(set(seqs))
    assert await log_of(store, "bob", after=seqs[1]) == everything[2:]
    page = await store.read(lambda c: events.events_after(c, "bob", seqs[0], 2))
    assert page == everything[1:3]
    assert await store.read(lambda c: events.newest_for(c, "bob")) == seqs[-1]
    assert await store.read(lambda c: events.newest_for(c, "nobody")) == 0


async def test_touched_names_each_agent_with_its_newest_event_and_the_newest_seen(
    store: Store,
) -> None:
    start = await store.read(events.newest)
    await put(store, "alice", ["bob", "carol"])
    await put(store, "alice", ["bob"])
    bob, carol = await log_of(store, "bob"), await log_of(store, "carol")
    found, seen = await store.read(lambda c: events.touched(c, start, 100))
    assert found == {"bob": bob[-1].seq, "carol": carol[-1].seq}
    assert seen == bob[-1].seq
    assert await store.read(lambda c: events.touched(c, seen, 100)) == ({}, seen)
    assert await store.read(lambda c: events.touched(c, 2**62, 100)) == ({}, seen)
    first, cut = await store.read(lambda c: events.touched(c, start, 1))
    assert len(first) == 1
    assert cut > start


async def test_purging_takes_old_events_and_new_ones_still_come_after_every_cursor(
    store: Store, clock: FakeClock
) -> None:
    await put(store, "alice", ["bob"], "old")
    await put(store, "alice", ["bob"], "old too")
    newest_old = (await log_of(store, "bob"))[-1].seq
    clock.advance(100)
    young, _ = await put(store, "alice", ["bob"], "young")
    assert (
        await store.write(
            lambda c: events.purge_before(c, events.written_before(c, clock() - 1), 500)
        )
        == 2
    )
    assert [e.message_id for e in await log_of(store, "bob")] == [young]
    clock.advance(100)
    assert (
        await store.write(lambda c: events.purge_before(c, events.written_before(c, clock()), 500))
        == 1
    )
    assert await log_of(store, "bob") == []  # every event went
    await put(store, "alice", ["bob"], "new")
    assert [e.seq > newest_old for e in await log_of(store, "bob")] == [True]
    assert (
        await store.write(
            lambda c: events.purge_before(c, events.written_before(c, clock() - 1), 500)
        )
        == 0
    )


async def test_purging_keeps_old_events_a_live_webhook_has_not_taken_in(
    store: Store, clock: FakeClock
) -> None:
    """The dispatcher runs in `serve` only: one that stayed down longer than the retention
    must still learn of the mail that came meanwhile."""
    await store.write(lambda c: agents.create_agent(c, "bob", now=clock()))
    await store.write(lambda c: agents.create_agent(c, "carol", now=clock()))
    for hook, agent in (("w_bob", "bob"), ("w_gone", "carol")):
        await store.write(
            lambda c, hook=hook, agent=agent: webhooks.insert_webhook(
                c,
                id=hook,
                agent=agent,
                url="http://x/",
                events=["message.created"],
                secret="s",
                now=clock(),
                key_id=None,
            )
        )
    await store.write(lambda c: webhooks.delete_webhook(c, "w_gone", clock()))
    await put(store, "alice", ["bob", "carol"], "while serve was down")
    clock.advance(100)
    purged = await store.write(
        lambda c: events.purge_before(c, events.written_before(c, clock()), 500)
    )
    assert purged == 1  # carol's: her webhook was deleted, so nothing awaits it
    assert len(await log_of(store, "bob")) == 1

    assert await store.write(lambda c: webhooks.enqueue(c, clock(), 100)) == 1  # taken in
    assert (
        await store.write(lambda c: events.purge_before(c, events.written_before(c, clock()), 500))
        == 1
    )


async def test_more_mail_expiring_at_once_than_a_statement_takes_values_tells_its_sender(
    store: Store, clock: FakeClock
) -> None:
    """PostgreSQL's driver takes at most 32,767 parameters in a statement: the expiry of more
    of one recipient's mail at once (an inbox cap raised that high) failed there, every time
    the sweeper or the recipient's inbox tried again. Each message's sender hears of it."""
    count = 33_000

    def fill(conn: Connection) -> None:
        now = clock()
        rows = [
            {
                "id": f"m_{i}",
                "sender": "alice",
                "recipients": '["bob"]',
                "kind": "message",
                "body": "soon gone",
                "thread_id": f"m_{i}",
                "priority": "normal",
                "must_read": False,
                "created_at": now,
                "expires_at": now + 1,
                "trust": "verified",
            }
            for i in range(count)
        ]
        conn.execute(insert(schema.messages), rows)
        seqs = conn.execute(select(schema.messages.c.seq)).scalars().all()
        conn.execute(
            insert(schema.deliveries),
            [
                {"recipient": "bob", "message_seq": s, "state": "queued", "urgent": False}
                | {"expires_at": clock() + 1}
                for s in seqs
            ],
        )

    await store.write(fill)
    clock.advance(2)
    assert len(await store.write(lambda c: expiry.expire_due(c, clock(), "bob"))) == count

    def told(conn: Connection) -> int:
        query = select(func.count()).where(
            schema.events.c.agent == "alice", schema.events.c.type == "message.expired"
        )
        return int(conn.execute(query).scalar_one())

    assert await store.read(told) == count
