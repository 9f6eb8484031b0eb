"""The store: one handle on the database for the services, whichever database it is.

Services hand it synchronous transaction functions (`Connection -> T`); the store runs them in
a transaction on the right backend, wakes this process's waiters after each commit, and hears
other processes' commits through the change signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, TypeVar

import anyio.to_thread

# Re-exported: the transaction handle the services' functions take, so they need no SQLAlchemy.
from sqlalchemy import Connection as Connection
from sqlalchemy import Row as Row

from agentpost.store import migrate, sqlite
from agentpost.store.signal import ChangeSignal

if TYPE_CHECKING:
    from agentpost.store.postgres import PostgresRunner

T = TypeVar("T")
PG_POLL_S = 1.0
Clock = Callable[[], float]


class LocalSignal:
    """This process's commits only: what PostgreSQL has until LISTEN/NOTIFY (scale-out)."""

    def __init__(self) -> None:
        self.version = 0
        self._changed = asyncio.Event()

    def notify_local(self) -> None:
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_changed(self, since: int, timeout: float | None) -> int:
        if self.version <= since:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)
        return self.version


class Store:
    """Open with `await Store.open(url)`; close with `await store.aclose()`."""

    def __init__(self, url: str, clock: Clock) -> None:
        self.url = url
        self.clock = clock
        self.dialect: ModuleType
        self._sqlite: sqlite.SqliteRunner | None = None
        self._postgres: PostgresRunner | None = None
        self._signal: ChangeSignal | None = None
        self._local = LocalSignal()

    @classmethod
    async def open(cls, url: str, *, clock: Clock = time.time) -> Store:
        store = cls(url, clock)
        await store._start()
        return store

    @property
    def is_sqlite(self) -> bool:
        return self.url.startswith("sqlite")

    @property
    def path(self) -> Path | None:
        return sqlite.database_path(self.url) if self.is_sqlite else None

    async def _start(self) -> None:
        if self.is_sqlite:
            path = sqlite.database_path(self.url)
            sqlite.prepare_file(path)
            migrate.migrate_sqlite(path)
            self.dialect = sqlite
            self._signal = ChangeSignal(path)
            await self._signal.start()
            self._sqlite = sqlite.SqliteRunner(path, on_commit=self._committed_threadsafe)
        else:
            # Imported here: asyncpg and SQLAlchemy's asyncio layer cost a SQLite start nothing.
            from agentpost.store import postgres

            self.dialect = postgres
            self._postgres = postgres.PostgresRunner(self.url, on_commit=self._committed)
            try:
                with postgres.unavailable_when_unreachable():
                    await migrate.migrate_postgres(self._postgres.engine)
            except BaseException:
                await self._postgres.aclose()
                raise

    async def write(self, fn: Callable[[Connection], T]) -> T:
        """Run `fn` in a write transaction (SQLite: `BEGIN IMMEDIATE`, batched with others)."""
        if self._sqlite is not None:
            return await self._sqlite.write(fn)
        assert self._postgres is not None
        return await self._postgres.write(fn)

    async def read(self, fn: Callable[[Connection], T]) -> T:
        if self._sqlite is not None:
            return await self._sqlite.read(fn)
        assert self._postgres is not None
        return await self._postgres.read(fn)

    async def glance(self, fn: Callable[[Connection], T]) -> T:
        """A read of a few indexed rows, done without a thread hand-off where that is cheaper."""
        if self._sqlite is not None:
            return await self._sqlite.glance(fn)
        return await self.read(fn)

    # -- change signal -------------------------------------------------------------------------

    @property
    def version(self) -> int:
        """Grows whenever this or another process may have committed."""
        return self._signal.version if self._signal else self._local.version

    async def wait_changed(self, since: int, timeout: float | None) -> int:
        if self._signal is not None:
            return await self._signal.wait_changed(since, timeout)
        # PostgreSQL has no cross-process signal yet (LISTEN/NOTIFY comes with scale-out): wake
        # at least every second, so waiters look again and see other processes' commits.
        poll = PG_POLL_S if timeout is None else min(timeout, PG_POLL_S)
        return await self._local.wait_changed(since, poll)

    def _committed(self) -> None:
        self._local.notify_local()

    def _committed_threadsafe(self) -> None:
        # Called on the writer thread; waiters live on the event loop.
        assert self._signal is not None
        self._signal.notify_threadsafe()

    async def aclose(self) -> None:
        if self._sqlite is not None:
            # Joining the threads waits for their last transactions: not on the event loop.
            await anyio.to_thread.run_sync(self._sqlite.close)
        if self._postgres is not None:
            await self._postgres.aclose()
        if self._signal is not None:
            await self._signal.aclose()
