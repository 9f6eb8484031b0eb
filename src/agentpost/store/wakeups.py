"""Who a commit concerns, and waking only the waiters it concerns.

A waiting long-poll, event stream or push loop only cares about its own agent's mail and
events. Waking every waiter on every commit costs waiters × commits looks at an inbox, which
is what a server holding a thousand waits spends its time on. So a write transaction notes
the agents it wrote news for (`concern`: the recipients of the deliveries and events it
wrote, collected on the connection beside the writes), and once it has committed the store
wakes only their watches (`Wakeups.publish`). On SQLite a commit made by another process is
seen through the file's change signal and tells nobody what it touched, so it wakes every watch
(`Wakeups.wake_all`); PostgreSQL replicas announce whom their commits concerned
(`store.postgres`), and wake only those.

No wake-up is lost: a waiter registers its `Watch` *before* it looks at the database, and a
wake-up that lands between its look and its `wait` is kept in the watch, so that `wait`
returns at once. A spurious wake-up only means "look again".

A watch of any news also keeps whom the commits since its last look concerned (`reach`), so
a watcher of everyone's news (push over HTTP, the webhook dispatcher) learns who has news
without reading the database for it, except after another process's commit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Self

from sqlalchemy import Connection

log = logging.getLogger(__name__)

_KEY = "agentpost.concerned"

Reach = Mapping[str, int]
"""Whom a commit concerned: each agent, with the newest event seq the commit wrote for them."""


# -- collecting, in the transaction (any thread) ---------------------------------------------------


def concern(conn: Connection, news: Iterable[tuple[str, int]]) -> None:
    """Note that this transaction wrote events (agent, seq) beside their mail: once it
    commits, those agents' waiters look again. Call it beside the write."""
    found: list[tuple[str, int]] | None = conn.info.get(_KEY)
    if found is None:
        conn.info[_KEY] = found = []
    found.extend((agent, seq) for agent, seq in news)


def rouse(conn: Connection, agents: Iterable[str]) -> None:
    """Wake these agents' waiters once this transaction commits, though it wrote them no news:
    their standing changed (a key revoked, the agent disabled), which a waiter looks at when
    it wakes (`services.heartbeats`), so what it holds open ends at once, not at its next
    heartbeat. (At seq 0, which no event has: a watcher of everyone's news, push or webhooks,
    is not woken, and tells nobody of news there is none of.)"""
    concern(conn, ((agent, 0) for agent in agents))


def noted(conn: Connection) -> int:
    """A mark to undo back to (`forget_since`) when a savepoint rolls back."""
    return len(conn.info.get(_KEY, ()))


def forget_since(conn: Connection, mark: int) -> None:
    """A rolled-back part of the transaction concerns nobody."""
    found: list[tuple[str, int]] | None = conn.info.get(_KEY)
    if found is not None:
        del found[mark:]


def take(conn: Connection) -> dict[str, int]:
    """Whom the transaction concerned, and start afresh (the connection outlives it)."""
    reach: dict[str, int] = {}
    for agent, seq in conn.info.pop(_KEY, ()):
        if seq > reach.get(agent, -1):
            reach[agent] = seq
    return reach


# -- waking, on the event loop ---------------------------------------------------------------------


def _expire(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Watch:
    """One waiter's registration: of one agent's news, or (`agent` None) of any news.

    Use it as a context manager around the waiter's whole loop: look, then `wait`, then look
    again. A wake-up that comes while the waiter is looking is kept for its next `wait`.
    """

    __slots__ = ("_future", "_reach", "_wakeups", "_woken", "agent", "agent_of")

    def __init__(
        self, wakeups: Wakeups, agent: str | None, agent_of: Callable[[], str] | None = None
    ) -> None:
        self._wakeups = wakeups
        self.agent = agent
        self.agent_of = agent_of
        self._woken = False
        self._future: asyncio.Future[None] | None = None
        self._reach: dict[str, int] | None = {}
        """Whom the commits since the last `reach()` concerned; None: unknown (another
        process committed)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._wakeups._remove(self)

    def reach(self) -> Reach | None:
        """Whom the commits that woke this watch since the last call concerned (None: it
        cannot be told, look at everything), and start afresh. Kept by watches of any news."""
        reach, self._reach = self._reach, {}
        return reach

    def _concerned(self, reach: Reach | None) -> None:
        if reach is None:
            self._reach = None
        elif self._reach is not None:
            for agent, seq in reach.items():
                if seq > self._reach.get(agent, -1):
                    self._reach[agent] = seq
        self.wake()

    @property
    def closing(self) -> bool:
        """The process is shutting down: a waiter with a deadline answers now, as timed out,
        rather than hold the shutdown until its deadline (`Wakeups.close` woke it once; look
        at this before each `wait`)."""
        return self._wakeups.closing

    def wake(self) -> None:
        self._woken = True
        future = self._future
        if future is not None and not future.done():
            future.set_result(None)

    async def wait(self, timeout: float | None) -> bool:
        """Until woken since the last `wait` (at once if that happened already) or `timeout`
        seconds passed; True when woken."""
        poll = self._wakeups.poll_s
        if poll is not None:
            timeout = poll if timeout is None else min(timeout, poll)
        if not self._woken and (timeout is None or timeout > 0):
            loop = asyncio.get_running_loop()
            future = self._future = loop.create_future()
            timer = None if timeout is None else loop.call_later(timeout, _expire, future)
            try:
                await future
            finally:
                self._future = None
                if timer is not None:
                    timer.cancel()
        else:
            await asyncio.sleep(0)  # a checkpoint all the same: a loop of waits never hogs it
        woken, self._woken = self._woken, False
        return woken


class Wakeups:
    """This process's watches, by agent. Lives on the event loop thread.

    `poll_s` bounds every wait where other processes' commits may go unheard (PostgreSQL,
    see `Store._hearing`): waiters then look again at least that often.
    """

    def __init__(self, poll_s: float | None = None) -> None:
        self.poll_s = poll_s
        self.closing = False
        self._closed = asyncio.Event()
        self._by_agent: dict[str, set[Watch]] = {}
        self._news: set[Watch] = set()
        self._following: set[Watch] = set()

    def watch(self, agent: str | None) -> Watch:
        """Register now, before looking: woken by commits concerning `agent` (None: by any
        commit that concerned someone, i.e. wrote news) and by other processes' commits."""
        watch = Watch(self, agent)
        self._add(watch)
        return watch

    def watch_following(self, agent_of: Callable[[], str]) -> Watch:
        """As `watch`, for whichever agent `agent_of()` names when a commit is published: a
        session that may take another name. Each commit asks it, so keep such watches few
        (one per local session)."""
        watch = Watch(self, None, agent_of)
        self._following.add(watch)
        return watch

    def publish(self, concerned: Reach) -> None:
        """This process committed news for `concerned`."""
        if not concerned:
            return
        for agent in concerned:
            for watch in self._by_agent.get(agent, ()):
                watch.wake()
        news = {agent: seq for agent, seq in concerned.items() if seq > 0}  # not `rouse`'s
        for watch in self._news if news else ():
            watch._concerned(news)
        for watch in self._following:
            assert watch.agent_of is not None
            try:
                named = watch.agent_of()
            except Exception:  # whoever it is cannot be told: let it look
                log.warning("a watch could not name its agent; waking it", exc_info=True)
                named = None
            if named is None or named in concerned:
                watch.wake()

    def wake_all(self) -> None:
        """Something committed that nobody can say the reach of (another process's commit)."""
        for watches in self._by_agent.values():
            for watch in watches:
                watch.wake()
        for watch in self._news:
            watch._concerned(None)
        for watch in self._following:
            watch.wake()

    def close(self) -> None:
        """Wake every watch once, with `closing` set: waiters with a deadline then answer
        (see `Watch.closing`); others look again and go on waiting."""
        self.closing = True
        self._closed.set()
        self.wake_all()

    async def until_closed(self) -> None:
        """Returns once `close` was called: for what is held open with no deadline."""
        await self._closed.wait()

    def watching(self, agent: str | None) -> int:
        """How many watches `agent` has (None: watches of any news)."""
        return len(self._news if agent is None else self._by_agent.get(agent, ()))

    def _add(self, watch: Watch) -> None:
        if watch.agent is None:
            self._news.add(watch)
        else:
            self._by_agent.setdefault(watch.agent, set()).add(watch)

    def _remove(self, watch: Watch) -> None:
        if watch.agent is None:
            self._news.discard(watch)
            self._following.discard(watch)
            return
        watches = self._by_agent.get(watch.agent)
        if watches is not None:
            watches.discard(watch)
            if not watches:
                del self._by_agent[watch.agent]
