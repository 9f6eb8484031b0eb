"""Idempotency keys: the first answer to a request, kept per agent and key for a while."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from sqlalchemy import Connection, Row, bindparam, delete, select

from agentpost.store.schema import idempotency

_FIND = select(idempotency).where(
    idempotency.c.agent == bindparam("agent"), idempotency.c.key == bindparam("key")
)


def find(conn: Connection, agent: str, key: str, *, newer_than: float) -> Row[Any] | None:
    """The stored answer for `key`, unless it is from `newer_than` or before (forgotten)."""
    row = conn.execute(_FIND, {"agent": agent, "key": key}).first()
    return row if row is not None and row.created_at > newer_than else None


def save(
    conn: Connection,
    dialect: ModuleType,
    *,
    agent: str,
    key: str,
    request_hash: str,
    response: str,
    now: float,
) -> None:
    """Store the answer; a forgotten (expired) row under the same key is replaced."""
    values = {
        "agent": agent,
        "key": key,
        "request_hash": request_hash,
        "response": response,
        "created_at": now,
    }
    update = {k: v for k, v in values.items() if k not in ("agent", "key")}
    conn.execute(dialect.upsert(idempotency, ["agent", "key"], values, update))


def purge(conn: Connection, until: float) -> int:
    """Delete what `find` no longer returns: answers from `until` or before."""
    result = conn.execute(delete(idempotency).where(idempotency.c.created_at <= until))
    return int(result.rowcount)
