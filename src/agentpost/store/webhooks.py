"""Webhooks and their deliveries: what each agent asked to be told, and how far each got.

Each webhook keeps a cursor into the event log; the dispatcher turns the events past it into
deliveries (one row per event and webhook, its id the same on every attempt) and moves the
cursor in the same transaction, so no event is enqueued twice, whichever replica does it.
Retries live in the rows (`next_attempt_at`), so they survive restarts.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import (
    Connection,
    Row,
    and_,
    delete,
    exists,
    func,
    insert,
    select,
    true,
    update,
)

from agentpost.domain.events import HookState, Webhook, WebhookDelivery, retry_delay_s
from agentpost.domain.ids import delivery_id
from agentpost.domain.limits import never_stored
from agentpost.store import events as event_rows
from agentpost.store.schema import agents, events, webhook_deliveries, webhooks

_LIVE = webhooks.c.deleted_at.is_(None)
_PENDING = webhook_deliveries.c.state == HookState.PENDING.value
_STATES = {state.value: state for state in HookState}


def insert_webhook(
    conn: Connection,
    *,
    id: str,
    agent: str,
    url: str,
    events: Sequence[str],
    secret: str,
    now: float,
    key_id: str | None,
) -> None:
    """A webhook hears only what happens from now on: its cursor starts at the newest event.
    It lives as long as `key_id`, the key that made it, stands (see `delete_made_with`)."""
    conn.execute(
        insert(webhooks).values(
            id=id,
            agent=agent,
            key_id=key_id,
            url=url,
            events=json.dumps(list(events)),
            secret=secret,
            created_at=now,
            cursor=event_rows.newest(conn),
        )
    )


def live_count(conn: Connection, agent: str) -> int:
    query = select(func.count()).where(webhooks.c.agent == agent, _LIVE)
    return int(conn.execute(query).scalar_one())


def hooked_agents(conn: Connection) -> frozenset[str]:
    """The agents with a live webhook: the only ones whose news the dispatcher acts on."""
    return frozenset(conn.execute(select(webhooks.c.agent).where(_LIVE).distinct()).scalars())


def webhook_from_row(row: Row[Any]) -> Webhook:
    return Webhook(id=row.id, url=row.url, events=json.loads(row.events), created_at=row.created_at)


def live_webhooks(conn: Connection, agent: str) -> list[Webhook]:
    """An agent's webhooks, oldest first (their ids sort by creation time)."""
    query = select(webhooks).where(webhooks.c.agent == agent, _LIVE).order_by(webhooks.c.id)
    return [webhook_from_row(row) for row in conn.execute(query)]


def live_webhook(conn: Connection, agent: str, webhook_id: str) -> Row[Any] | None:
    if never_stored(webhook_id):
        return None
    query = select(webhooks).where(webhooks.c.id == webhook_id, webhooks.c.agent == agent, _LIVE)
    return conn.execute(query).first()


def delete_webhook(conn: Connection, webhook_id: str, now: float) -> None:
    """Stop a webhook: its pending deliveries fail; the rows stay for the log until retention."""
    _delete(conn, [webhook_id], now)


def delete_made_with(conn: Connection, key_id: str, now: float) -> int:
    """Stop the live webhooks made with a key being revoked: a leaked key's webhook would go
    on sending the agent's mail to its URL. Returns how many."""
    made = list(
        conn.execute(select(webhooks.c.id).where(webhooks.c.key_id == key_id, _LIVE)).scalars()
    )
    _delete(conn, made, now)
    return len(made)


def _delete(conn: Connection, webhook_ids: Sequence[str], now: float) -> None:
    if not webhook_ids:
        return
    conn.execute(update(webhooks).where(webhooks.c.id.in_(webhook_ids)).values(deleted_at=now))
    conn.execute(
        update(webhook_deliveries)
        .where(webhook_deliveries.c.webhook_id.in_(webhook_ids), _PENDING)
        .values(state=HookState.FAILED.value, next_attempt_at=None, last_error="webhook deleted")
    )


def forget_deleted_of(conn: Connection, agent: str) -> None:
    """Delete `agent`'s deleted webhooks that delivered nothing (nothing reads them again);
    one with deliveries stays, for its log, until the retention sweep."""
    has_deliveries = exists().where(webhook_deliveries.c.webhook_id == webhooks.c.id)
    conn.execute(delete(webhooks).where(webhooks.c.agent == agent, ~_LIVE, ~has_deliveries))


def delivery_from_row(row: Row[Any]) -> WebhookDelivery:
    return WebhookDelivery(
        id=row.id,
        webhook_id=row.webhook_id,
        event=row.event,
        event_seq=row.event_seq,
        state=_STATES[row.state],
        attempts=row.attempts,
        last_status=row.last_status,
        last_error=row.last_error,
        created_at=row.created_at,
        delivered_at=row.delivered_at,
        next_attempt_at=row.next_attempt_at,
    )


def deliveries_of(conn: Connection, webhook_id: str, limit: int) -> list[WebhookDelivery]:
    """A webhook's deliveries, newest first."""
    rows = conn.execute(
        select(webhook_deliveries)
        .where(webhook_deliveries.c.webhook_id == webhook_id)
        .order_by(webhook_deliveries.c.created_at.desc(), webhook_deliveries.c.event_seq.desc())
        .limit(limit)
    )
    return [delivery_from_row(row) for row in rows]


# -- enqueueing -----------------------------------------------------------------------------

_NEWS = exists().where(events.c.agent == webhooks.c.agent, events.c.seq > webhooks.c.cursor)
_BEHIND = select(webhooks.c.id).where(_LIVE, _NEWS).limit(1)


def any_behind(conn: Connection) -> bool:
    """Whether some live webhook's agent has events past its cursor (one indexed look each)."""
    return conn.execute(_BEHIND).first() is not None


def enqueue(conn: Connection, now: float, page: int) -> int:
    """Turn events past each live webhook's cursor into pending deliveries of the types it
    wants, and move its cursor past them; returns how many deliveries were made."""
    made: list[dict[str, Any]] = []
    for hook in conn.execute(select(webhooks).where(_LIVE, _NEWS)).all():
        found = event_rows.events_after(conn, hook.agent, hook.cursor, page)
        if not found:
            continue
        wanted = set(json.loads(hook.events))
        for event in found:
            if event.type not in wanted:
                continue
            made_id = delivery_id(now)
            payload = {"delivery_id": made_id, "webhook_id": hook.id, "agent": hook.agent}
            payload |= event.to_dict()
            made.append(
                {
                    "id": made_id,
                    "webhook_id": hook.id,
                    "event_seq": event.seq,
                    "event": event.type,
                    "payload": json.dumps(payload),
                    "state": HookState.PENDING.value,
                    "attempts": 0,
                    "next_attempt_at": now,
                    "created_at": now,
                }
            )
        conn.execute(update(webhooks).where(webhooks.c.id == hook.id).values(cursor=found[-1].seq))
    if made:
        conn.execute(insert(webhook_deliveries), made)
    return len(made)


# -- attempts -------------------------------------------------------------------------------

_NEXT_DUE = select(func.min(webhook_deliveries.c.next_attempt_at)).where(_PENDING)


def _not_full(busy: Mapping[str, int], per_agent: int) -> Any:
    """Deliveries of agents whose deliveries in flight (`busy`) are fewer than `per_agent`."""
    full = [agent for agent, count in busy.items() if count >= per_agent]
    if not full:
        return true()
    theirs = select(webhooks.c.id).where(webhooks.c.agent.in_(full))
    return webhook_deliveries.c.webhook_id.not_in(theirs)


def next_due(
    conn: Connection, busy: Mapping[str, int] | None = None, per_agent: int = 1 << 30
) -> float | None:
    """When the earliest pending delivery of an agent with room (see `claim_due`) is due
    (None: nothing is pending)."""
    value = conn.execute(_NEXT_DUE.where(_not_full(busy or {}, per_agent))).scalar()
    return None if value is None else float(value)


def claim_due(
    conn: Connection,
    now: float,
    lease_s: float,
    limit: int,
    busy: Mapping[str, int] | None = None,
    per_agent: int = 1 << 30,
) -> list[Row[Any]]:
    """Take up to `limit` due deliveries for an attempt, so many of each agent's that its
    deliveries in flight (`busy`, by agent) stay within `per_agent`: none is due again for
    `lease_s`, so another dispatcher leaves it alone while it is in flight (and retries it,
    should this one die before it records the outcome). The attempt counts from now: a
    dispatcher killed mid-POST records nothing, but its receiver may have had the POST.

    A due delivery of a disabled agent fails instead, unsent: a disabled agent is told
    nothing more, by a webhook no more than by its event stream.

    Rows: id, agent, event, payload, attempts (this one included), url, secret, and the agent's
    trust now (where the POST may go depends on it: `outbound`)."""
    busy = busy or {}
    found = conn.execute(
        select(webhook_deliveries.c.id, webhooks.c.agent, agents.c.disabled_at)
        .join(webhooks, webhooks.c.id == webhook_deliveries.c.webhook_id)
        .join(agents, agents.c.name == webhooks.c.agent)
        .where(_PENDING, webhook_deliveries.c.next_attempt_at <= now, _not_full(busy, per_agent))
        .order_by(webhook_deliveries.c.next_attempt_at, webhook_deliveries.c.event_seq)
        .limit(limit)
    ).all()
    disabled = [row.id for row in found if row.disabled_at is not None]
    if disabled:
        conn.execute(
            update(webhook_deliveries)
            .where(webhook_deliveries.c.id.in_(disabled))
            .values(state=HookState.FAILED.value, next_attempt_at=None, last_error="agent disabled")
        )
    taken: Counter[str] = Counter()
    due = []
    for row in found:
        if row.disabled_at is None and busy.get(row.agent, 0) + taken[row.agent] < per_agent:
            taken[row.agent] += 1
            due.append(row.id)
    if not due:
        return []
    conn.execute(
        update(webhook_deliveries)
        .where(webhook_deliveries.c.id.in_(due))
        .values(next_attempt_at=now + lease_s, attempts=webhook_deliveries.c.attempts + 1)
    )
    return list(
        conn.execute(
            select(
                webhook_deliveries.c.id,
                webhooks.c.agent,
                webhook_deliveries.c.event,
                webhook_deliveries.c.payload,
                webhook_deliveries.c.attempts,
                webhooks.c.url,
                webhooks.c.secret,
                agents.c.trust,
            )
            .join(webhooks, webhooks.c.id == webhook_deliveries.c.webhook_id)
            .join(agents, agents.c.name == webhooks.c.agent)
            .where(webhook_deliveries.c.id.in_(due))
            .order_by(webhook_deliveries.c.next_attempt_at, webhook_deliveries.c.event_seq)
        )
    )


def release(conn: Connection, deliveries: Sequence[str], now: float) -> None:
    """Make claimed deliveries due now, their attempt not counted: the dispatcher that took
    them stopped before it saw an answer, and need not leave them for their lease to run out."""
    conn.execute(
        update(webhook_deliveries)
        .where(webhook_deliveries.c.id.in_(deliveries), _PENDING, webhook_deliveries.c.attempts > 0)
        .values(next_attempt_at=now, attempts=webhook_deliveries.c.attempts - 1)
    )


def record_attempt(
    conn: Connection,
    delivery: str,
    attempt: int,
    now: float,
    *,
    ok: bool,
    status: int | None,
    error: str | None,
    max_attempts: int,
) -> None:
    """The outcome of attempt number `attempt`: delivered; or tried again later (1 s, 2 s,
    4 s …); or, after `max_attempts`, failed. A delivery no longer pending (its webhook was
    deleted meanwhile) stays as it is."""
    values: dict[str, Any] = {"attempts": attempt, "last_status": status, "last_error": error}
    if ok:
        values |= {"state": HookState.DELIVERED.value, "delivered_at": now}
        values["next_attempt_at"] = None
    elif attempt >= max_attempts:
        values |= {"state": HookState.FAILED.value, "next_attempt_at": None}
    else:
        values["next_attempt_at"] = now + retry_delay_s(attempt)
    conn.execute(
        update(webhook_deliveries)
        .where(webhook_deliveries.c.id == delivery, _PENDING)
        .values(values)
    )


# -- retention ------------------------------------------------------------------------------


def purge_before(conn: Connection, before: float, limit: int) -> int:
    """Delete up to `limit` finished deliveries created before `before`, then deleted webhooks
    with none left; returns how many deliveries went."""
    ids = list(
        conn.execute(
            select(webhook_deliveries.c.id)
            .where(webhook_deliveries.c.created_at < before, ~_PENDING)
            .order_by(webhook_deliveries.c.created_at)
            .limit(limit)
        ).scalars()
    )
    if ids:
        conn.execute(delete(webhook_deliveries).where(webhook_deliveries.c.id.in_(ids)))
    has_deliveries = exists().where(webhook_deliveries.c.webhook_id == webhooks.c.id)
    conn.execute(delete(webhooks).where(and_(webhooks.c.deleted_at < before, ~has_deliveries)))
    return len(ids)
