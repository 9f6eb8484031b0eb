"""Retention of mail: the hourly sweep's purge of old messages nobody still has to handle.

A batch walks the next messages by `seq`, so its cost follows the batch, not the store: the
sweep (`services.mailbox.Mailbox.sweep`) carries the walk from one batch to the next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, delete, exists, select

from agentpost.domain.models import Kind
from agentpost.store import withheld
from agentpost.store.mail import OPEN_STATES
from agentpost.store.schema import deliveries, messages, silent_expiries


def _answers_a_kept_request() -> Any:
    """Whether a message (a condition on `messages`) is the response to a request someone
    still has open: it stays while the request does, or the request would read unanswered,
    and could be answered again. One EXISTS, the kind inside it: PostgreSQL then looks up
    each message's request, where beside it (an OR once negated) it hashed every message of
    the store to find the open requests, for each batch."""
    request = messages.alias("request")
    return exists().where(
        messages.c.kind == Kind.RESPONSE.value,
        request.c.id == messages.c.reply_to,
        deliveries.c.message_seq == request.c.seq,
        deliveries.c.state.in_(OPEN_STATES),
    )


@dataclass(frozen=True, slots=True)
class Purged:
    """One batch of retention: how many messages went, and the `seq` the next batch walks
    after (None: the walk is done)."""

    count: int
    after: int | None


def purge_handled(
    conn: Connection, before: float, limit: int, now: float, after: int = 0
) -> Purged:
    """Retention: walk the next `limit` messages after `seq` `after`, and delete those created
    before `before` that nobody still has to handle (every delivery acked or expired, or none
    at all).

    Unread and read-but-unacked mail stays, so must_read mail stays until it is acked. So does
    mail withheld by a block until its TTL (if any) has passed: its sender's receipt shows it
    unread till then, and it must stay for as long as unread mail would; and the answer to a
    request that stays. On SQLite the full-text index follows through its delete trigger.

    A batch reads its `limit` messages and what hangs on them, however large the store: asked
    for the first `limit` purgeable messages instead, PostgreSQL read every delivery, and each
    batch walked again the mail the ones before had kept. The walk is done at the newest
    message, or after a batch of none but young mail: a message that a replica whose clock is
    behind stamped older than a whole batch before it waits for the next sweep.
    """
    walked = conn.execute(
        select(messages.c.seq, messages.c.created_at)
        .where(messages.c.seq > after)
        .order_by(messages.c.seq)
        .limit(limit)
    ).all()
    if not walked:
        return Purged(0, None)
    through = int(walked[-1].seq)
    still_open = exists().where(
        deliveries.c.message_seq == messages.c.seq, deliveries.c.state.in_(OPEN_STATES)
    )
    seqs = list(
        conn.execute(
            select(messages.c.seq).where(
                messages.c.seq > after,
                messages.c.seq <= through,
                messages.c.created_at < before,
                ~still_open,
                ~withheld.still_withheld(now),
                ~_answers_a_kept_request(),
            )
        ).scalars()
    )
    if seqs:
        conn.execute(delete(deliveries).where(deliveries.c.message_seq.in_(seqs)))
        conn.execute(delete(silent_expiries).where(silent_expiries.c.message_seq.in_(seqs)))
        withheld.forget(conn, seqs)
        conn.execute(delete(messages).where(messages.c.seq.in_(seqs)))
    more = len(walked) == limit and any(row.created_at < before for row in walked)
    return Purged(len(seqs), through if more else None)
