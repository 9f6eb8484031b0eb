"""Whom a message was withheld from: the recipients (or channel members) who block its sender.

A direct message names its recipients, so its receipts can show a blocker as unread without
a record; a broadcast names only its channel, whose members change. These rows keep the
blockers of each broadcast, so that its receipts tell the sender no more than a member who
never reads would (`services.outbox.with_silent_receipts`). Direct mail's blockers are kept
too, for retention: mail withheld from someone stays as long as mail they never read would
(`store.mail.purge_handled`), or its vanishing would give the block away.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, and_, delete, insert, or_, select

from agentpost.store.retained import asked_row_by_row
from agentpost.store.schema import by_code_point, messages, withheld


def record(conn: Connection, seq: int, recipients: Sequence[str]) -> None:
    conn.execute(insert(withheld), [{"message_seq": seq, "recipient": name} for name in recipients])


def of_messages(conn: Connection, seqs: Sequence[int]) -> dict[int, list[str]]:
    """Each message's withheld recipients, by name (messages without any: absent)."""
    out: dict[int, list[str]] = {}
    if not seqs:
        return out
    rows = conn.execute(
        select(withheld.c.message_seq, withheld.c.recipient)
        .where(withheld.c.message_seq.in_(list(seqs)))
        .order_by(withheld.c.message_seq, by_code_point(withheld.c.recipient))
    )
    for seq, name in rows:
        out.setdefault(seq, []).append(name)
    return out


def forget(conn: Connection, seqs: Sequence[int]) -> None:
    """Retention purges these messages."""
    conn.execute(delete(withheld).where(withheld.c.message_seq.in_(list(seqs))))


def still_withheld(now: float) -> Any:
    """Whether a message (a condition on `messages`) is withheld from someone whose silent
    receipt still reads unread: no TTL, or one not yet passed (must_read mail has none). Such
    mail is kept and keeps its content as long as mail someone has not acked does."""
    return and_(
        asked_row_by_row(
            select(withheld.c.message_seq).where(withheld.c.message_seq == messages.c.seq)
        ),
        or_(messages.c.expires_at.is_(None), messages.c.expires_at > now),
    )
