"""Each agent's event log: written beside the change it tells of, read by cursor.

The rows are written by `store.mail` in the same transaction as the delivery, read, ack or
expiry, one statement per batch (an INSERT … SELECT from the rows just touched), so the log and
the mail never disagree. `seq` is one counter for the whole table: a cursor is a plain number,
and since writes take turns (SQLite's writer, PostgreSQL's write lock) it only grows in commit
order, so "after this cursor" misses nothing. Each write notes whose log grew
(`wakeups.concern`), so only their waiters wake when it commits; whatever else writes events
must do the same.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from typing import Any

from sqlalchemy import (
    BindParameter,
    Connection,
    Float,
    Row,
    String,
    Text,
    bindparam,
    delete,
    exists,
    func,
    insert,
    literal_column,
    select,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from agentpost.domain.events import Event, EventType
from agentpost.store import wakeups
from agentpost.store.prepared import (
    NUMBERED_UP_TO,
    Prepared,
    in_parts,
    numbered,
    numbered_values,
)
from agentpost.store.retained import Cutoff
from agentpost.store.schema import by_code_point, deliveries, events, messages, webhooks

_COLUMNS = ["agent", "type", "message_id", "at", "data"]


class _JsonObject(FunctionElement[str]):
    """`json_object('key', value, …)` as text: SQLite's json_object, PostgreSQL's
    json_build_object. It quotes whatever a subject holds, so data is built in one statement."""

    type = Text()
    inherit_cache = True


@compiles(_JsonObject)
def _json_object(element: _JsonObject, compiler: SQLCompiler, **kw: Any) -> str:
    return f"json_object({compiler.process(element.clauses, **kw)})"


@compiles(_JsonObject, "postgresql")
def _json_build_object(element: _JsonObject, compiler: SQLCompiler, **kw: Any) -> str:
    return f"CAST(json_build_object({compiler.process(element.clauses, **kw)}) AS TEXT)"


def _json(**fields: Any) -> _JsonObject:
    args: list[Any] = []
    for key, value in fields.items():
        args += [literal_column(f"'{key}'"), value]
    return _JsonObject(*args)


def _constant(value: str) -> Any:
    return literal_column(f"'{value}'", String)


_NOW: BindParameter[float] = bindparam("now", type_=Float)

# message.created, in each recipient's log: what arrived, from whom, how far its sender is
# trusted, without its body; the channel as every face shows it (`#name`).
_CREATED = Prepared(
    insert(events)
    .from_select(
        _COLUMNS,
        select(
            deliveries.c.recipient,
            _constant(EventType.MESSAGE_CREATED),
            messages.c.id,
            messages.c.created_at,
            _json(
                **{
                    "from": messages.c.sender,
                    "subject": messages.c.subject,
                    "thread_id": messages.c.thread_id,
                    "kind": messages.c.kind,
                    "priority": messages.c.priority,
                    "trust": messages.c.trust,
                    "channel": _constant("#") + messages.c.channel,  # NULL stays NULL
                }
            ),
        )
        .join(messages, messages.c.seq == deliveries.c.message_seq)
        .where(deliveries.c.message_seq == bindparam("seq"))
        .order_by(by_code_point(deliveries.c.recipient)),
    )
    .returning(events.c.agent, events.c.seq)
)


# message.read / acked / expired, in the sender's log: which recipient did it.
def _to_senders(which: Any) -> Any:
    return (
        insert(events)
        .from_select(
            _COLUMNS,
            select(
                messages.c.sender,
                bindparam("type", type_=String),
                messages.c.id,
                _NOW,
                bindparam("data", type_=Text),
            )
            .where(which)
            .order_by(messages.c.seq),
        )
        .returning(events.c.agent, events.c.seq)
    )


_TO_SENDERS = _to_senders(messages.c.seq.in_(bindparam("seqs", expanding=True)))


@cache
def _to_senders_of(count: int) -> Prepared:
    """For `count` messages (a woken `wait` mostly reads one): no IN list to render each time."""
    return Prepared(_to_senders(messages.c.seq.in_(numbered("seq", count))))


def record_created(conn: Connection, seq: int) -> None:
    """A message.created event for each delivery of message `seq` (just inserted)."""
    wakeups.concern(conn, _CREATED.rows(conn, {"seq": seq}))


def record_for_senders(
    conn: Connection, type_: EventType, recipient: str, seqs: Sequence[int], now: float
) -> None:
    """Tell the senders of messages `seqs` that `recipient` read, acked or let them expire."""
    if seqs:
        params = {"type": type_.value, "data": json.dumps({"to": recipient}), "now": now}
        if len(seqs) <= NUMBERED_UP_TO:
            ordered = numbered_values("seq", sorted(seqs))
            found: Sequence[Any] = _to_senders_of(len(seqs)).rows(conn, {**params, **ordered})
        else:
            found = [
                row
                for part in in_parts(sorted(seqs))
                for row in conn.execute(_TO_SENDERS, {**params, "seqs": part})
            ]
        wakeups.concern(conn, found)


# -- reading ------------------------------------------------------------------------------------

_AFTER = (
    select(events)
    .where(events.c.agent == bindparam("agent"), events.c.seq > bindparam("after"))
    .order_by(events.c.seq)
    .limit(bindparam("limit"))
)
_NEWEST_FOR = select(func.max(events.c.seq)).where(events.c.agent == bindparam("agent"))
_NEWEST = select(func.max(events.c.seq))
_TOUCHED = (
    select(events.c.agent, events.c.seq)
    .where(events.c.seq > bindparam("after"))
    .order_by(events.c.seq)
    .limit(bindparam("limit"))
)


def event_from_row(row: Row[Any]) -> Event:
    data = json.loads(row.data) if row.data else {}
    return Event(seq=row.seq, type=row.type, message_id=row.message_id, at=row.at, data=data)


def events_after(conn: Connection, agent: str, after: int, limit: int) -> list[Event]:
    """`agent`'s events after the cursor `after`, oldest first."""
    rows = conn.execute(_AFTER, {"agent": agent, "after": after, "limit": limit})
    return [event_from_row(row) for row in rows]


def newest_for(conn: Connection, agent: str) -> int:
    return int(conn.execute(_NEWEST_FOR, {"agent": agent}).scalar() or 0)


def newest(conn: Connection) -> int:
    return int(conn.execute(_NEWEST).scalar() or 0)


def touched(conn: Connection, after: int, limit: int) -> tuple[dict[str, int], int]:
    """Whose logs grew after `after` ({agent: their newest seq}), and the newest seq seen: the
    last one listed, or when there is none, the newest there is (so a cursor from nowhere, a
    huge one included, comes back to the log)."""
    out: dict[str, int] = {}
    for agent, seq in conn.execute(_TOUCHED, {"after": after, "limit": limit}):
        out[agent] = seq
    return out, max(out.values()) if out else newest(conn)


# -- retention ------------------------------------------------------------------------------------


_AWAITED_BY_A_WEBHOOK = exists().where(
    webhooks.c.agent == events.c.agent,
    webhooks.c.deleted_at.is_(None),
    webhooks.c.cursor < events.c.seq,
)
"""An event a live webhook of its agent has not taken in yet (its dispatcher, in `serve`, may
not have run for longer than the retention)."""


def written_before(conn: Connection, before: float) -> Cutoff:
    """The events written before `before`, for `purge_before` (`store.retained`)."""
    return Cutoff.find(conn, events.c.seq, events.c.at, before)


def purge_before(conn: Connection, cutoff: Cutoff, limit: int) -> int:
    """Delete up to `limit` events of `cutoff` that no live webhook still awaits; returns how
    many went.

    Cursors never start over, even once every event went: a `seq` is never handed out twice
    (a sequence on PostgreSQL, AUTOINCREMENT on SQLite).
    """
    seqs = list(
        conn.execute(
            select(events.c.seq)
            .where(cutoff.rows(events.c.seq, events.c.at), ~_AWAITED_BY_A_WEBHOOK)
            .order_by(events.c.seq)
            .limit(limit)
        ).scalars()
    )
    if seqs:
        conn.execute(delete(events).where(events.c.seq.in_(seqs)))
    return len(seqs)
