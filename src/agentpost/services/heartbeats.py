"""Heartbeats: what keeps a session online while its agent says nothing.

A session is alive while it asks (`beat_asking`) or holds something open (`Heartbeat`); what it
holds open lasts only while its key stands (`check_standing`).
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

import anyio

from agentpost.domain.errors import key_turned_off
from agentpost.domain.models import Caller
from agentpost.store import agents as rows
from agentpost.store import keys as key_rows
from agentpost.store.database import Connection, Store


class _Beats:
    """Heartbeats due from this process's waiters, written together.

    Every commit wakes every waiter, so a write per waiter would have 1,000 parked long-polls
    wake each other a thousand times over every interval. Instead the first waiter due after
    the interval writes every pending session in one statement: one commit per interval.
    """

    def __init__(self) -> None:
        self.pending: set[str] = set()
        self.next_write = 0.0


_beats: WeakKeyDictionary[Store, _Beats] = WeakKeyDictionary()


class Heartbeat:
    """An open `wait`, event stream or subscription counts as a heartbeat of the caller's
    session, for as long as the key it was opened with stands.

    The waiter asks `timeout()` how long it may sleep, and calls `beat()` when it wakes: every
    `every_s` the session's heartbeat moves to now (in a batch with the other waiters'), so a
    long-poll of five minutes keeps its agent online without a request of its own; and the key
    is looked at, so a revoked one ends what it holds open within `every_s`. It is looked at
    sooner, at any wake, once accounts may have changed (`Store.accounts_version` moved, or
    cannot tell): revoking a key or disabling an agent wakes the agent's waiters
    (`wakeups.rouse`), so what they hold ends at once.
    """

    def __init__(self, store: Store, caller: Caller, every_s: float) -> None:
        self._store = store
        self._caller = caller
        self._session_id = caller.session_id
        self._every_s = every_s
        self._due = anyio.current_time() + every_s
        self._accounts = store.accounts_version()  # as the request was let in

    def follow(self, session_id: str | None) -> None:
        """Beat `session_id` from now on: the session the stream speaks for has changed (a
        2025-era MCP connection that `register` bound to a session of its own)."""
        if session_id is not None:
            self._session_id = session_id

    def timeout(self, remaining: float | None) -> float | None:
        if self._session_id is None:
            return remaining
        until_due = max(0.0, self._due - anyio.current_time())
        return until_due if remaining is None else min(remaining, until_due)

    async def beat(self) -> None:
        """When due: `unauthenticated` once the key no longer stands, else the heartbeat;
        before then, the standing alone, once accounts may have changed."""
        session_id = self._session_id
        if session_id is None or anyio.current_time() < self._due:
            await self._standing_if_changed()
            return
        now = anyio.current_time()
        self._due = now + self._every_s
        self._accounts = self._store.accounts_version()
        await check_standing(self._store, self._caller)
        beats = _beats.setdefault(self._store, _Beats())
        beats.pending.add(session_id)
        if now < beats.next_write:
            return  # written with the next batch, well within offline_after_s
        due, beats.pending = sorted(beats.pending), set()
        beats.next_write = now + self._every_s
        await self._store.write(lambda conn: rows.beat_sessions(conn, due, self._store.clock()))

    async def _standing_if_changed(self) -> None:
        if self._caller.key_id is None:
            return  # a local session: the OS user is the boundary
        version = self._store.accounts_version()
        if version is not None and version == self._accounts:
            return
        self._accounts = version
        await check_standing(self._store, self._caller)


def beat_asking(conn: Connection, session_id: str | None, now: float) -> None:
    """A session that asks is alive: a call whose answer turns on whether its session is live
    (a seat, a reservation) beats it in its own transaction. A local session beats every 15 s
    on a clock that stops while the machine sleeps: waking, its first call would else find its
    session gone, its seat or its reservations lapsed, and act on that."""
    if session_id is not None:
        rows.beat_sessions(conn, [session_id], now)


async def check_standing(store: Store, caller: Caller) -> None:
    """A long wait or event stream goes on only while the key it was opened with stands: once
    the key is revoked or its agent disabled (here or by another process), the next look ends
    it, before it hands over anything more."""
    key_id = caller.key_id
    if key_id is None:
        return  # a local session: the OS user is the boundary
    off = await store.glance(lambda conn: key_rows.turned_off(conn, key_id))
    if off is not None:  # refused as the key's next request would be, with the same reason
        raise key_turned_off(caller.agent, revoked=off == "revoked")
