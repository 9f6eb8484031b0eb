"""Retention: what the hourly sweep forgets besides mail, each in batches of short
transactions, so a big sweep never holds the writer for long."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from agentpost.config import Settings
from agentpost.services import short_lived
from agentpost.services.events import purge_old_events
from agentpost.store import agents as agent_rows
from agentpost.store import audit, leases
from agentpost.store import tasks as task_rows
from agentpost.store.database import Connection, Store

DAY_S = 86_400


async def forget_all_but_mail(store: Store, settings: Settings, batch: int) -> None:
    """Everything kept for a while but mail, each past its retention: events and webhook
    deliveries, ended sessions, finished tasks, leader seats nobody held, the short-lived
    records, and the audit log."""
    keep_s = settings.retention_days * DAY_S
    await purge_old_events(store, keep_s, batch)  # and webhook deliveries
    # Every agent start leaves a session: ended long ago, they go.
    await _in_batches(
        store,
        lambda before: partial(agent_rows.forget_old_sessions, before=before, limit=batch),
        keep_s,
        batch,
    )
    await _in_batches(
        store,
        lambda before: partial(task_rows.purge_finished, before=before, limit=batch),
        keep_s,
        batch,
    )
    await _in_batches(
        store,
        lambda before: partial(
            leases.forget_lapsed,
            dialect=store.dialect,
            before=before,
            now=store.clock(),
            ttl_s=settings.offline_after_s,
            limit=batch,
        ),
        keep_s,
        batch,
    )
    await store.write(
        lambda c: short_lived.forget_old_records(c, settings, store.clock()), lengthy=True
    )
    before = store.clock() - settings.audit_retention_days * DAY_S
    cutoff = await store.read(lambda conn: audit.written_before(conn, before))
    purge = partial(audit.purge_before, cutoff=cutoff, limit=batch)
    while await store.write(purge, lengthy=True) == batch:
        pass


async def _in_batches(
    store: Store,
    purge: Callable[[float], Callable[[Connection], int]],
    keep_s: float,
    batch: int,
) -> None:
    """`purge(before)` again, each time its own transaction, until it leaves less than a
    batch (none left)."""
    while await store.write(purge(store.clock() - keep_s), lengthy=True) == batch:
        pass
