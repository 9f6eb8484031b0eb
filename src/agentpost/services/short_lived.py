"""Records that matter only for a while, forgotten by the retention sweep once they no longer
do: idempotency keys (a day), failed authentications, lockouts and rate windows (their
window), the audit rows of sends (as long as the mail is kept), reservations that ended (as
long as the mail is kept too)."""

from __future__ import annotations

from agentpost.config import Settings
from agentpost.domain.limits import IDEMPOTENCY_S
from agentpost.services import addressing
from agentpost.services.keys import REGISTER_RATE_KEY, REGISTER_WINDOW_S
from agentpost.store import audit, idempotency, lockouts, rates
from agentpost.store import reservations as reservation_rows
from agentpost.store.database import Connection


def forget_old_records(conn: Connection, settings: Settings, now: float) -> None:
    idempotency.purge(conn, now - IDEMPOTENCY_S)
    lockouts.purge(conn, now - settings.lockout_s)
    rates.forget_ended(conn, addressing.SEND_RATE_KEY, now - addressing.SEND_WINDOW_S)
    rates.forget_ended(conn, REGISTER_RATE_KEY, now - REGISTER_WINDOW_S)
    audit.purge(conn, "message.sent", now - settings.retention_days * 86_400)
    reservation_rows.forget_ended(conn, now - settings.retention_days * 86_400)
