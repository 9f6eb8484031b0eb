"""Whom a broadcast was withheld from: kept per message, read back by message, purged with it."""

from __future__ import annotations

import pytest

from agentpost.domain.ids import message_id
from agentpost.store import mail, withheld
from agentpost.store.database import Connection, Store

pytestmark = pytest.mark.anyio


async def broadcast(store: Store) -> int:
    """A #general message of alice's; its seq."""

    def tx(conn: Connection) -> int:
        now = store.clock()
        mid = message_id(now)
        return mail.insert_message(
            conn,
            id=mid,
            sender="alice",
            recipients='["#general"]',
            channel="general",
            kind="message",
            subject="",
            body="news",
            data=None,
            thread_id=mid,
            reply_to=None,
            priority="normal",
            must_read=False,
            created_at=now,
            expires_at=None,
            trust="verified",
        )

    return await store.write(tx)


async def test_each_broadcast_keeps_its_own_blockers_by_name(store: Store) -> None:
    first, second, quiet = [await broadcast(store) for _ in range(3)]
    await store.write(lambda conn: withheld.record(conn, first, ["dave", "carol"]))
    await store.write(lambda conn: withheld.record(conn, second, ["bob"]))

    found = await store.read(lambda conn: withheld.of_messages(conn, [first, second, quiet]))
    assert found == {first: ["carol", "dave"], second: ["bob"]}
    assert await store.read(lambda conn: withheld.of_messages(conn, [])) == {}


async def test_forgetting_a_message_forgets_only_its_rows(store: Store) -> None:
    first, second = [await broadcast(store) for _ in range(2)]
    for seq in (first, second):
        await store.write(lambda conn, seq=seq: withheld.record(conn, seq, ["carol"]))
    await store.write(lambda conn: withheld.forget(conn, [first]))
    found = await store.read(lambda conn: withheld.of_messages(conn, [first, second]))
    assert found == {second: ["carol"]}
