"""Messaging: send, read, acknowledge, wait, threads, receipts, search.

Each operation's writes are one transaction (`wait`, `notices` and `sweep` run several
small ones). The sender is always the caller; nothing in the arguments can name another
sender. A refusal is raised before anything is written, or rolls its transaction back.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from functools import partial
from typing import Any

import anyio

from agentpost.config import Settings
from agentpost.domain import limits as rules
from agentpost.domain.accounts import AgentLimits
from agentpost.domain.errors import AgentpostError, ErrorCode, forbidden, invalid, not_found
from agentpost.domain.ids import message_id as new_message_id
from agentpost.domain.models import (
    AckResult,
    Caller,
    Inbox,
    Kind,
    Message,
    Notices,
    Priority,
    SendResult,
    SentMessage,
)
from agentpost.domain.names import POST_OFFICE, SYSTEM, check_channel, check_name
from agentpost.services import accounts, outbox
from agentpost.services.channels import member_channels, members
from agentpost.services.events import purge_old_events
from agentpost.services.presence import Heartbeat
from agentpost.store import agents as agent_rows
from agentpost.store import audit, blocks, clearing, idempotency, lockouts, mail, rates
from agentpost.store.database import Connection, Store

MAX_THREAD_ID = 64


def _priority(value: str) -> Priority:
    try:
        return Priority(value)
    except ValueError:
        raise invalid("priority must be 'normal' or 'urgent'", priority=value) from None


def _targets(to: str | Sequence[str]) -> tuple[list[str], str | None]:
    """(names, None) for direct mail, ([], channel) for a broadcast."""
    if isinstance(to, str):
        if to.startswith("#"):
            return [], check_channel(to)
        return [check_name(to, "recipient")], None
    if not isinstance(to, Sequence) or not to:
        raise invalid("to must be a name, a list of names or '#channel'")
    names = []
    for name in to:
        if not isinstance(name, str):
            raise invalid("to must be a name, a list of names or '#channel'")
        if name.startswith("#"):
            raise invalid("a channel is sent to alone: to='#channel'")
        names.append(check_name(name, "recipient"))
    names = list(dict.fromkeys(names))
    if len(names) > rules.MAX_RECIPIENTS:
        raise invalid(f"at most {rules.MAX_RECIPIENTS} recipients per message")
    return names, None


def _thread_id(value: str | None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_THREAD_ID:
        raise invalid(f"thread_id must be a non-empty string of at most {MAX_THREAD_ID} chars")
    return rules.check_text(value, "thread_id")


class Mailbox:
    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.limits = settings.limits

    # -- send --------------------------------------------------------------------------------

    async def send(
        self,
        caller: Caller,
        to: str | Sequence[str],
        body: str,
        *,
        subject: str | None = None,
        data: Any = None,
        thread_id: str | None = None,
        reply_to: str | None = None,
        priority: str = "normal",
        ttl_s: float | None = None,
        must_read: bool = False,
        kind: Kind = Kind.MESSAGE,
        idempotency_key: str | None = None,
    ) -> SendResult:
        """Store a message and deliver it. A retry under the same `idempotency_key` answers
        as the first send did and stores nothing; recipients who blocked the caller get
        nothing, and the caller is not told (see `outbox`)."""
        if not isinstance(body, str) or not body.strip():
            raise invalid("body must be non-empty text")
        rules.check_body(body, self.limits)
        subject = rules.check_subject(subject or "", self.limits)
        data_json = rules.encode_data(data, self.limits)
        level = _priority(priority)
        asked_ttl = rules.check_ttl(ttl_s)
        ttl = self.settings.default_ttl_s if asked_ttl is None else asked_ttl
        names, channel = _targets(to)
        thread = _thread_id(thread_id)
        retry_key = outbox.check_idempotency_key(idempotency_key)
        roster = self.settings.agents
        request = {
            "to": names,
            "channel": channel,
            "body": body,
            "subject": subject,
            "data": data_json,
            "thread_id": thread,
            "reply_to": reply_to,
            "priority": level.value,
            "ttl_s": asked_ttl,
            "must_read": must_read,
            "kind": kind.value,
        }
        fingerprint = outbox.request_hash(request) if retry_key else ""

        def tx(conn: Connection) -> SendResult:
            now = self.store.clock()
            known = agent_rows.existing_names(conn, [caller.agent, *names])
            self._check_sender(caller, known)
            if retry_key is not None:
                first = outbox.replay(conn, caller.agent, retry_key, fingerprint, now)
                if first is not None:
                    return first
            limits_of = accounts.limits_in_effect(conn, self.settings, [caller.agent, *names])
            self._count_send(conn, caller, now, limits_of[caller.agent].send_rate_per_minute)
            thread_of = thread
            if reply_to is not None:
                channels = member_channels(conn, caller.agent)
                parent = mail.visible_message(conn, caller.agent, channels, reply_to)
                if parent is None:
                    raise not_found(f"no message {reply_to!r} that you can see", reply_to=reply_to)
                if thread_of is not None and thread_of != parent.thread_id:
                    raise invalid("a reply stays in its parent's thread; omit thread_id")
                thread_of = parent.thread_id
            if channel is None:
                recipients = self._direct_recipients(conn, names, roster, known)
                display = recipients
            else:
                recipients = self._channel_recipients(conn, caller.agent, channel)
                display = [f"#{channel}"]
                limits_of = accounts.limits_in_effect(conn, self.settings, recipients)
            dropped = sorted(blocks.blocking(conn, caller.agent, recipients))
            deliver = [n for n in recipients if n not in dropped]
            full = self._full_inboxes(conn, deliver, limits_of, now)
            if full and channel is None:
                raise AgentpostError(
                    ErrorCode.INBOX_FULL,
                    f"the inbox of {', '.join(full)} is full of unacknowledged "
                    "messages; it takes new mail once they ack",
                    details={"full": full},
                    retry_after_s=60,
                )
            skipped = full
            recipients = [n for n in recipients if n not in full]
            deliver = [n for n in deliver if n not in full]
            mid = new_message_id(now)
            expires_at = now + ttl if ttl else None
            seq = mail.insert_message(
                conn,
                id=mid,
                sender=caller.agent,
                recipients=json.dumps(display),
                channel=channel,
                kind=kind.value,
                subject=subject,
                body=body,
                data=data_json,
                thread_id=thread_of or mid,
                reply_to=reply_to,
                priority=level.value,
                must_read=must_read,
                created_at=now,
                expires_at=expires_at,
                trust=caller.trust.value,
            )
            if deliver:
                mail.insert_deliveries(
                    conn,
                    seq,
                    deliver,
                    urgent=level is Priority.URGENT,
                    expires_at=None if must_read else expires_at,
                )
            result = SendResult(mid, thread_of or mid, recipients, channel, skipped)
            outbox.record_send(
                conn,
                now=now,
                sender=caller.agent,
                result=result,
                dropped=dropped,
                request=request,
                bodies=self.settings.audit_bodies,
            )
            if retry_key is not None:
                outbox.remember(conn, self.store, caller.agent, retry_key, fingerprint, result)
            return result

        return await self.store.write(tx)

    def _check_sender(self, caller: Caller, known: dict[str, bool]) -> None:
        if caller.agent not in known:
            raise AgentpostError(ErrorCode.UNAUTHENTICATED, f"no agent {caller.agent!r}")
        if not known[caller.agent]:
            raise AgentpostError(ErrorCode.FORBIDDEN, f"agent {caller.agent!r} is disabled")

    def _count_send(self, conn: Connection, caller: Caller, now: float, limit: int) -> None:
        count, reset_s = rates.hit(conn, self.store.dialect, f"send:{caller.agent}", now, 60)
        if count > limit:
            raise AgentpostError(
                ErrorCode.RATE_LIMITED,
                f"{caller.agent} may send {limit} messages a minute",
                details={"limit": limit},
                retry_after_s=max(1.0, round(reset_s, 1)),
            )

    def _full_inboxes(
        self, conn: Connection, names: list[str], limits_of: dict[str, AgentLimits], now: float
    ) -> list[str]:
        """Those of `names` whose open mail reached their cap (their own, or the setting)."""
        if not names:
            return []
        default = self.limits.max_unacked
        caps = {n: limits_of[n].max_unacked if n in limits_of else default for n in names}
        counts = mail.unacked_counts(conn, names, max(caps.values()), now)
        return [n for n in names if counts.get(n, 0) >= caps[n]]

    def _direct_recipients(
        self,
        conn: Connection,
        names: list[str],
        roster: list[str] | None,
        known: dict[str, bool],
    ) -> list[str]:
        for name in names:
            if name not in known:
                if roster is not None and name in roster:
                    agent_rows.create_agent(conn, name, now=self.store.clock())
                    continue
                raise AgentpostError(
                    ErrorCode.UNKNOWN_RECIPIENT,
                    f"no agent named {name!r}; `who` with include_offline lists them",
                    details={"recipient": name},
                )
            if not known[name]:
                raise AgentpostError(ErrorCode.GONE, f"agent {name!r} is disabled")
            if roster is not None and name not in roster:
                raise AgentpostError(
                    ErrorCode.UNKNOWN_RECIPIENT,
                    f"{name!r} is not on the roster",
                    details={"recipient": name},
                )
        return names

    def _channel_recipients(self, conn: Connection, sender: str, channel: str) -> list[str]:
        if channel not in member_channels(conn, sender):
            everyone = members(conn, channel)
            if not everyone:
                raise not_found(f"no channel #{channel}", channel=f"#{channel}")
            raise forbidden(f"join #{channel} before you post to it", channel=f"#{channel}")
        return [n for n in members(conn, channel) if n != sender and n not in (SYSTEM, POST_OFFICE)]

    # -- read ----------------------------------------------------------------------------------

    async def inbox(
        self,
        caller: Caller,
        *,
        unread_only: bool = True,
        limit: int = 20,
        thread_id: str | None = None,
        urgent_only: bool = False,
        peek: bool = False,
    ) -> Inbox:
        rules.check_limit(limit)
        thread = _thread_id(thread_id)

        def fetch(conn: Connection) -> Inbox:
            now = self.store.clock()
            if not peek:
                mail.expire_due(conn, now, caller.agent)
            found = mail.inbox_rows(
                conn,
                caller.agent,
                now=now,
                unread_only=unread_only,
                limit=limit,
                thread_id=thread,
                urgent_only=urgent_only,
            )
            states = {r.seq: r.delivery_state for r in found}
            if not peek:
                fresh = [r.seq for r in found if r.delivery_state == "queued"]
                mail.mark_read(conn, caller.agent, fresh, now)
                states.update(dict.fromkeys(fresh, "read"))
            out = [mail.message_from_row(r, states[r.seq]) for r in found]
            return Inbox(out, mail.unread_count(conn, caller.agent, now))

        if peek:
            return await self.store.read(fetch)
        return await self.store.write(fetch)

    async def wait(
        self, caller: Caller, *, timeout_s: float = 60, thread_id: str | None = None
    ) -> Inbox:
        """Block until unread mail is there (then read it, as `inbox` does) or the time is up."""
        timeout = rules.check_timeout(timeout_s, self.limits)
        thread = _thread_id(thread_id)
        # A monotonic deadline: the store's clock decides expiry and may be stepped or injected.
        deadline = anyio.current_time() + timeout
        heartbeat = Heartbeat(self.store, caller, self.settings.heartbeat_s)
        while True:
            await heartbeat.beat()
            version = self.store.version
            # Every commit on the file wakes every waiter: the look must be cheap.
            waiting = await self.store.glance(
                lambda c: mail.has_unread(c, caller.agent, self.store.clock(), thread)
            )
            if waiting:
                found = await self.inbox(caller, thread_id=thread)
                if found.messages:
                    return found
                continue
            remaining = deadline - anyio.current_time()
            if remaining <= 0:
                unread = await self.store.glance(
                    lambda c: mail.unread_count(c, caller.agent, self.store.clock())
                )
                return Inbox([], unread, timed_out=True)
            await self.store.wait_changed(version, heartbeat.timeout(remaining))

    async def ack(self, caller: Caller, ids: Sequence[str]) -> AckResult:
        if isinstance(ids, str):
            ids = [ids]
        if not isinstance(ids, Sequence) or not all(isinstance(i, str) for i in ids):
            raise invalid("ids must be a list of message ids")
        if len(ids) > rules.MAX_LIMIT:
            raise invalid(f"at most {rules.MAX_LIMIT} ids per ack")
        wanted = list(dict.fromkeys(ids))

        def tx(conn: Connection) -> AckResult:
            now = self.store.clock()
            mail.expire_due(conn, now, caller.agent)  # mail past its TTL is a tombstone now
            acked = mail.ack(conn, caller.agent, wanted, now)
            if self.settings.clear_on_ack:
                clearing.clear_handled(conn, acked)
            return AckResult(acked, [i for i in wanted if i not in acked])

        return await self.store.write(tx)

    async def thread(self, caller: Caller, thread_id: str, limit: int = 50) -> list[Message]:
        thread = _thread_id(thread_id)
        rules.check_limit(limit)

        def tx(conn: Connection) -> list[Message]:
            channels = member_channels(conn, caller.agent)
            found = mail.thread_rows(conn, caller.agent, channels, thread or "", limit)
            return [mail.message_from_row(r, r.delivery_state) for r in found]

        found = await self.store.read(tx)
        if not found:
            raise not_found(f"no thread {thread_id!r} with messages you can see")
        return found

    async def get(self, caller: Caller, message_id: str) -> Message:
        def tx(conn: Connection) -> Message | None:
            channels = member_channels(conn, caller.agent)
            row = mail.visible_message(conn, caller.agent, channels, message_id)
            return None if row is None else mail.message_from_row(row, row.delivery_state)

        found = await self.store.read(tx)
        if found is None:
            raise not_found(f"no message {message_id!r} that you can see")
        return found

    async def sent(self, caller: Caller, limit: int = 20) -> list[SentMessage]:
        rules.check_limit(limit)

        def tx(conn: Connection) -> list[SentMessage]:
            now = self.store.clock()
            found = [mail.message_from_row(r) for r in mail.sent_rows(conn, caller.agent, limit)]
            receipts = mail.receipts(conn, [m.seq for m in found], now)
            return [
                SentMessage(m, outbox.with_silent_receipts(m, receipts[m.seq], now)) for m in found
            ]

        return await self.store.read(tx)

    async def search(self, caller: Caller, query: str, limit: int = 20) -> list[Message]:
        rules.check_limit(limit)
        words = query.split() if isinstance(query, str) else []
        if not words:
            raise invalid("query must contain at least one word")
        if len(query) > 500:
            raise invalid("query is over 500 characters")
        rules.check_text(query, "query")

        def tx(conn: Connection) -> list[Message]:
            channels = member_channels(conn, caller.agent)
            found = mail.search_rows(conn, self.store.dialect, caller.agent, channels, words, limit)
            return [mail.message_from_row(r, r.delivery_state) for r in found]

        return await self.store.read(tx)

    # -- retention ---------------------------------------------------------------------------

    async def sweep(self, *, batch: int = 500) -> int:
        """Purge mail older than `retention_days` that every recipient acked (or let expire).

        Unread past-TTL mail is turned into tombstones first, so it counts as expired. Each
        batch is its own short transaction: a big sweep never holds the writer for long.
        Returns how many messages were purged.
        """
        rules.check_limit(batch, name="batch")
        keep_s = self.settings.retention_days * 86_400
        total = 0
        while True:

            def tx(conn: Connection) -> int:
                now = self.store.clock()
                mail.expire_due(conn, now)
                return mail.purge_handled(conn, now - keep_s, batch)

            purged = await self.store.write(tx)
            total += purged
            if purged < batch:
                await purge_old_events(self.store, keep_s, batch)  # and webhook deliveries
                await self.store.write(self._forget_old_records)
                return total

    def _forget_old_records(self, conn: Connection) -> None:
        """What matters only for a while: idempotency keys (a day), failed authentications
        and lockouts (their window), the audit rows of sends (as long as the mail is kept)."""
        now = self.store.clock()
        idempotency.purge(conn, now - outbox.IDEMPOTENCY_S)
        lockouts.purge(conn, now - self.settings.lockout_s)
        audit.purge(conn, "message.sent", now - self.settings.retention_days * 86_400)

    # -- piggyback ---------------------------------------------------------------------------

    async def notices(self, caller: Caller) -> Notices:
        """Unread count, and urgent mail this session has not been told of (each told once)."""

        def look(conn: Connection) -> tuple[int, list[Any]]:
            now = self.store.clock()
            urgent = (
                mail.urgent_for_session(conn, caller.agent, caller.session_id, now)
                if caller.session_id is not None
                else []
            )
            return mail.unread_count(conn, caller.agent, now), urgent

        unread, urgent = await self.store.glance(look)
        if urgent and caller.session_id is not None:
            newest = max(r.seq for r in urgent)
            session_id = caller.session_id
            # Whoever moves the cursor tells; a concurrent call that lost the race stays quiet.
            told = await self.store.write(
                lambda conn: agent_rows.advance_urgent_cursor(conn, session_id, newest)
            )
            if not told:
                urgent = []
        return Notices(unread, [mail.message_from_row(r, r.delivery_state) for r in urgent])

    async def arrivals(self, caller: Callable[[], Caller]) -> AsyncIterator[int]:
        """Yield each time new mail has been delivered to the caller (never marks it read).

        Woken by the store's change signal, so a waiting session costs nothing while idle.
        `caller` is asked afresh each round: a session may change its name.
        """
        newest = await self.store.glance(lambda c: mail.newest_delivery_seq(c, caller().agent))
        while True:
            version = self.store.version
            latest = await self.store.glance(lambda c: mail.newest_delivery_seq(c, caller().agent))
            if latest > newest:
                newest = latest
                yield latest
            await self.store.wait_changed(version, None)

    async def follow(self, *, backlog: int = 0) -> AsyncIterator[Message]:
        """Every new message in the post office, as it is stored: the owner's live view.

        Starts with the last `backlog` messages; never marks anything read.
        """
        cursor = await self.store.read(mail.newest_seq)
        cursor = max(0, cursor - backlog)
        while True:
            version = self.store.version
            found = await self.store.read(partial(mail.messages_after, after_seq=cursor, limit=200))
            for row in found:
                cursor = row.seq
                yield mail.message_from_row(row)
            if len(found) < 200:
                await self.store.wait_changed(version, None)
