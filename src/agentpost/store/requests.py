"""Queries on blocking requests: a request's one response.

That a request is answered once is the database's rule (the unique index
`ux_messages_response`), so two responders racing on two connections cannot both win;
`answered_once` turns the loser's unique violation into the `conflict` every face knows.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Row, exists, select
from sqlalchemy.exc import IntegrityError

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.models import Kind
from agentpost.store.schema import deliveries, messages, withheld

INDEX = "ux_messages_response"
_SQLITE_TEXT = "messages.reply_to"
"""How SQLite names the index's column in its "UNIQUE constraint failed" message."""


def response_row(conn: Connection, request_id: str, reader: str = "") -> Row[Any] | None:
    """The response to `request_id`, if there is one, with `reader`'s delivery state of it.

    A response withheld from `reader` (the asker, who blocked the answerer before it answered)
    is none for them: a block drops mail silently, and an answer is mail. It is still the
    request's one response for everyone else, so the answerer cannot tell."""
    state = (
        select(deliveries.c.state)
        .where(deliveries.c.message_seq == messages.c.seq, deliveries.c.recipient == reader)
        .scalar_subquery()
        .label("delivery_state")
    )
    query = select(messages, state).where(
        messages.c.reply_to == request_id, messages.c.kind == Kind.RESPONSE.value
    )
    if reader:
        dropped = exists().where(withheld.c.message_seq == messages.c.seq)
        query = query.where(~dropped.where(withheld.c.recipient == reader))
    return conn.execute(query).first()


def already_answered(request_id: str) -> AgentpostError:
    return AgentpostError(
        ErrorCode.CONFLICT,
        f"request {request_id!r} has been answered already",
        details={"request_id": request_id},
    )


@contextmanager
def answered_once(request_id: str) -> Iterator[None]:
    """Store a response inside this block: a second one for the same request is `conflict`."""
    try:
        yield
    except IntegrityError as exc:
        text = str(exc.orig)
        if INDEX in text or _SQLITE_TEXT in text:
            raise already_answered(request_id) from None
        raise
