"""What a batch of the retention sweep reads on PostgreSQL: the deliveries of the messages it
looks at, not the whole table.

The sweep runs batch after batch until one purges fewer than it asked for, so a batch that
read every delivery would cost a sweep over a large database (batches) x (deliveries). Each
batch is measured in the plan PostgreSQL picks for a prepared statement's first runs (a
custom plan, made for its values) and in the generic one it may keep from the sixth run on a
connection. The rows read are PostgreSQL's own count for the transaction (seq_tup_read and
idx_tup_fetch of `pg_stat_xact_user_tables`), with parallel workers off so that every read is
counted in this connection's backend.

Both plans read the whole table once: the check that a response answers no request still open
ran as a subquery hashed from every open delivery, and the custom plan found open deliveries
by a merge join, walking `ix_deliveries_message` past every acked delivery of the old mail.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import Connection, text

from agentpost.domain.models import Kind
from agentpost.store import mail
from agentpost.store.database import Store
from backends import FakeClock
from store.test_mail import insert

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

OLD = 2000
"""Messages past retention, each acked by all its recipients."""
YOUNG = 100
"""Messages within retention, unread: the open deliveries are all past the old ones."""
RECIPIENTS = ("bob", "carol", "dave")
BATCH = 20
RETAINED_S = 1_000.0

_READ = text(
    "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)"
    " FROM pg_stat_xact_user_tables WHERE relname = 'deliveries'"
)


def _write(conn: Connection, at: float, kind: Kind, reply_to: str | None = None) -> str:
    body = f"{kind.value} at {at:g}"
    mid, _ = insert(conn, at, "alice", list(RECIPIENTS), body, kind=kind.value, reply_to=reply_to)
    return mid


def _old_and_young_mail(conn: Connection, now: float) -> None:
    """Old mail every recipient acked, a request and its answer among every ten; then young
    unread mail. Analysed, as autovacuum keeps a real database."""
    old: list[str] = []
    for i in range(OLD):
        at = now - 2 * RETAINED_S + i / OLD
        if i % 10 == 1:
            old.append(_write(conn, at, Kind.RESPONSE, reply_to=old[-1]))
        else:
            old.append(_write(conn, at, Kind.REQUEST if i % 10 == 0 else Kind.MESSAGE))
    for name in RECIPIENTS:
        mail.ack(conn, name, old, now - RETAINED_S)
    for i in range(YOUNG):
        _write(conn, now - RETAINED_S / 2 + i / YOUNG, Kind.MESSAGE)
    conn.exec_driver_sql("ANALYZE messages, deliveries")


def _batch_reads(plan_cache_mode: str, now: float) -> Callable[[Connection], tuple[int, int]]:
    def tx(conn: Connection) -> tuple[int, int]:
        conn.exec_driver_sql(f"SET LOCAL plan_cache_mode = {plan_cache_mode}")
        conn.exec_driver_sql("SET LOCAL max_parallel_workers_per_gather = 0")
        before = conn.execute(_READ).scalar_one()
        purged = mail.purge_handled(conn, mail.written_before(conn, now - RETAINED_S), BATCH, now)
        return purged, conn.execute(_READ).scalar_one() - before

    return tx


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_a_sweep_batch_reads_the_deliveries_of_the_messages_it_looks_at(
    store: Store, clock: FakeClock
) -> None:
    await store.write(lambda conn: _old_and_young_mail(conn, clock.now))
    # The second batch of each plan finds the rows of the batches before it gone.
    for plan_cache_mode in ["force_custom_plan", "force_generic_plan"] * 2:
        purged, read = await store.write(_batch_reads(plan_cache_mode, clock.now))
        assert purged == BATCH
        # Each message looked at is probed (its deliveries), then its deliveries are deleted,
        # and an answer's request is probed: about twice the batch's own deliveries.
        assert read <= 4 * BATCH * len(RECIPIENTS), f"{plan_cache_mode}: read {read} deliveries"
