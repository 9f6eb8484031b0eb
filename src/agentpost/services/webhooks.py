"""Signed webhooks: an agent's events POSTed to a URL of its choosing, retried until they land.

The dispatcher (`run_dispatcher`, one per `serve`; replicas may each run one) turns new events
into deliveries in the store, then POSTs the due ones. Each request is signed
(`X-Agentpost-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`) and names its
delivery (`X-Agentpost-Delivery`, the same id on every attempt, so a receiver can drop repeats)
and event type (`X-Agentpost-Event`). A 2xx answer delivers; anything else (a redirect too: none
is followed) is retried after 1 s, 2 s, 4 s … until `webhook_max_attempts`, then the delivery
fails. Every retry lives in the store, so a restart loses none.

Where a webhook may point, and the POST itself, are `outbound`'s.
"""

from __future__ import annotations

import builtins
import logging
import secrets
import time
from collections import Counter
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio

from agentpost.config import Settings
from agentpost.domain import limits as rules
from agentpost.domain.errors import AgentpostError, ErrorCode, not_found
from agentpost.domain.events import (
    MAX_WEBHOOKS,
    Webhook,
    WebhookDelivery,
    check_event_types,
)
from agentpost.domain.ids import webhook_id as new_webhook_id
from agentpost.domain.models import Caller, Trust
from agentpost.retries import RetryLog
from agentpost.services import accounts, addressing
from agentpost.services.outbound import Poster, check_url, origin_of
from agentpost.store import agents as agent_rows
from agentpost.store import audit
from agentpost.store import keys as key_rows
from agentpost.store import webhooks as webhook_rows
from agentpost.store.database import Connection, Row, Store
from agentpost.store.wakeups import Watch

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

log = logging.getLogger(__name__)
_retries = RetryLog(log)

SECRET_PREFIX = "whsec_"
CLAIM_BATCH = 16
"""Deliveries claimed at once by one dispatcher."""
MAX_IN_FLIGHT = 256
"""Deliveries one dispatcher has on their way at once: each POST runs beside the others and
beside the claiming, so a receiver that takes its time holds up only its own deliveries."""
MAX_IN_FLIGHT_PER_AGENT = 8
"""Of those, one agent's (all its webhooks'): receivers that never answer take no more."""
ENQUEUE_PAGE = 500
LEASE_EXTRA_S = 30.0
"""A claimed delivery is not due again for the timeout plus this (a dispatcher died mid-way)."""
HOOKED_FRESH_S = 1.0
"""How long, waiting, the dispatcher trusts its list of agents with webhooks (about a round
plus this since it was read): a webhook made by another replica is heard of within it."""
MAX_SLEEP_S = 60.0
UNAVAILABLE_RETRY_S = 5.0
RELEASE_S = 5.0
"""How long a stopping dispatcher may take to hand back the deliveries it had in flight."""

# -- the service ------------------------------------------------------------------------------


class Webhooks:
    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self._changes = 0
        """Webhooks created or deleted by this process so far."""
        self._hooked: frozenset[str] | None = None
        """The agents with a live webhook (None: read it afresh before the next round). Only
        their news makes the dispatcher look; another process's webhooks are learnt from its
        commits, whose reach is unknown, and at least every `HOOKED_FRESH_S` under traffic."""
        self._news: Watch | None = None
        """The dispatcher's watch, woken when this process creates or deletes a webhook."""
        self._in_flight: Counter[str] = Counter()
        """Claimed deliveries whose outcome is not recorded yet, by agent."""
        self._recorded = False
        """An outcome was recorded since the dispatcher last looked (a retry may be due)."""
        self._abandoned: builtins.list[str] = []
        """Deliveries in flight when the dispatcher was stopped, their outcome unseen."""

    async def create(
        self, caller: Caller, url: str, events: builtins.list[str]
    ) -> tuple[Webhook, str]:
        """A new webhook for the caller's events of these types; returns it and its signing
        secret (`whsec_…`), which is shown this once. Revoking the caller's key deletes it.
        An agent the owner has not vouched for may point it at public addresses only."""
        url = check_url(url, public_only=caller.trust is not Trust.VERIFIED)
        types = check_event_types(events)
        secret = SECRET_PREFIX + secrets.token_urlsafe(32)

        def tx(conn: Connection) -> Webhook:
            now = self.store.clock()
            _check_agent(conn, caller)
            if accounts.as_stored_now(conn, caller).trust is not Trust.VERIFIED:
                check_url(url, public_only=True)  # unvouched since the request was let in
            rules.check_cap(
                webhook_rows.live_count(conn, caller.agent),
                MAX_WEBHOOKS,
                f"an agent has at most {MAX_WEBHOOKS} webhooks; delete one first",
            )
            addressing.count_act(conn, self.store, self.settings, caller, "a new webhook")
            webhook_rows.forget_deleted_of(conn, caller.agent)
            hook_id = new_webhook_id(now)
            webhook_rows.insert_webhook(
                conn,
                id=hook_id,
                agent=caller.agent,
                url=url,
                events=types,
                secret=secret,
                now=now,
                key_id=caller.key_id,
            )
            audit.record(
                conn,
                at=now,
                actor=caller.agent,
                action="webhook.created",
                target=caller.agent,
                ip=caller.ip,
                detail={"webhook": hook_id, "url": origin_of(url), "events": types},
            )
            return Webhook(hook_id, url, types, now)

        made = await self.store.write(tx)
        self._webhooks_changed()
        return made, secret

    async def list(self, caller: Caller) -> builtins.list[Webhook]:
        """The caller's webhooks, oldest first (secrets are never shown again)."""
        return await self.store.read(lambda conn: webhook_rows.live_webhooks(conn, caller.agent))

    async def delete(self, caller: Caller, webhook_id: str) -> None:
        """Delete one of the caller's webhooks; what it had not delivered yet fails."""

        def tx(conn: Connection) -> None:
            if webhook_rows.live_webhook(conn, caller.agent, webhook_id) is None:
                raise _no_webhook(webhook_id)
            addressing.count_act(conn, self.store, self.settings, caller, "a webhook's deletion")
            now = self.store.clock()
            webhook_rows.delete_webhook(conn, webhook_id, now)
            audit.record(
                conn,
                at=now,
                actor=caller.agent,
                action="webhook.deleted",
                target=caller.agent,
                ip=caller.ip,
                detail={"webhook": webhook_id},
            )

        await self.store.write(tx)
        self._webhooks_changed()

    async def deliveries(
        self, caller: Caller, webhook_id: str, limit: int = 50
    ) -> builtins.list[WebhookDelivery]:
        """One of the caller's webhooks' deliveries, newest first, with their attempts."""
        rules.check_limit(limit)

        def tx(conn: Connection) -> builtins.list[WebhookDelivery]:
            if webhook_rows.live_webhook(conn, caller.agent, webhook_id) is None:
                raise _no_webhook(webhook_id)
            return webhook_rows.deliveries_of(conn, webhook_id, limit)

        return await self.store.read(tx)

    # -- the dispatcher ---------------------------------------------------------------------

    async def run_dispatcher(self) -> None:
        """Forever: enqueue new events for each webhook, POST what is due, sleep until a
        commit writes events (or another process commits) or the next retry is due."""
        try:
            async with (
                Poster(self.settings.webhook_timeout_s, self.store.clock) as poster,
                anyio.create_task_group() as posting,
            ):
                with self.store.watch(None) as news:
                    self._news = news
                    try:
                        while True:
                            try:
                                sleep = await self._round(poster, posting)
                            except AgentpostError as err:
                                if err.code is not ErrorCode.UNAVAILABLE:
                                    raise
                                _retries.failed("webhook dispatcher", err)
                                sleep = UNAVAILABLE_RETRY_S
                            else:
                                _retries.recovered("webhook dispatcher")
                            await self._until_work(news, sleep)
                    finally:
                        self._news = None
        finally:
            await self._release_abandoned()

    async def _release_abandoned(self) -> None:
        """Hand back what was in flight when the dispatcher stopped: due at once for the next
        dispatcher (another replica, or this service started again), not after its lease. The
        receiver may have had it already; deliveries carry their id for that. A database that
        does not answer in time leaves them to their lease, as a crash would."""
        abandoned, self._abandoned = self._abandoned, []
        if not abandoned:
            return
        with anyio.CancelScope(shield=True) as scope:
            scope.deadline = anyio.current_time() + RELEASE_S
            try:
                await self.store.write(
                    lambda conn: webhook_rows.release(conn, abandoned, self.store.clock())
                )
            except AgentpostError as err:
                log.warning("webhook dispatcher: %s; in flight at the stop: %s", err, abandoned)

    def _webhooks_changed(self) -> None:
        """After a webhook was created or deleted here: who has webhooks is read again, and the
        dispatcher looks at once. The commit that made the webhook may already have woken it
        for the agent's news, before the agent counted as hooked."""
        self._changes += 1
        self._hooked = None
        if self._news is not None:
            self._news.wake()

    async def _until_work(self, news: Watch, sleep: float | None) -> None:
        """Wait until a commit concerns an agent with a webhook, or `sleep` seconds passed (a
        retry falls due). Mail between agents without webhooks, most of it, costs no look.
        When a commit's reach is unknown (another process's on SQLite), webhooks changed here,
        or `HOOKED_FRESH_S` passed, go and look, and read afresh who has webhooks: a webhook
        made by another replica concerns nobody's news, so nothing else tells of it."""
        start = time.monotonic()
        until = start + HOOKED_FRESH_S if sleep is None else start + min(sleep, HOOKED_FRESH_S)
        while True:
            woken = await news.wait(max(0.0, until - time.monotonic()))
            if self._recorded:  # a delivery ended here: its retry may be due before `sleep`
                self._recorded = False
                return
            reach = news.reach() if woken else None
            hooked = self._hooked
            if reach is None or hooked is None:
                self._hooked = None  # read afresh who has webhooks
                return
            if not hooked.isdisjoint(reach):
                return

    async def _round(self, poster: Poster, posting: TaskGroup) -> float | None:
        """Enqueue, then claim until nothing is due, each claimed delivery POSTed in `posting`
        (not awaited); returns how long to sleep (None: until the store changes)."""
        if self._hooked is None:
            changes = self._changes
            hooked = await self.store.glance(webhook_rows.hooked_agents)
            if changes == self._changes:  # else a webhook changed meanwhile: read it again
                self._hooked = hooked
        # Until no webhook is behind: its own commits write no events, so they wake nobody.
        while await self.store.glance(webhook_rows.any_behind):
            await self.store.write(
                lambda conn: webhook_rows.enqueue(conn, self.store.clock(), ENQUEUE_PAGE)
            )
        lease = self.settings.webhook_timeout_s + LEASE_EXTRA_S
        while True:
            room = min(CLAIM_BATCH, MAX_IN_FLIGHT - self._in_flight.total())
            if room <= 0:
                return None  # the next delivery to end wakes the dispatcher
            busy = dict(self._in_flight)
            due = await self.store.glance(
                partial(webhook_rows.next_due, busy=busy, per_agent=MAX_IN_FLIGHT_PER_AGENT)
            )
            if due is None:
                return None
            wait = due - self.store.clock()
            if wait > 0:
                return min(wait, MAX_SLEEP_S)

            def claim(
                conn: Connection, limit: int = room, busy: dict[str, int] = busy
            ) -> builtins.list[Row[Any]]:
                now = self.store.clock()
                return webhook_rows.claim_due(
                    conn, now, lease, limit, busy, MAX_IN_FLIGHT_PER_AGENT
                )

            claimed = await self.store.write(claim)
            # None claimed: another dispatcher took them.
            for row in claimed:
                self._in_flight[row.agent] += 1
                posting.start_soon(self._deliver, poster, row)

    async def _deliver(self, poster: Poster, row: Row[Any]) -> None:
        """POST one claimed delivery and record the outcome; then wake the dispatcher, for its
        retry may be due sooner than anything it knew of, and there is room for another."""
        try:
            try:
                ok, status, error = await poster.post(row)
            except Exception as exc:  # one receiver's oddity must not stop serve
                log.exception("webhook dispatcher: posting %s failed unforeseen", row.id)
                ok, status, error = False, None, f"internal error: {type(exc).__name__}"
            await self.store.write(
                lambda conn: webhook_rows.record_attempt(
                    conn,
                    row.id,
                    row.attempts,  # counted as it was claimed
                    self.store.clock(),
                    ok=ok,
                    status=status,
                    error=error,
                    max_attempts=self.settings.webhook_max_attempts,
                )
            )
        except AgentpostError as err:
            if err.code is not ErrorCode.UNAVAILABLE:
                raise
            # Unrecorded: the delivery is due again when its lease runs out.
            log.warning("webhook dispatcher: %s; %s is tried again later", err, row.id)
        except anyio.get_cancelled_exc_class():
            self._abandoned.append(row.id)
            raise
        finally:
            self._in_flight[row.agent] -= 1
            if not self._in_flight[row.agent]:
                del self._in_flight[row.agent]
            self._recorded = True
            if self._news is not None:
                self._news.wake()


def _check_agent(conn: Connection, caller: Caller) -> None:
    """In the transaction that makes the webhook: a key revoked since its request was
    authenticated must not leave behind a webhook its revocation did not find."""
    known = agent_rows.existing_names(conn, [caller.agent])
    if caller.agent not in known:
        raise AgentpostError(ErrorCode.UNAUTHENTICATED, f"no agent {caller.agent!r}")
    if not known[caller.agent]:
        raise AgentpostError(ErrorCode.GONE, f"agent {caller.agent!r} is disabled")
    if caller.key_id is not None and key_rows.turned_off(conn, caller.key_id):
        raise AgentpostError(ErrorCode.UNAUTHENTICATED, "the key of this request was revoked")


def _no_webhook(webhook_id: str) -> AgentpostError:
    return not_found(
        f"you have no webhook {rules.quoted(webhook_id)!r}", webhook_id=rules.quoted(webhook_id)
    )
