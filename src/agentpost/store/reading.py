"""What a reader may see of the log: one message, a thread, a channel's history, a search.

Each read answers with the reader's own delivery state beside the message, as the inbox and
the sender's receipts tell it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, Row, and_, case, exists, literal, or_, select

from agentpost.domain.limits import never_stored
from agentpost.domain.models import DeliveryState
from agentpost.store.schema import blocks, deliveries, messages, withheld


def visible_to(reader: str, channels: Iterable[str]) -> Any:
    """What `reader` may see: what they sent, what was delivered to them, their channels'
    history but for what `dropped_for` them."""
    on_a_channel = and_(messages.c.channel.in_(list(channels)), ~dropped_for(reader))
    return or_(messages.c.sender == reader, _delivered_to(reader), on_a_channel)


def _delivered_to(reader: str) -> Any:
    return exists().where(
        deliveries.c.message_seq == messages.c.seq, deliveries.c.recipient == reader
    )


def dropped_for(reader: str) -> Any:
    """A broadcast that never reached `reader` because they block its sender: withheld from
    them when it was sent, or sent before they joined by someone they block now. What was
    delivered before a block stays, as it does in the inbox."""
    withheld_from = exists().where(
        withheld.c.message_seq == messages.c.seq, withheld.c.recipient == reader
    )
    blocks_sender = exists().where(
        blocks.c.recipient == reader, blocks.c.sender == messages.c.sender
    )
    return or_(withheld_from, and_(blocks_sender, ~_delivered_to(reader)))


def _with_reader_state(reader: str, now: float) -> Any:
    """The reader's delivery state as the inbox and receipts tell it: unread mail past its TTL
    is expired, even before a sweep has made it a tombstone."""
    due = and_(
        deliveries.c.state == DeliveryState.QUEUED.value,
        deliveries.c.expires_at.is_not(None),
        deliveries.c.expires_at <= literal(now),
    )
    state = case((due, literal(DeliveryState.EXPIRED.value)), else_=deliveries.c.state)
    return (
        select(state)
        .where(deliveries.c.message_seq == messages.c.seq, deliveries.c.recipient == reader)
        .scalar_subquery()
        .label("delivery_state")
    )


def visible_message(
    conn: Connection, reader: str, channels: Iterable[str], message_id: str, now: float
) -> Row[Any] | None:
    """The message, with the reader's delivery state, if `reader` may see it; else None."""
    if never_stored(message_id):
        return None
    return conn.execute(
        select(messages, _with_reader_state(reader, now)).where(
            messages.c.id == message_id, visible_to(reader, channels)
        )
    ).first()


def thread_rows(
    conn: Connection, reader: str, channels: Iterable[str], thread_id: str, limit: int, now: float
) -> list[Row[Any]]:
    """The newest `limit` messages of a thread that `reader` may see, returned oldest first."""
    newest = conn.execute(
        select(messages, _with_reader_state(reader, now))
        .where(messages.c.thread_id == thread_id, visible_to(reader, channels))
        .order_by(messages.c.seq.desc())
        .limit(limit)
    )
    return list(reversed(list(newest)))


def channel_rows(
    conn: Connection, reader: str, channel: str, limit: int, before_seq: int | None, now: float
) -> list[Row[Any]]:
    """The newest `limit` messages of a channel (before a cursor), returned oldest first."""
    query = (
        select(messages, _with_reader_state(reader, now))
        .where(messages.c.channel == channel, ~dropped_for(reader))
        .order_by(messages.c.seq.desc())
        .limit(limit)
    )
    if before_seq is not None:
        query = query.where(messages.c.seq < before_seq)
    return list(reversed(list(conn.execute(query))))


def search_rows(
    conn: Connection,
    dialect: Any,
    reader: str,
    channels: Iterable[str],
    words: list[str],
    limit: int,
    now: float,
) -> list[Row[Any]]:
    query = (
        select(messages, _with_reader_state(reader, now))
        .where(visible_to(reader, channels))
        .order_by(messages.c.seq.desc())
        .limit(limit)
    )
    return list(conn.execute(dialect.search(query, messages, words)))
