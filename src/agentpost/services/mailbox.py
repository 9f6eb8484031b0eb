"""Messaging: send, read, acknowledge, wait, be told; `services.history` reads what was said.

Each operation's writes are one transaction (`wait`, `notices` and `sweep` run several
small ones). The sender is always the caller; nothing in the arguments can name another
sender. A refusal is raised before anything is written, or rolls its transaction back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection, Sequence
from functools import partial
from typing import Any

import anyio

from agentpost.config import Settings
from agentpost.domain import limits as rules
from agentpost.domain.errors import AgentpostError, ErrorCode, invalid
from agentpost.domain.models import (
    AckResult,
    Caller,
    Inbox,
    Kind,
    Message,
    Notices,
    SendResult,
    Trust,
)
from agentpost.domain.names import POST_OFFICE, SYSTEM
from agentpost.services import (
    accounts,
    addressing,
    drafts,
    outbox,
    piggyback,
    retention,
)
from agentpost.services.accounts import check_identity
from agentpost.services.channels import member_channels, members
from agentpost.services.heartbeats import Heartbeat, check_standing
from agentpost.services.history import seen_seq
from agentpost.services.waiting import held_watch
from agentpost.store import agents as agent_rows
from agentpost.store import blocks, clearing, expiry, mail, reading
from agentpost.store import parties as party_rows
from agentpost.store.database import Connection, Store


class Mailbox:
    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.limits = settings.limits
        self.on_expiry: Callable[[float], None] = _nobody
        """Told (store clock) when mail sent here will expire unread: the sweeper's alarm."""

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
        create_sender: bool = False,
        told: list[Notices] | None = None,
    ) -> SendResult:
        """Store a message and deliver it. A retry under the same `idempotency_key` answers
        as the first send did and stores nothing; recipients who blocked the caller get
        nothing, and the caller is not told (see `outbox`).

        `create_sender`: a caller who is no agent yet becomes one (as `ensure_agent` would
        make it: the command line's `--as`), in the transaction that stores the message, so a
        refused send leaves no agent behind. `told`: see `send_with_notices`."""
        if create_sender:
            check_identity(self.settings, caller.agent, session=False)
        message = drafts.draft(
            self.settings,
            to,
            body,
            subject=subject,
            data=data,
            thread_id=thread_id,
            reply_to=reply_to,
            priority=priority,
            ttl_s=ttl_s,
            must_read=must_read,
            kind=kind,
        )
        retry_key = outbox.check_idempotency_key(idempotency_key)
        # A channel's members may be many: its delivery may take long. A send changes no
        # account (whoever authenticated stays who they were).
        lengthy = message.channel is not None

        def noticed(conn: Connection, sent: SendResult) -> SendResult:
            if told is not None:
                told.append(piggyback.notices_in(conn, caller, self.store.clock()))
            return sent

        def labelled(conn: Connection) -> drafts.Draft:
            # A thread named by its sender (a reply's is its parent's, which exists).
            if message.thread is not None and message.reply_to is None:
                addressing.check_thread_label(conn, message.thread)
            return message

        if retry_key is None:
            sent = await self.store.write(
                lambda conn: noticed(
                    conn,
                    self._send_draft(conn, caller, labelled(conn), create_sender=create_sender),
                ),
                lengthy=lengthy,
                touches_accounts=False,
            )
            self._will_expire(message)
            return sent
        fingerprint = outbox.request_hash(message.request)

        def tx(conn: Connection) -> SendResult:
            known = agent_rows.existing_names(conn, [caller.agent])
            addressing.admit_sender(
                conn, caller, known, create=create_sender, now=self.store.clock()
            )
            first = outbox.replay(
                conn, caller.agent, retry_key, message.request, self.store.clock()
            )
            if first is not None:
                return noticed(conn, first)
            result = self._send_draft(conn, caller, labelled(conn))
            outbox.remember(conn, self.store, caller.agent, retry_key, fingerprint, result)
            return noticed(conn, result)

        sent = await self.store.write(tx, lengthy=lengthy, touches_accounts=False)
        self._will_expire(message)
        return sent

    async def send_with_notices(
        self, caller: Caller, to: str | Sequence[str], body: str, **options: Any
    ) -> tuple[SendResult, Notices]:
        """`send`, and what rides along on its answer (`notices`), read and told in the send's
        own transaction: an MCP `send` takes one transaction where it took two."""
        told: list[Notices] = []
        sent = await self.send(caller, to, body, told=told, **options)
        return sent, told[0]

    def _will_expire(self, message: drafts.Draft) -> None:
        if message.lifetime is not None:
            self.on_expiry(self.store.clock() + message.lifetime)

    def send_in(
        self,
        conn: Connection,
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
        notice: bool = False,
        awaited: bool = False,
        envelope: bool = False,
    ) -> SendResult:
        """`send` inside the caller's write transaction, for a use case whose own record and
        its message are stored together or not at all (a task and the message delivering it):
        a refusal raises, and the caller's transaction rolls back with it.

        A `notice` reports a change the caller's transaction makes anyway (a task's new status),
        so it must not be what fails it: it counts against no send rate and passes over direct
        recipients who are disabled or whose inbox is full; blocks still drop it silently.
        An `awaited` one (an answer its asker may be blocked on) passes over only a full inbox.
        An `envelope` is a body and `data` of the caller's own around values it checked
        already, each against its own limit (a task's note, data or result): it may nest one
        level more, and be as large as they are plus the envelope."""
        message = drafts.draft(
            self.settings,
            to,
            body,
            subject=subject,
            data=data,
            thread_id=thread_id,
            reply_to=reply_to,
            priority=priority,
            ttl_s=ttl_s,
            must_read=must_read,
            kind=kind,
            envelope=envelope,
        )
        return self._send_draft(conn, caller, message, notice=notice, awaited=awaited)

    def system_post_in(
        self,
        conn: Connection,
        to: str | Sequence[str],
        body: str,
        *,
        subject: str = "",
        data: Any = None,
        kind: Kind = Kind.SYSTEM,
        thread_id: str | None = None,
    ) -> SendResult:
        """The post office's own notice (sender `system`, verified), inside the caller's write
        transaction. It counts against no rate, reaches a `#channel` without being a member, is
        not dropped by blocks, and passes over a full inbox rather than fail what it reports."""
        message = drafts.draft(
            self.settings, to, body, subject=subject, data=data, thread_id=thread_id, kind=kind
        )
        now = self.store.clock()
        if message.channel is None:
            known = agent_rows.existing_names(conn, message.names)
            recipients = addressing.direct_recipients(
                conn, message.names, known, self.settings.agents, now
            )
            display = recipients
        else:
            everyone = members(conn, message.channel)
            recipients = [n for n in everyone if n not in (SYSTEM, POST_OFFICE)]
            display = [f"#{message.channel}"]
        limits_of = accounts.limits_in_effect(conn, self.settings, recipients)
        full = addressing.full_inboxes(conn, recipients, limits_of, self.limits.max_unacked, now)
        deliver = [n for n in recipients if n not in full]
        addressed = drafts.Addressing(display, deliver, deliver, full, [])
        sender = Caller(SYSTEM, trust=Trust.VERIFIED)
        return drafts.store_message(
            conn, self.settings, sender, message, now, addressed, message.thread
        )

    def _send_draft(
        self,
        conn: Connection,
        caller: Caller,
        message: drafts.Draft,
        *,
        notice: bool = False,
        awaited: bool = False,
        create_sender: bool = False,
    ) -> SendResult:
        """The whole of an agent's send, in `conn`: every check, then the message stored
        (a `notice`, an `awaited` message: see `send_in`; `create_sender`: see `send`)."""
        now = self.store.clock()
        names, channel = message.names, message.channel
        parties = party_rows.of_send(conn, caller.agent, names)
        known = parties.known
        addressing.admit_sender(conn, caller, known, create=create_sender, now=now)
        # Stamped with the sender's trust: none stored, admit_sender just made it, verified.
        caller = accounts.with_stored_trust(caller, parties.trust or Trust.VERIFIED)
        limits_of = accounts.limits_from(self.settings, [caller.agent, *names], parties.overrides)
        if not notice:
            addressing.count_send(
                conn,
                self.store.dialect,
                caller,
                now,
                limits_of[caller.agent].send_rate_per_minute,
            )
        thread_of = message.thread
        if message.reply_to is not None:
            thread_of = addressing.parent_thread(conn, caller, message.reply_to, thread_of, now)
        if channel is None:
            if notice:
                recipients = [n for n in names if known.get(n)]
                display = names
            else:
                recipients = addressing.direct_recipients(
                    conn, names, known, self.settings.agents, now
                )
                display = recipients
            blocking: Collection[str] = [n for n in recipients if n in parties.blocking]
        else:
            recipients = addressing.channel_recipients(conn, caller.agent, channel)
            display = [f"#{channel}"]
            limits_of = accounts.limits_in_effect(conn, self.settings, recipients)
            blocking = blocks.blocking(conn, caller.agent, recipients)
        # A recipient who blocks the sender is counted full as any other: whether mail is
        # refused (or skipped) for a full inbox must not tell the sender who blocks it.
        cap = self.limits.max_unacked
        full = [] if awaited else addressing.full_inboxes(conn, recipients, limits_of, cap, now)
        dropped = sorted(set(blocking) - set(full))
        deliver = [n for n in recipients if n not in dropped]
        if full and channel is None and not notice:
            raise AgentpostError(
                ErrorCode.INBOX_FULL,
                f"the inbox of {', '.join(full)} is full of unacknowledged "
                "messages; it takes new mail once they ack",
                details={"full": full},
                retry_after_s=60,
            )
        addressed = drafts.Addressing(
            display,
            [n for n in recipients if n not in full],
            [n for n in deliver if n not in full],
            full,
            dropped,
        )
        return drafts.store_message(conn, self.settings, caller, message, now, addressed, thread_of)

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
        before: str | None = None,
    ) -> Inbox:
        """Unread mail from the oldest on, marked read unless `peek`; with `unread_only=False`,
        the whole inbox's newest `limit` (oldest first), and `before` (a page's first, oldest
        id) pages back. Unread mail takes no cursor: reading a page moves on to the next."""
        rules.check_limit(limit)
        thread = drafts.check_thread_id(thread_id)
        if before is not None:
            rules.check_id(before, "before")
            if unread_only:
                raise invalid(
                    "before pages back through the whole inbox: give unread_only=false with it "
                    "(unread mail is read from the oldest on, each page moving on to the next)"
                )

        def fetch(conn: Connection) -> Inbox:
            now = self.store.clock()
            if not peek:
                self.expire_due_in(conn, now, caller.agent)
            before_seq = None
            if before is not None:  # the common look, without a cursor, asks for no channels
                channels = member_channels(conn, caller.agent)
                before_seq = seen_seq(conn, caller, channels, before, now)
            found = mail.inbox_rows(
                conn,
                caller.agent,
                now=now,
                unread_only=unread_only,
                limit=limit,
                thread_id=self._narrowed(conn, caller, thread),
                urgent_only=urgent_only,
                before_seq=before_seq,
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

    def _narrowed(self, conn: Connection, caller: Caller, thread: str | None) -> str | None:
        """The thread an inbox or a wait is narrowed to: named by its id or, as for `thread`,
        by the id of any of its messages the caller may see."""
        if thread is None:
            return None
        channels = member_channels(conn, caller.agent)
        return reading.thread_named(conn, caller.agent, channels, thread, self.store.clock())

    async def wait(
        self, caller: Caller, *, timeout_s: float = 60, thread_id: str | None = None
    ) -> Inbox:
        """Block until unread mail is there (then read it, as `inbox` does) or the time is up."""
        timeout = rules.check_timeout(timeout_s, self.limits)
        checked = drafts.check_thread_id(thread_id)
        thread = checked and await self.store.read(lambda c: self._narrowed(c, caller, checked))
        # A monotonic deadline: the store's clock decides expiry and may be stepped or injected.
        deadline = anyio.current_time() + timeout
        heartbeat = Heartbeat(self.store, caller, self.settings.heartbeat_s)
        # Watched before the first look: mail that lands after any look wakes the next wait.
        with held_watch(self.store, caller, self.settings.max_open_waits) as news:
            while True:
                await heartbeat.beat()
                # A broadcast wakes every member, and every commit of another process wakes
                # every waiter: the look must be cheap.
                waiting = await self.store.glance(
                    lambda c: mail.has_unread(c, caller.agent, self.store.clock(), thread)
                )
                if waiting:
                    await check_standing(self.store, caller)
                    found = await self.inbox(caller, thread_id=thread)
                    if found.messages:
                        return found
                    continue
                remaining = deadline - anyio.current_time()
                if remaining <= 0 or news.closing:
                    unread = await self.store.glance(
                        lambda c: mail.unread_count(c, caller.agent, self.store.clock())
                    )
                    return Inbox([], unread, timed_out=True)
                await news.wait(heartbeat.timeout(remaining))

    async def ack(self, caller: Caller, ids: Sequence[str]) -> AckResult:
        wanted = list(dict.fromkeys(rules.check_ack_ids(ids)))

        def tx(conn: Connection) -> AckResult:
            now = self.store.clock()
            self.expire_due_in(conn, now, caller.agent)  # mail past its TTL is a tombstone now
            acked = mail.ack(conn, caller.agent, wanted, now)
            if self.settings.clear_on_ack:
                clearing.clear_handled(conn, acked, now)
            return AckResult(acked, [i for i in wanted if i not in acked])

        return await self.store.write(tx)

    # -- retention ---------------------------------------------------------------------------

    async def sweep(self, *, batch: int = 500) -> int:
        """Purge mail older than `retention_days` that every recipient acked (or let expire).

        Unread past-TTL mail is turned into tombstones first, so it counts as expired. Each
        batch is its own short transaction: a big sweep never holds the writer for long.
        Returns how many messages were purged.
        """
        rules.check_limit(batch, name="batch")
        before = self.store.clock() - self.settings.retention_days * 86_400
        cutoff = await self.store.read(lambda conn: mail.written_before(conn, before))
        total = 0
        while True:

            def tx(conn: Connection) -> int:
                now = self.store.clock()
                self.expire_due_in(conn, now)
                return mail.purge_handled(conn, cutoff, batch, now)

            purged = await self.store.write(tx, lengthy=True)
            total += purged
            if purged < batch:
                await retention.forget_all_but_mail(self.store, self.settings, batch)
                await self.store.purge_wiped()  # the purged mail's words leave the file too
                return total

    async def expire_due(self) -> float | None:
        """Turn everyone's unread mail past its TTL into tombstones now (their senders' events
        and webhooks go out with it), and say when the next unread mail falls due (store
        clock; None: none has a TTL). One reading of the clock for both, so mail that falls
        due meanwhile is either expired or still to come, never passed over.

        A read looks first: most looks find nothing due, and a write would hold the write lock
        against every writer (on SQLite, every process's) to change nothing."""

        def look(conn: Connection) -> tuple[bool, float | None]:
            now = self.store.clock()
            return expiry.any_due(conn, now), expiry.next_expiry(conn, now)

        def tx(conn: Connection) -> float | None:
            now = self.store.clock()
            self.expire_due_in(conn, now)
            return expiry.next_expiry(conn, now)

        due, next_at = await self.store.read(look)
        if not due:
            return next_at
        # A broadcast's deliveries fall due together: never on the event loop.
        return await self.store.write(tx, lengthy=True, touches_accounts=False)

    def expire_due_in(self, conn: Connection, now: float, recipient: str | None = None) -> None:
        """`expiry.expire_due` (everyone's, or `recipient`'s before they read) in the caller's
        write transaction; with `clear_on_ack`, mail an expiry leaves handled by everyone
        (after an ack) is cleared, as an ack that leaves it so clears it."""
        expired = expiry.expire_due(conn, now, recipient)
        if expired and self.settings.clear_on_ack:
            clearing.clear_expired(conn, expired, now)

    # -- piggyback ---------------------------------------------------------------------------

    async def notices(self, caller: Caller) -> Notices:
        """Unread count, and urgent mail this session has not been told of (each told once)."""
        return await piggyback.notices(self.store, caller)

    async def arrivals(self, caller: Callable[[], Caller], *, after: int) -> AsyncIterator[int]:
        """Yield the newest `seq` each time mail later than `after` has been delivered to the
        caller (never marks it read): at once if some came already.

        `after` is the caller's cursor (`newest_seq` at its start, or the last message it
        handled), so mail delivered between its last look and this call is never skipped: the
        watch is registered before the first look. Woken by the commits that deliver to the
        caller (and other processes' commits), so a waiting session costs nothing while idle.
        `caller` is asked afresh each round: a session may change its name (which wakes it).
        """
        newest = after
        with self.store.watch_following(lambda: caller().agent) as news:
            while True:
                latest = await self.store.glance(
                    lambda c: mail.newest_delivery_seq(c, caller().agent)
                )
                if latest > newest:
                    newest = latest
                    yield latest
                await news.wait(None)

    async def newest_seq(self) -> int:
        """The `seq` of the newest message stored (0: none): a push cursor's start, so a new
        session is told of what comes next, not of a backlog, under whatever name it takes
        later (the newest of its first name's mail would let another name's backlog through)."""
        return await self.store.glance(mail.newest_seq)

    async def arrived_after(
        self, caller: Caller, after_seq: int, limit: int = 100
    ) -> list[Message]:
        """Mail delivered to the caller after message `after_seq`, oldest first, read or not (a
        push tells of each message once, even one a tool read first); never marks it read."""
        rules.check_limit(limit)

        def look(conn: Connection) -> list[Message]:
            found = mail.inbox_rows(
                conn,
                caller.agent,
                now=self.store.clock(),
                unread_only=False,
                limit=limit,
                after_seq=after_seq,
            )
            return [mail.message_from_row(r, r.delivery_state) for r in found]

        return await self.store.read(look)  # whole bodies: off the event loop

    async def follow(self, *, backlog: int = 0) -> AsyncIterator[Message]:
        """Every new message in the post office, as it is stored: the owner's live view.

        Starts with the last `backlog` messages; never marks anything read.
        """
        cursor = await self.store.read(partial(mail.cursor_before_newest, count=max(0, backlog)))
        while True:
            version = self.store.version
            found = await self.store.read(partial(mail.messages_after, after_seq=cursor, limit=200))
            for row in found:
                cursor = row.seq
                yield mail.message_from_row(row)
            if len(found) < 200:
                await self.store.wait_changed(version, None)


def _nobody(expires_at: float) -> None:
    """No sweeper listens (a one-shot command's post office)."""
