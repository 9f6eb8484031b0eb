"""A request's one response is the database's rule: a second response for the same request is
refused by the unique index, and `answered_once` reports it as `conflict`, on both databases."""

from __future__ import annotations

import pytest
from sqlalchemy import Connection

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.ids import message_id
from agentpost.store import mail, requests
from agentpost.store.database import Store

pytestmark = pytest.mark.anyio


def _put(conn: Connection, store: Store, kind: str, reply_to: str | None) -> str:
    now = store.clock()
    mid = message_id(now)
    mail.insert_message(
        conn,
        id=mid,
        sender="bob",
        recipients='["alice"]',
        channel=None,
        kind=kind,
        subject="",
        body="an answer",
        data=None,
        thread_id=reply_to or mid,
        reply_to=reply_to,
        priority="normal",
        must_read=False,
        created_at=now,
        expires_at=None,
        trust="verified",
    )
    return mid


async def respond(store: Store, request_id: str) -> str:
    def tx(conn: Connection) -> str:
        with requests.answered_once(request_id):
            return _put(conn, store, "response", request_id)

    return await store.write(tx)


async def test_a_second_response_to_a_request_is_a_conflict_and_stores_nothing(
    store: Store,
) -> None:
    request_id = await store.write(lambda conn: _put(conn, store, "request", None))
    first = await respond(store, request_id)
    with pytest.raises(AgentpostError) as caught:
        await respond(store, request_id)
    assert caught.value.code is ErrorCode.CONFLICT
    found = await store.read(lambda conn: requests.response_row(conn, request_id))
    assert found is not None
    assert found.id == first


async def test_replies_of_other_kinds_are_not_limited(store: Store) -> None:
    request_id = await store.write(lambda conn: _put(conn, store, "request", None))
    for _ in range(2):
        await store.write(lambda conn: _put(conn, store, "message", request_id))
    assert await store.read(lambda conn: requests.response_row(conn, request_id)) is None
    await respond(store, request_id)
