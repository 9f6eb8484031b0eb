"""Each agent's event log, read by cursor: what server-sent events stream and push announces.

The log is written by the mailbox's own transactions (see `store.events`); this service only
reads it. A cursor is an event's `seq`: reading after it resumes exactly where a client left
off, so a reconnecting stream (`Last-Event-ID`) misses nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from functools import partial

from agentpost.domain import limits as rules
from agentpost.domain.errors import AgentpostError, invalid
from agentpost.domain.events import Event
from agentpost.domain.models import Caller
from agentpost.retries import RetryLog
from agentpost.services.heartbeats import Heartbeat, check_standing
from agentpost.services.waiting import check_room_to_wait
from agentpost.store import events as event_rows
from agentpost.store import webhooks as webhook_rows
from agentpost.store.database import Connection, Store
from agentpost.store.wakeups import Reach

log = logging.getLogger(__name__)
_retries = RetryLog(log)

FOLLOW_PAGE = 200
MAX_TOUCHED = 10_000
RETRY_S = 1.0
"""How soon `touches` looks again after the database refused a look (busy)."""
CATCH_UP_S = 1.0
"""How often, while local news keeps coming, `touches` checks its cursor (and, where other
processes' commits go unheard, reads the log)."""
CATCH_UP_EVENTS = 10_000
"""How far `touches` lets its cursor fall behind while only this process commits: the read
after another process's commit then scans at most about this many events."""


def check_cursor(after: int) -> int:
    return rules.check_seq(after, "after")


class Events:
    def __init__(self, store: Store, max_open_waits: int) -> None:
        self.store = store
        self._max_open_waits = max_open_waits

    async def since(self, caller: Caller, after: int, limit: int = 100) -> list[Event]:
        """The caller's events after the cursor `after`, oldest first (at most `limit`)."""
        cursor = check_cursor(after)
        rules.check_limit(limit)
        return await self.store.glance(
            lambda conn: event_rows.events_after(conn, caller.agent, cursor, limit)
        )

    async def newest(self, caller: Caller) -> int:
        """The cursor of the caller's newest event (0 when there is none): "from now on"."""
        return await self.store.glance(lambda conn: event_rows.newest_for(conn, caller.agent))

    async def start(self, caller: Caller, after: int | None) -> int:
        """Where a stream of the caller's events starts: after the cursor `after`; without
        one, now (the caller's newest event). A cursor past every event there is was never
        handed out by this log (it is another post office's, or the database started afresh):
        the stream starts at the newest event there is, not at a number the log may reach in
        years, so nothing that comes next is missed."""
        check_room_to_wait(self.store, caller, self._max_open_waits)  # refused before it opens
        if after is None:
            return await self.newest(caller)
        cursor = check_cursor(after)

        def tx(conn: Connection) -> int:
            return min(cursor, event_rows.newest(conn))

        return await self.store.glance(tx)

    async def follow(
        self, caller: Caller, after: int, *, heartbeat_s: float | None = None
    ) -> AsyncIterator[Event]:
        """The caller's events after `after`, then each new one as it is committed, until the
        process stops (`Store.stop_waiting`): then it ends, once it has told what was there, so
        its client resumes after the last event elsewhere.

        Woken by the commits that write the caller's events (and by other processes'
        commits), so a quiet stream costs nothing while it waits. With `heartbeat_s`, the open
        stream is a heartbeat of the caller's session.
        """
        cursor = check_cursor(after)
        heartbeat = Heartbeat(self.store, caller, heartbeat_s) if heartbeat_s else None
        # Watched before the first look: an event committed after any look wakes the next wait.
        # Counted, not refused, here: `start` refused it before the stream opened (two opened
        # at once may both have found room; an error event now would read as a refused key).
        with self.store.watch(caller.agent) as news:
            while True:
                if heartbeat is not None:
                    await heartbeat.beat()
                page = partial(
                    event_rows.events_after, agent=caller.agent, after=cursor, limit=FOLLOW_PAGE
                )
                found = await self.store.glance(page)
                if found:
                    await check_standing(self.store, caller)
                for event in found:
                    cursor = event.seq
                    yield event
                if len(found) < FOLLOW_PAGE:
                    if news.closing:
                        return
                    await news.wait(None if heartbeat is None else heartbeat.timeout(None))

    async def touched(self, after: int, limit: int = 1000) -> tuple[dict[str, int], int]:
        """Whose event logs grew after `after`: {agent: their newest seq}, and the newest seq
        seen (the next call's `after`; with nothing new, the newest seq there is, so a huge
        `after` answers where "now" is). What push over HTTP uses to wake each agent's
        connections; not a caller's call, so it answers for everyone."""
        cursor = check_cursor(after)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_TOUCHED:
            raise invalid(f"limit must be an integer from 1 to {MAX_TOUCHED}")
        return await self.store.glance(lambda conn: event_rows.touched(conn, cursor, limit))

    async def newest_overall(self) -> int:
        """The newest event's seq in the whole post office: where `touched` starts."""
        return await self.store.glance(event_rows.newest)

    async def touches(self) -> AsyncIterator[frozenset[str]]:
        """From now on, forever: each item names agents whose event logs grew since the item
        before (never empty), each new event named once.

        This process's own commits say whom they concerned and with which events, so those
        cost no read of the log. The log is read from a cursor after another process's commit
        (or a wait bounded by polling), which cannot say whom it concerned; what was named
        already, either way, is not named again. The cursor does not move with local news, so
        once every `CATCH_UP_S` the log is read where other processes' commits go unheard
        (PostgreSQL while it cannot hear the other replicas), and elsewhere when the cursor is
        more than `CATCH_UP_EVENTS` behind.
        Watched before the first look, so nothing committed after the start goes unnamed. A
        refused look (a busy database) is tried again shortly from the same cursor: it skips
        nothing.
        """
        cursor: int | None = None
        checked_at = time.monotonic()
        told: dict[str, int] = {}  # named already, up to this seq
        with self.store.watch(None) as news:
            reach: Reach | None = {}
            while True:
                try:
                    if cursor is None:
                        cursor = await self.newest_overall()
                    else:
                        lagging = False
                        if reach is not None and time.monotonic() - checked_at >= CATCH_UP_S:
                            checked_at = time.monotonic()
                            # Where other processes go unheard, local news must not keep the
                            # log unread for longer than this.
                            lagging = not self.store.hears_other_processes or (
                                await self.newest_overall() - cursor > CATCH_UP_EVENTS
                            )
                        if reach is None or lagging:
                            found, cursor = await self._read_through(cursor)
                            unheard = {a: s for a, s in found.items() if s > told.get(a, -1)}
                            told = {a: s for a, s in told.items() if s > cursor}
                            reach = {**unheard, **(reach or {})}
                except AgentpostError as err:
                    _retries.failed("watching for news", err)
                    await news.wait(RETRY_S)
                    reach = None
                    continue
                _retries.recovered("watching for news")
                if reach:
                    for agent, seq in reach.items():
                        told[agent] = max(seq, told.get(agent, -1))
                    yield frozenset(reach)
                woken = await news.wait(None)
                local = news.reach() if woken else None
                # A log read may have named these already (it overlapped their commit).
                reach = (
                    None
                    if local is None
                    else {a: s for a, s in local.items() if s > told.get(a, -1)}
                )

    async def _read_through(self, cursor: int) -> tuple[dict[str, int], int]:
        """Everyone whose log grew after `cursor`, with their newest seq, page by page to the
        end; and the new cursor."""
        found: dict[str, int] = {}
        while True:
            page, cursor = await self.touched(cursor)
            if not page:
                return found, cursor
            found.update(page)


async def purge_old_events(store: Store, keep_s: float, batch: int) -> int:
    """Retention: delete events, and finished webhook deliveries, older than `keep_s`; each
    batch its own short transaction. Returns how many events went."""
    before = store.clock() - keep_s
    cutoff = await store.read(lambda conn: event_rows.written_before(conn, before))
    total = 0
    while True:

        def tx(conn: Connection) -> tuple[int, int]:
            return (
                event_rows.purge_before(conn, cutoff, batch),
                webhook_rows.purge_before(conn, before, batch),
            )

        purged, hooks_purged = await store.write(tx, lengthy=True)
        total += purged
        if purged < batch and hooks_purged < batch:
            return total
