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


def visible_to(reader: str, channels: Iterable[str], now: float) -> Any:
    """What `reader` may see: what they sent, what was delivered to them and has not expired
    unread, and what their channels' history shows them of the rest (`_seen_undelivered`)."""
    on_a_channel = and_(messages.c.channel.in_(list(channels)), _seen_undelivered(reader, now))
    return or_(messages.c.sender == reader, _live_delivery(reader, now), on_a_channel)


def seen_in_history(reader: str, now: float) -> Any:
    """What a member sees of their channel's history: as `visible_to`, its channel aside."""
    return or_(
        messages.c.sender == reader,
        _live_delivery(reader, now),
        _seen_undelivered(reader, now),
    )


def _seen_undelivered(reader: str, now: float) -> Any:
    """A broadcast sent before `reader` joined its channel, that its history still shows
    them: not one they would not have got (`_dropped_for`), nor one past its TTL, which no
    member who had not read it in time sees any more."""
    return and_(
        ~_delivered_to(reader),
        ~_dropped_for(reader),
        or_(messages.c.expires_at.is_(None), messages.c.expires_at > literal(now)),
    )


def _live_delivery(reader: str, now: float) -> Any:
    """Delivered to `reader`, and not expired: unread mail past its TTL is gone as from the
    inbox, even before a sweep has made it a tombstone."""
    return exists().where(
        deliveries.c.message_seq == messages.c.seq,
        deliveries.c.recipient == reader,
        deliveries.c.state != DeliveryState.EXPIRED.value,
        ~_due(now),
    )


def _due(now: float) -> Any:
    return and_(
        deliveries.c.state == DeliveryState.QUEUED.value,
        deliveries.c.expires_at.is_not(None),
        deliveries.c.expires_at <= literal(now),
    )


def _delivered_to(reader: str) -> Any:
    return exists().where(
        deliveries.c.message_seq == messages.c.seq, deliveries.c.recipient == reader
    )


def _dropped_for(reader: str) -> Any:
    """A broadcast that would not have reached `reader`: withheld from them when it was sent,
    or from someone they block now (sent before they joined). What was delivered before a
    block stays, as it does in the inbox."""
    withheld_from = exists().where(
        withheld.c.message_seq == messages.c.seq, withheld.c.recipient == reader
    )
    blocks_sender = exists().where(
        blocks.c.recipient == reader, blocks.c.sender == messages.c.sender
    )
    return or_(withheld_from, blocks_sender)


def _with_reader_state(reader: str, now: float) -> Any:
    """The reader's delivery state as the inbox and receipts tell it: unread mail past its TTL
    is expired, even before a sweep has made it a tombstone."""
    state = case((_due(now), literal(DeliveryState.EXPIRED.value)), else_=deliveries.c.state)
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
            messages.c.id == message_id, visible_to(reader, channels, now)
        )
    ).first()


def thread_exists(conn: Connection, thread_id: str) -> bool:
    """Whether any message is in the thread `thread_id`, whoever may see it."""
    found = select(messages.c.seq).where(messages.c.thread_id == thread_id).limit(1)
    return conn.execute(found).first() is not None


def thread_named(
    conn: Connection, reader: str, channels: Iterable[str], named: str, now: float
) -> str:
    """The thread `named` means to `reader`: the thread of that id if they see one, else the
    thread of the message of that id they may see (a reply's id is what a reader holds), else
    `named` itself (a thread nobody has written in yet, or one they may not see)."""
    member = visible_message(conn, reader, channels, named, now)
    if member is None or member.thread_id == named:
        return named
    own = select(messages.c.seq).where(
        messages.c.thread_id == named, visible_to(reader, channels, now)
    )
    if conn.execute(own.limit(1)).first() is not None:
        return named
    thread: str = member.thread_id
    return thread


def thread_rows(
    conn: Connection,
    reader: str,
    channels: Iterable[str],
    thread_id: str,
    limit: int,
    now: float,
    before_seq: int | None = None,
) -> list[Row[Any]]:
    """The newest `limit` messages of a thread that `reader` may see (before a cursor),
    returned oldest first."""
    query = (
        select(messages, _with_reader_state(reader, now))
        .where(messages.c.thread_id == thread_id, visible_to(reader, channels, now))
        .order_by(messages.c.seq.desc())
        .limit(limit)
    )
    if before_seq is not None:
        query = query.where(messages.c.seq < before_seq)
    return list(reversed(list(conn.execute(query))))


def channel_rows(
    conn: Connection, reader: str, channel: str, limit: int, before_seq: int | None, now: float
) -> list[Row[Any]]:
    """The newest `limit` messages of a channel (before a cursor), returned oldest first."""
    query = (
        select(messages, _with_reader_state(reader, now))
        .where(messages.c.channel == channel, seen_in_history(reader, now))
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
    before_seq: int | None = None,
) -> list[Row[Any]]:
    """The newest `limit` matches `reader` may see (before a cursor), newest first."""
    query = (
        select(messages, _with_reader_state(reader, now))
        .where(visible_to(reader, channels, now))
        .order_by(messages.c.seq.desc())
        .limit(limit)
    )
    if before_seq is not None:
        query = query.where(messages.c.seq < before_seq)
    return list(conn.execute(dialect.search(query, messages, words)))
