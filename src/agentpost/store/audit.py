"""The audit log: append-only rows of administration, failed authentication and sends, kept
for `audit_retention_days` (the rows of sends only as long as the mail)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, Row, delete, insert, select

from agentpost.domain.limits import never_stored
from agentpost.store.prepared import Prepared
from agentpost.store.retained import Cutoff
from agentpost.store.schema import audit

_INSERT = Prepared(insert(audit), keys=["at", "actor", "action", "target", "ip", "detail"])
IP_CHARS: int = audit.c.ip.type.length  # type: ignore[attr-defined]
"""An address is the client's to write (a proxy's header): kept to what the column holds,
as PostgreSQL would otherwise refuse the row, and with it the failure it records."""
_COMPACT = json.JSONEncoder(separators=(",", ":")).encode
"""`json.dumps` with separators builds an encoder on each call: every send writes a row."""


def record(
    conn: Connection,
    *,
    at: float,
    actor: str,
    action: str,
    target: str | None = None,
    ip: str | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    _INSERT.run(
        conn,
        {
            "at": at,
            "actor": actor,
            "action": action,
            "target": target,
            "ip": None if ip is None else ip[:IP_CHARS],
            "detail": None if detail is None else _COMPACT(detail),
        },
    )


def entries(
    conn: Connection,
    *,
    limit: int,
    before: int | None = None,
    actor: str | None = None,
    action: str | None = None,
) -> list[Row[Any]]:
    """Newest first; `before` is a `seq` cursor from the previous page."""
    if any(never_stored(value) for value in (actor, action) if value is not None):
        return []
    query = select(audit).order_by(audit.c.seq.desc()).limit(limit)
    if before is not None:
        query = query.where(audit.c.seq < before)
    if actor is not None:
        query = query.where(audit.c.actor == actor)
    if action is not None:
        query = query.where(audit.c.action == action)
    return list(conn.execute(query))


def written_before(conn: Connection, before: float) -> Cutoff:
    """The rows written before `before`, for `purge_before` (`store.retained`)."""
    return Cutoff.find(conn, audit.c.seq, audit.c.at, before)


def purge_before(conn: Connection, cutoff: Cutoff, limit: int) -> int:
    """Delete up to `limit` of the oldest rows of `cutoff`; returns how many went."""
    seqs = list(
        conn.execute(
            select(audit.c.seq)
            .where(cutoff.rows(audit.c.seq, audit.c.at))
            .order_by(audit.c.seq)
            .limit(limit)
        ).scalars()
    )
    if seqs:
        conn.execute(delete(audit).where(audit.c.seq.in_(seqs)))
    return len(seqs)


def purge(conn: Connection, action: str, before: float) -> int:
    """Delete rows of one action older than `before` (the rows of sends follow retention)."""
    result = conn.execute(
        delete(audit).where(
            written_before(conn, before).rows(audit.c.seq, audit.c.at),
            audit.c.action == action,
        )
    )
    return int(result.rowcount)
