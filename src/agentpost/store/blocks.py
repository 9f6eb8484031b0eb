"""Queries on blocks: a recipient (or the owner for them) refuses mail from one sender."""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

from sqlalchemy import Connection, bindparam, delete, select

from agentpost.store.prepared import Prepared, in_parts
from agentpost.store.schema import blocks, by_code_point

_BLOCKING_ONE = Prepared(
    select(blocks.c.recipient).where(
        blocks.c.recipient == bindparam("recipient"), blocks.c.sender == bindparam("sender")
    )
)
_BLOCKING_MANY = select(blocks.c.recipient).where(
    blocks.c.recipient.in_(bindparam("recipients", expanding=True)),
    blocks.c.sender == bindparam("sender"),
)


def blocking(conn: Connection, sender: str, recipients: Sequence[str]) -> set[str]:
    """Those of `recipients` who blocked `sender`: one primary-key probe each."""
    if not recipients:
        return set()
    if len(recipients) == 1:  # a direct message, without an expanding IN's compile step
        rows = _BLOCKING_ONE.rows(conn, {"recipient": recipients[0], "sender": sender})
    else:
        rows = [
            row
            for part in in_parts(recipients)
            for row in conn.execute(_BLOCKING_MANY, {"recipients": part, "sender": sender})
        ]
    return {recipient for (recipient,) in rows}


def blocked_senders(conn: Connection, recipient: str) -> list[str]:
    rows = conn.execute(
        select(blocks.c.sender)
        .where(blocks.c.recipient == recipient)
        .order_by(by_code_point(blocks.c.sender))
    )
    return [row.sender for row in rows]


def add(
    conn: Connection, dialect: ModuleType, recipient: str, sender: str, *, by: str, now: float
) -> None:
    conn.execute(
        dialect.insert_ignore(blocks).values(
            recipient=recipient, sender=sender, created_at=now, created_by=by
        )
    )


def remove(conn: Connection, recipient: str, sender: str) -> None:
    conn.execute(delete(blocks).where(blocks.c.recipient == recipient, blocks.c.sender == sender))
