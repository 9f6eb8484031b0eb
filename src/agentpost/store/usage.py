"""What each agent has sent and received: counts over the log, for usage and quotas."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, case, func, or_, select

from agentpost.domain.models import DeliveryState
from agentpost.store.schema import deliveries, messages

SentCounts = tuple[int, int]
"""(messages stored, of which sent since the cut-off)."""
ReceivedCounts = tuple[int, int, int]
"""(deliveries stored, unread, unacknowledged)."""


def _count_if(condition: ColumnElement[bool]) -> Any:
    return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)


def sent_counts(
    conn: Connection, names: Sequence[str] | None, since: float
) -> dict[str, SentCounts]:
    query = select(
        messages.c.sender, func.count(), _count_if(messages.c.created_at >= since)
    ).group_by(messages.c.sender)
    if names is not None:
        query = query.where(messages.c.sender.in_(list(names)))
    return {row[0]: (int(row[1]), int(row[2])) for row in conn.execute(query)}


def received_counts(
    conn: Connection, names: Sequence[str] | None, now: float
) -> dict[str, ReceivedCounts]:
    """Unread and unacknowledged count as the inbox does: unread mail past its TTL is neither."""
    queued = deliveries.c.state == DeliveryState.QUEUED.value
    not_due = or_(deliveries.c.expires_at.is_(None), deliveries.c.expires_at > now)
    unread = and_(queued, not_due)
    unacked = or_(unread, deliveries.c.state == DeliveryState.READ.value)
    query = select(
        deliveries.c.recipient, func.count(), _count_if(unread), _count_if(unacked)
    ).group_by(deliveries.c.recipient)
    if names is not None:
        query = query.where(deliveries.c.recipient.in_(list(names)))
    return {row[0]: (int(row[1]), int(row[2]), int(row[3])) for row in conn.execute(query)}
