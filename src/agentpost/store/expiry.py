"""Expiry: unread mail past its TTL becomes a tombstone, and its sender is told.

Mail withheld by a block (`silent_expiries`) falls due the same way, so the sender's event log
tells a block no more than the receipts do. The sweeper (`services.sweeper`) runs
`expire_due` when the next expiry falls due; an inbox read runs it for its reader.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    BindParameter,
    Connection,
    and_,
    bindparam,
    delete,
    exists,
    func,
    insert,
    or_,
    select,
    update,
)

from agentpost.domain.events import EventType
from agentpost.domain.models import DeliveryState
from agentpost.store import events
from agentpost.store.prepared import Prepared
from agentpost.store.schema import deliveries, silent_expiries

_NOW: BindParameter[float] = bindparam("now")
_RECIPIENT: BindParameter[str] = bindparam("for_recipient")

_DUE = and_(
    deliveries.c.state == DeliveryState.QUEUED.value,
    deliveries.c.expires_at.is_not(None),
    deliveries.c.expires_at <= _NOW,
)
# When it expired is when its TTL fell due, as receipts say before any look made the tombstone,
# not when a look came round to it (no process may have run then).
_EXPIRED = {"state": DeliveryState.EXPIRED.value, "expired_at": deliveries.c.expires_at}
_EXPIRE_ALL = (
    update(deliveries)
    .where(_DUE)
    .values(_EXPIRED)
    .returning(deliveries.c.recipient, deliveries.c.message_seq)
)
_EXPIRE_FOR = Prepared(
    update(deliveries)
    .where(deliveries.c.recipient == _RECIPIENT, _DUE)
    .values(_EXPIRED)
    .returning(deliveries.c.recipient, deliveries.c.message_seq)
)


_SILENT_DUE = silent_expiries.c.expires_at <= _NOW
_EXPIRE_SILENT = Prepared(
    delete(silent_expiries)
    .where(_SILENT_DUE)
    .returning(silent_expiries.c.recipient, silent_expiries.c.message_seq)
)


def expire_due(conn: Connection, now: float, recipient: str | None = None) -> list[int]:
    """Turn unread mail past its TTL into tombstones (must_read mail has no expiry), and tell
    each sender (message.expired). Everyone's (`recipient` None, the sweeper's look) also
    tells the senders of mail withheld by a block, as if it had gone unread. Returns the `seq`
    of the message of each delivery (or withheld copy) that expired: a message once for each
    recipient it expired for."""
    rows: list[Any]
    if recipient is None:
        rows = [*conn.execute(_EXPIRE_ALL, {"now": now}), *_EXPIRE_SILENT.rows(conn, {"now": now})]
    else:
        rows = list(_EXPIRE_FOR.rows(conn, {"now": now, "for_recipient": recipient}))
    by_recipient: dict[str, list[int]] = {}
    for name, seq in rows:
        by_recipient.setdefault(name, []).append(seq)
    for name, seqs in by_recipient.items():
        events.record_for_senders(conn, EventType.MESSAGE_EXPIRED, name, seqs, now)
    return [seq for _name, seq in rows]


_ANY_DUE = Prepared(
    select(or_(exists().where(_DUE), exists().where(_SILENT_DUE)))  # each by its expiry index
)


def any_due(conn: Connection, now: float) -> bool:
    """Whether everyone's `expire_due` would find anything at `now`: a read, so the sweeper's
    look takes the write lock only when there is mail to expire (mostly there is none)."""
    return bool(_ANY_DUE.scalar(conn, {"now": now}))


def withhold(conn: Connection, seq: int, recipients: Sequence[str], expires_at: float) -> None:
    """Message `seq` was withheld from `recipients` (they block its sender); its TTL falls
    due at `expires_at`, when its sender is told it expired for them."""
    conn.execute(
        insert(silent_expiries),
        [{"message_seq": seq, "recipient": name, "expires_at": expires_at} for name in recipients],
    )


_NEXT_DUE = Prepared(
    select(deliveries.c.expires_at)
    .where(
        deliveries.c.expires_at > _NOW,  # implies IS NOT NULL: the expiry index serves it
        deliveries.c.state == DeliveryState.QUEUED.value,
    )
    .order_by(deliveries.c.expires_at)
    .limit(1)
)


_NEXT_SILENT_DUE = Prepared(
    select(func.min(silent_expiries.c.expires_at)).where(silent_expiries.c.expires_at > _NOW)
)


def next_expiry(conn: Connection, now: float) -> float | None:
    """When the earliest unread (or withheld) mail falls due after `now` (None: none has a
    TTL)."""
    found = [
        float(due)
        for due in (
            _NEXT_DUE.scalar(conn, {"now": now}),
            _NEXT_SILENT_DUE.scalar(conn, {"now": now}),
        )
        if due is not None
    ]
    return min(found, default=None)
