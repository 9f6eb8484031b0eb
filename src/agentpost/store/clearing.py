"""Wiping what a message said once every recipient handled it (`clear_on_ack`).

The row stays (ids, thread, receipts, the audit's metadata); only the body and data go. On
SQLite the full-text index follows through its update trigger.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, exists, update

from agentpost.domain.models import DeliveryState
from agentpost.store import withheld
from agentpost.store.schema import deliveries, messages

_OPEN = (DeliveryState.QUEUED.value, DeliveryState.READ.value)


def clear_handled(conn: Connection, ids: Sequence[str], now: float) -> int:
    """Clear those of `ids` that no recipient still has open (queued or read), nor holds as
    unread by a block: a wiped body would tell the sender of the block."""
    if not ids:
        return 0
    still_open = exists().where(
        deliveries.c.message_seq == messages.c.seq, deliveries.c.state.in_(_OPEN)
    )
    result = conn.execute(
        update(messages)
        .where(messages.c.id.in_(list(ids)), ~still_open, ~withheld.still_withheld(now))
        .values(body="", data=None)
    )
    return int(result.rowcount)
