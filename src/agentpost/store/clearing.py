"""Wiping what a message said once every recipient handled it (`clear_on_ack`).

The row stays (ids, thread, receipts, the audit's metadata); only the body and data go. On
SQLite the full-text index follows through its update trigger.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import ColumnElement, Connection, and_, exists, update

from agentpost.domain.models import DeliveryState
from agentpost.store import withheld
from agentpost.store.prepared import in_parts
from agentpost.store.schema import deliveries, messages

_OPEN = (DeliveryState.QUEUED.value, DeliveryState.READ.value)


def clear_handled(conn: Connection, ids: Sequence[str], now: float) -> int:
    """Clear those of `ids` (mail just acked) that no recipient still has open (queued or
    read), nor holds as unread by a block: a wiped body would tell the sender of the block."""
    if not ids:
        return 0
    return _clear(conn, messages.c.id.in_(list(ids)), now)


def clear_expired(conn: Connection, seqs: Sequence[int], now: float) -> int:
    """Clear those of `seqs` (mail just expired for someone) that are handled as `clear_handled`
    has it and that someone acknowledged: the expiry that comes after the last ack wipes the
    content as an ack after the expiry does. Mail nobody acked keeps it."""
    if not seqs:
        return 0
    acked = exists().where(
        deliveries.c.message_seq == messages.c.seq,
        deliveries.c.state == DeliveryState.ACKED.value,
    )
    return sum(
        _clear(conn, and_(messages.c.seq.in_(part), acked), now)
        for part in in_parts(sorted(set(seqs)))
    )


def _clear(conn: Connection, which: ColumnElement[bool], now: float) -> int:
    # Unread mail past its TTL is expired, as its receipt says, before a look makes the
    # tombstone: it holds nothing open (as mail withheld past its TTL does not).
    due = and_(
        deliveries.c.state == DeliveryState.QUEUED.value,
        deliveries.c.expires_at.is_not(None),
        deliveries.c.expires_at <= now,
    )
    still_open = exists().where(
        deliveries.c.message_seq == messages.c.seq, deliveries.c.state.in_(_OPEN), ~due
    )
    result = conn.execute(
        update(messages)
        .where(which, ~still_open, ~withheld.still_withheld(now))
        .values(body="", data=None)
    )
    return int(result.rowcount)
