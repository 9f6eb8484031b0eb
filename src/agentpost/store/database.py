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
    """What PostgreSQL has until LISTEN/NOTIFY (scale-out): this process's commits wake
    waiters at once, and every wait ends within `PG_POLL_S`, so waiters look again and see
    other processes' commits too."""

    def __init__(self) -> None:
        self.version = 0
        self._changed = asyncio.Event()

    def notify_local(self) -> None:
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_changed(self, since: int, timeout: float | None) -> int:
        if self.version <= since:
            poll = PG_POLL_S if timeout is None else min(timeout, PG_POLL_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), poll)
        return self.version

    async def aclose(self) -> None:
        """Nothing to release."""


class Store:
    """Open with `await Store.open(url)`; close with `await store.aclose()`."""

    def __init__(self, url: str, clock: Clock) -> None:
        self.url = url
        self.clock = clock
        self.dialect: ModuleType
        self._sqlite: sqlite.SqliteRunner | None = None
        self._postgres: PostgresRunner | None = None
        # SQLite swaps in the file's change signal on start; both wake waiters after commits.
        self._signal: ChangeSignal | LocalSignal = LocalSignal()

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
            signal = ChangeSignal(path)
            await signal.start()
            self._signal = signal
            # Called on the writer thread; ChangeSignal.notify_local hands over to the loop.
            self._sqlite = sqlite.SqliteRunner(path, on_commit=signal.notify_local)
        else:
            # Imported here: asyncpg and SQLAlchemy's asyncio layer cost a SQLite start nothing.
            from agentpost.store import postgres

            self.dialect = postgres
            self._postgres = postgres.PostgresRunner(self.url, on_commit=self._signal.notify_local)
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
        return self._signal.version

    async def wait_changed(self, since: int, timeout: float | None) -> int:
        return await self._signal.wait_changed(since, timeout)

    async def aclose(self) -> None:
        if self._sqlite is not None:
            # Joining the threads waits for their last transactions: not on the event loop.
            await anyio.to_thread.run_sync(self._sqlite.close)
        if self._postgres is not None:
            await self._postgres.aclose()
        await self._signal.aclose()
