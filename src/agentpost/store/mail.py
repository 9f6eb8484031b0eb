"""Queries on messages and deliveries: the log, each recipient's inbox, receipts.

The statements on the hot paths (send, inbox, unread counts) are built once, with bound
parameters: SQLAlchemy then reuses their cache keys and compiled forms, and a send costs the
database work, not Python's statement building.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Connection,
    Row,
    Select,
    and_,
    bindparam,
    delete,
    exists,
    func,
    insert,
    or_,
    select,
    true,
    update,
)

from agentpost.domain.errors import AgentpostError
from agentpost.domain.events import EventType
from agentpost.domain.limits import MAX_DATA_DEPTH, check_depth, never_stored
from agentpost.domain.models import (
    DeliveryState,
    Kind,
    Message,
    Priority,
    Receipt,
    Trust,
)
from agentpost.store import events, inbox_bounds, withheld
from agentpost.store.prepared import (
    NUMBERED_UP_TO,
    Prepared,
    in_parts,
    numbered,
    numbered_values,
)
from agentpost.store.retained import Cutoff, asked_row_by_row, walked_without_jit
from agentpost.store.schema import (
    ONE_ROW,
    by_code_point,
    deliveries,
    messages,
    sessions,
    silent_expiries,
)

OPEN_STATES = (DeliveryState.QUEUED.value, DeliveryState.READ.value)
# Written as ORs of constants, not `in_(list)`: SQLite reads them as an IN on the index, and
# SQLAlchemy need not re-render an expanding parameter on every execution.
_IS_OPEN = or_(
    deliveries.c.state == DeliveryState.QUEUED.value,
    deliveries.c.state == DeliveryState.READ.value,
)
_NOT_EXPIRED_STATE = or_(_IS_OPEN, deliveries.c.state == DeliveryState.ACKED.value)
_NOW: BindParameter[float] = bindparam("now")
_RECIPIENT: BindParameter[str] = bindparam("for_recipient")
_NOT_DUE = or_(deliveries.c.expires_at.is_(None), deliveries.c.expires_at > _NOW)
# Open mail that still holds a place in the inbox: unread mail past its TTL does not, even
# before a sweep has turned it into a tombstone.
_HOLDS_PLACE = and_(_IS_OPEN, or_(deliveries.c.state == DeliveryState.READ.value, _NOT_DUE))
_KINDS = {kind.value: kind for kind in Kind}
_PRIORITIES = {priority.value: priority for priority in Priority}
_TRUSTS = {trust.value: trust for trust in Trust}
_STATES = {state.value: state for state in DeliveryState}


def message_from_row(row: Any, state: str | None = None) -> Message:
    """A row of `messages`, SQLAlchemy's or a prepared statement's (read by column name)."""
    return Message(
        id=row.id,
        sender=row.sender,
        to=json.loads(row.recipients),
        channel=row.channel,
        kind=_KINDS[row.kind],
        subject=row.subject,
        body=row.body,
        data=None if row.data is None else _data(row.data),
        thread_id=row.thread_id,
        reply_to=row.reply_to,
        priority=_PRIORITIES[row.priority],
        must_read=bool(row.must_read),
        created_at=row.created_at,
        expires_at=row.expires_at,
        trust=_TRUSTS[row.trust],
        state=_STATES[state] if state else None,
        seq=row.seq,
    )


_TOO_DEEP_NOTE = {"agentpost": f"data nested deeper than {MAX_DATA_DEPTH} levels, not shown"}


def _data(stored: str) -> Any:
    """A message's data as stored, but for data stored before sends refused nesting past the
    limit, which no face could answer with: a note in its place, so its readers still read."""
    if len(stored) <= 2 * MAX_DATA_DEPTH:  # fewer characters cannot nest that deep
        return json.loads(stored)
    try:
        data = json.loads(stored)
        check_depth(data, MAX_DATA_DEPTH, "data")
    except (AgentpostError, RecursionError):
        return _TOO_DEEP_NOTE
    return data


_MESSAGE_COLUMNS = [c.key for c in messages.c if c.key != "seq"]
_MESSAGE_COLUMN_SET = frozenset(_MESSAGE_COLUMNS)
_INSERT_MESSAGE = Prepared(insert(messages).returning(messages.c.seq), keys=_MESSAGE_COLUMNS)
_INSERT_DELIVERIES = Prepared(
    insert(deliveries), keys=["recipient", "message_seq", "state", "urgent", "expires_at"]
)


_MESSAGE_OPTIONAL: dict[str, Any] = {
    "channel": None,
    "subject": "",
    "data": None,
    "reply_to": None,
    "expires_at": None,
}


def insert_message(conn: Connection, **values: Any) -> int:
    """Store a message (its columns but `seq`; the optional ones may be left out); returns
    its `seq`."""
    unknown = values.keys() - _MESSAGE_COLUMN_SET
    if unknown:
        raise TypeError(f"messages have no column {', '.join(sorted(unknown))}")
    return int(_INSERT_MESSAGE.scalar(conn, {**_MESSAGE_OPTIONAL, **values}))


def insert_deliveries(
    conn: Connection,
    seq: int,
    recipients: Sequence[str],
    *,
    urgent: bool,
    expires_at: float | None,
) -> None:
    """Deliver message `seq`, and tell each recipient's event log (message.created)."""
    _INSERT_DELIVERIES.run_many(
        conn,
        [
            {
                "recipient": name,
                "message_seq": seq,
                "state": DeliveryState.QUEUED.value,
                "urgent": urgent,
                "expires_at": expires_at,
            }
            for name in recipients
        ],
    )
    inbox_bounds.delivered(conn, recipients)
    events.record_created(conn, seq)


def _count_one(held: ColumnElement[bool]) -> Prepared:
    """One recipient's open deliveries that `held` says hold a place, up to a `cap`."""
    return Prepared(
        select(func.count()).select_from(
            select(deliveries.c.message_seq)
            .where(deliveries.c.recipient == bindparam("name"), held)
            .limit(bindparam("cap"))
            .subquery()
        )
    )


def _count_by_recipient(held: ColumnElement[bool]) -> Select[Any]:
    """The named recipients' open deliveries that `held` says hold a place, each counted."""
    return (
        select(deliveries.c.recipient, func.count())
        .where(deliveries.c.recipient.in_(bindparam("names", expanding=True)), held)
        .group_by(deliveries.c.recipient)
    )


# Open mail whatever its TTL, an index range alone: an upper bound on the mail that holds a
# place (unread mail past its TTL holds none), at less than half the cost of the exact count,
# which reads each row's expiry.
_OPEN_ONE = _count_one(_IS_OPEN)
_OPEN_COUNTS = _count_by_recipient(_IS_OPEN)
_UNACKED_ONE = _count_one(_HOLDS_PLACE)
_UNACKED_COUNTS = _count_by_recipient(_HOLDS_PLACE)


def at_cap(conn: Connection, caps: Mapping[str, int], now: float) -> list[str]:
    """Those of `caps`' names whose open (queued or read, not expired) mail reached their
    cap. Looked at in two steps: the open mail, up to the cap, and only where that reaches
    it, the mail that still holds a place. The first is the whole answer for almost every
    inbox; for a single name, each step walks at most `cap` index entries however much mail
    waits. An inbox whose bound (`store.inbox_bounds`) is under its cap is not looked at."""
    names = [n for n in caps if (known := inbox_bounds.bound(conn, n)) is None or known >= caps[n]]
    if not names:
        return []
    most = max(caps[n] for n in names)
    open_mail = _open_counts(conn, _OPEN_ONE, _OPEN_COUNTS, names, most, now)
    for name in names:
        if (found := open_mail.get(name, 0)) < most:  # `most` or more is not a count
            inbox_bounds.counted(conn, name, found)
    near = [n for n in names if open_mail.get(n, 0) >= caps[n]]
    if not near:
        return []
    counts = _open_counts(conn, _UNACKED_ONE, _UNACKED_COUNTS, near, most, now)
    return [n for n in near if counts.get(n, 0) >= caps[n]]


def _open_counts(
    conn: Connection,
    one: Prepared,
    many: Select[Any],
    names: Sequence[str],
    cap: int,
    now: float,
) -> dict[str, int]:
    if len(names) == 1:  # the common case, without an expanding IN's compile step
        params = {"name": names[0], "cap": cap, "now": now}
        return {names[0]: int(one.scalar(conn, params))}
    return {
        row[0]: min(cap, int(row[1]))
        for part in in_parts(names)
        for row in conn.execute(many, {"names": part, "now": now})
    }


_UNREAD_COUNT = select(func.count()).where(
    deliveries.c.recipient == _RECIPIENT,
    deliveries.c.state == DeliveryState.QUEUED.value,
    _NOT_DUE,
)
_UNREAD = Prepared(_UNREAD_COUNT)


def unread_count(conn: Connection, recipient: str, now: float) -> int:
    return int(_UNREAD.scalar(conn, {"for_recipient": recipient, "now": now}))


def _from_newest(unread_only: bool, after: bool) -> bool:
    """Whether a page of the inbox is its newest mail: the whole inbox is looked back on, as a
    thread is; unread mail, and what came after a cursor, is worked through from the oldest."""
    return not unread_only and not after


@cache
def _inbox_query(
    unread_only: bool, by_thread: bool, urgent_only: bool, after: bool, before: bool
) -> Prepared:
    shown = deliveries.c.state == DeliveryState.QUEUED.value if unread_only else _NOT_EXPIRED_STATE
    query = (
        select(messages, deliveries.c.state.label("delivery_state"))
        .join(deliveries, deliveries.c.message_seq == messages.c.seq)
        .where(
            deliveries.c.recipient == _RECIPIENT,
            shown,
            # Only unread mail expires: what was read stays, whatever its TTL said.
            or_(deliveries.c.state != DeliveryState.QUEUED.value, _NOT_DUE),
        )
        .order_by(
            deliveries.c.message_seq.desc()
            if _from_newest(unread_only, after)
            else deliveries.c.message_seq
        )
        .limit(bindparam("limit"))
    )
    if by_thread:
        query = query.where(messages.c.thread_id == bindparam("thread_id"))
    if urgent_only:
        query = query.where(deliveries.c.urgent.is_(True))
    if after:
        query = query.where(deliveries.c.message_seq > bindparam("after_seq"))
    if before:
        query = query.where(deliveries.c.message_seq < bindparam("before_seq"))
    return Prepared(query)


def inbox_rows(
    conn: Connection,
    recipient: str,
    *,
    now: float,
    unread_only: bool,
    limit: int,
    thread_id: str | None = None,
    urgent_only: bool = False,
    after_seq: int | None = None,
    before_seq: int | None = None,
) -> Sequence[Any]:
    """Oldest first: an inbox is worked through in the order mail arrived. Unread mail (or
    what came after `after_seq`) from the oldest on; the whole inbox, its newest `limit` (of
    what came before `before_seq`)."""
    query = _inbox_query(
        unread_only,
        thread_id is not None,
        urgent_only,
        after_seq is not None,
        before_seq is not None,
    )
    params: dict[str, Any] = {"for_recipient": recipient, "now": now, "limit": limit}
    if thread_id is not None:
        params["thread_id"] = thread_id
    if after_seq is not None:
        params["after_seq"] = after_seq
    if before_seq is not None:
        params["before_seq"] = before_seq
    rows = query.rows(conn, params)
    return rows[::-1] if _from_newest(unread_only, after_seq is not None) else rows


_HAS_UNREAD = select(
    select(deliveries.c.message_seq)
    .where(
        deliveries.c.recipient == _RECIPIENT,
        deliveries.c.state == DeliveryState.QUEUED.value,
        _NOT_DUE,
    )
    .exists()
)
_HAS_UNREAD_NOW = Prepared(_HAS_UNREAD)


def has_unread(conn: Connection, recipient: str, now: float, thread_id: str | None) -> bool:
    """Whether a `wait` has something to return: one indexed row, no count. Without a thread,
    an EXISTS on the inbox index alone (no message is read): every member of a broadcast's
    channel asks this at once."""
    if thread_id is None:
        return bool(_HAS_UNREAD_NOW.scalar(conn, {"for_recipient": recipient, "now": now}))
    return bool(
        inbox_rows(conn, recipient, now=now, unread_only=True, limit=1, thread_id=thread_id)
    )


def _mark_read(which: Any) -> Any:
    return (
        update(deliveries)
        .where(
            deliveries.c.recipient == _RECIPIENT,
            which,
            deliveries.c.state == DeliveryState.QUEUED.value,
        )
        .values(state=DeliveryState.READ.value, read_at=_NOW)
        .returning(deliveries.c.message_seq)
    )


_MARK_READ = _mark_read(deliveries.c.message_seq.in_(bindparam("seqs", expanding=True)))


@cache
def _mark_page_read(count: int) -> Prepared:
    """A page of `count` (a woken `wait` mostly reads one): no IN list to render on each call."""
    return Prepared(_mark_read(deliveries.c.message_seq.in_(numbered("seq", count))))


def mark_read(conn: Connection, recipient: str, seqs: Sequence[int], now: float) -> None:
    """Mark queued mail read, and tell each sender (message.read)."""
    if not seqs:
        return
    if len(seqs) <= NUMBERED_UP_TO:
        params = {"for_recipient": recipient, "now": now, **numbered_values("seq", seqs)}
        read = [seq for (seq,) in _mark_page_read(len(seqs)).rows(conn, params)]
    else:
        params = {"for_recipient": recipient, "seqs": list(seqs), "now": now}
        read = list(conn.execute(_MARK_READ, params).scalars())
    events.record_for_senders(conn, EventType.MESSAGE_READ, recipient, read, now)


def ack(conn: Connection, recipient: str, ids: Sequence[str], now: float) -> list[str]:
    """Acknowledge the caller's own deliveries, and tell each sender (message.acked); returns
    the ids that are (now) acked."""
    rows = conn.execute(
        select(messages.c.id, messages.c.seq, deliveries.c.state)
        .join(deliveries, deliveries.c.message_seq == messages.c.seq)
        .where(
            deliveries.c.recipient == recipient,
            messages.c.id.in_([i for i in ids if not never_stored(i)]),
        )
    ).all()
    ackable = {row.id: row for row in rows if row.state != DeliveryState.EXPIRED.value}
    to_update = [row.seq for row in ackable.values() if row.state in OPEN_STATES]
    if to_update:
        acked = conn.execute(
            update(deliveries)
            .where(
                deliveries.c.recipient == recipient,
                deliveries.c.message_seq.in_(to_update),
                _IS_OPEN,
            )
            .values(
                state=DeliveryState.ACKED.value,
                acked_at=now,
                read_at=func.coalesce(deliveries.c.read_at, now),
            )
            .returning(deliveries.c.message_seq)
        ).scalars()
        events.record_for_senders(conn, EventType.MESSAGE_ACKED, recipient, list(acked), now)
    return [i for i in ids if i in ackable]


_URGENT_UNREAD = (
    select(messages, deliveries.c.state.label("delivery_state"))
    .join(deliveries, deliveries.c.message_seq == messages.c.seq)
    .where(
        deliveries.c.recipient == _RECIPIENT,
        deliveries.c.urgent.is_(True),
        deliveries.c.state == DeliveryState.QUEUED.value,
        _NOT_DUE,
    )
    .order_by(deliveries.c.message_seq)
    .limit(20)
)
_URGENT_SINCE = _URGENT_UNREAD.where(deliveries.c.message_seq > bindparam("cursor"))
_SESSION_CURSOR = (
    select(sessions.c.urgent_cursor)
    .where(sessions.c.id == bindparam("session_id"))
    .scalar_subquery()
)
_URGENT_FOR_SESSION = _URGENT_UNREAD.where(
    deliveries.c.message_seq > func.coalesce(_SESSION_CURSOR, 0)
)


_URGENT_NEWS = _URGENT_FOR_SESSION.subquery("urgent")
_NOTICES = Prepared(
    select(_UNREAD_COUNT.scalar_subquery().label("unread_total"), _URGENT_NEWS)
    .select_from(ONE_ROW.outerjoin(_URGENT_NEWS, true()))
    .order_by(_URGENT_NEWS.c.seq)
)


def notices(
    conn: Connection, recipient: str, session_id: str, now: float
) -> tuple[int, list[Row[Any]]]:
    """What every answer carries, in one statement: the unread count, and the urgent unread
    mail past the session's cursor (what it has not been told of yet)."""
    params = {"for_recipient": recipient, "session_id": session_id, "now": now}
    rows = _NOTICES.rows(conn, params)
    return int(rows[0].unread_total), [row for row in rows if row.seq is not None]


def urgent_since(conn: Connection, recipient: str, cursor: int, now: float) -> list[Row[Any]]:
    params = {"for_recipient": recipient, "cursor": cursor, "now": now}
    return list(conn.execute(_URGENT_SINCE, params))


_NEWEST_DELIVERY = Prepared(
    select(func.max(deliveries.c.message_seq)).where(deliveries.c.recipient == _RECIPIENT)
)


def newest_delivery_seq(conn: Connection, recipient: str) -> int:
    return int(_NEWEST_DELIVERY.scalar(conn, {"for_recipient": recipient}) or 0)


def message_row(conn: Connection, message_id: str) -> Row[Any] | None:
    if never_stored(message_id):
        return None
    return conn.execute(select(messages).where(messages.c.id == message_id)).first()


def sent_rows(
    conn: Connection, sender: str, limit: int, before_seq: int | None = None
) -> list[Row[Any]]:
    query = (
        select(messages)
        .where(messages.c.sender == sender)
        .order_by(messages.c.seq.desc())
        .limit(limit)
    )
    if before_seq is not None:
        query = query.where(messages.c.seq < before_seq)
    return list(conn.execute(query))


def sent_seq(conn: Connection, sender: str, message_id: str) -> int | None:
    """The `seq` of a message `sender` sent (None: no such message of theirs)."""
    if never_stored(message_id):
        return None
    seq = conn.execute(
        select(messages.c.seq).where(messages.c.id == message_id, messages.c.sender == sender)
    ).scalar()
    return None if seq is None else int(seq)


def receipts(conn: Connection, seqs: Sequence[int], now: float) -> dict[int, list[Receipt]]:
    """Each message's recipients with their state; unread mail past its TTL reads `expired`."""
    out: dict[int, list[Receipt]] = {seq: [] for seq in seqs}
    rows = conn.execute(
        select(deliveries)
        .where(deliveries.c.message_seq.in_(list(seqs)))
        .order_by(deliveries.c.message_seq, by_code_point(deliveries.c.recipient))
    )
    for row in rows:
        state = DeliveryState(row.state)
        expired_at = row.expired_at
        if state is DeliveryState.QUEUED and row.expires_at is not None and row.expires_at <= now:
            state, expired_at = DeliveryState.EXPIRED, row.expires_at
        out[row.message_seq].append(
            Receipt(row.recipient, state, row.read_at, row.acked_at, expired_at)
        )
    return out


def messages_after(conn: Connection, after_seq: int, limit: int) -> list[Row[Any]]:
    """The whole log after a cursor, oldest first: what the owner's `tail` follows."""
    return list(
        conn.execute(
            select(messages).where(messages.c.seq > after_seq).order_by(messages.c.seq).limit(limit)
        )
    )


def newest_seq(conn: Connection) -> int:
    return int(conn.execute(select(func.max(messages.c.seq))).scalar() or 0)


def cursor_before_newest(conn: Connection, count: int) -> int:
    """A cursor that `messages_after` reads the newest `count` messages from (0 when there
    are no more): counted in messages, since retention leaves gaps in the `seq`s."""
    query = select(messages.c.seq).order_by(messages.c.seq.desc()).limit(1).offset(count)
    return int(conn.execute(query).scalar() or 0)


def _answers_a_kept_request() -> Any:
    """Whether a message (a condition on `messages`) is the response to a request someone
    still has open: it stays while the request does, or the request would read unanswered,
    and could be answered again."""
    request = messages.alias("request")
    request_open = exists().where(
        deliveries.c.message_seq == request.c.seq, deliveries.c.state.in_(OPEN_STATES)
    )
    answered = select(request.c.seq).where(request.c.id == messages.c.reply_to, request_open)
    return and_(messages.c.kind == Kind.RESPONSE.value, asked_row_by_row(answered))


def written_before(conn: Connection, before: float) -> Cutoff:
    """The messages created before `before`, for `purge_handled` (`store.retained`)."""
    return Cutoff.find(conn, messages.c.seq, messages.c.created_at, before)


def purge_handled(conn: Connection, cutoff: Cutoff, limit: int, now: float) -> int:
    """Retention: delete up to `limit` messages of `cutoff` that nobody still has
    to handle (every delivery acked or expired, or none at all); returns how many went.

    Unread and read-but-unacked mail stays, so must_read mail stays until it is acked. So does
    mail withheld by a block until its TTL (if any) has passed: its sender's receipt shows it
    unread till then, and it must stay for as long as unread mail would; and the answer to a
    request that stays. On SQLite the full-text index follows through its delete trigger.
    """
    walked_without_jit(conn)
    still_open = asked_row_by_row(
        select(deliveries.c.message_seq).where(
            deliveries.c.message_seq == messages.c.seq, deliveries.c.state.in_(OPEN_STATES)
        )
    )
    seqs = list(
        conn.execute(
            select(messages.c.seq)
            .where(
                cutoff.rows(messages.c.seq, messages.c.created_at),
                ~still_open,
                ~withheld.still_withheld(now),
                ~_answers_a_kept_request(),
            )
            .order_by(messages.c.seq)
            .limit(limit)
        ).scalars()
    )
    if seqs:
        conn.execute(delete(deliveries).where(deliveries.c.message_seq.in_(seqs)))
        conn.execute(delete(silent_expiries).where(silent_expiries.c.message_seq.in_(seqs)))
        withheld.forget(conn, seqs)
        conn.execute(delete(messages).where(messages.c.seq.in_(seqs)))
    return len(seqs)
