"""The store: one handle on the database for the services, whichever database it is.

Services hand it synchronous transaction functions (`Connection -> T`); the store runs them in
a transaction on the right backend, wakes this process's waiters after each commit, and hears
other processes' commits through the change signal.

Waiters for one agent's news (`watch(agent)`) are woken only by the commits that concern that
agent, and by every commit of another process (see `store.wakeups`); `version` and
`wait_changed` still wake on every commit, for the few that want them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, TypeVar

import anyio.to_thread

# Re-exported: the transaction handle the services' functions take, so they need no SQLAlchemy.
from sqlalchemy import Connection as Connection
from sqlalchemy import Row as Row

from agentpost.domain.errors import AgentpostError
from agentpost.store import fulltext, migrate, sqlite
from agentpost.store.signal import ChangeSignal
from agentpost.store.sqlite_runner import SqliteRunner
from agentpost.store.wakeups import Reach, Wakeups, Watch

if TYPE_CHECKING:
    from agentpost.store.postgres import PostgresRunner

log = logging.getLogger(__name__)

T = TypeVar("T")
LISTEN_START_S = 5.0
"""How long opening a PostgreSQL store waits to hear the other replicas before it serves."""
LOOK_AFTER_S = 0.005
"""After this process's commit, how long the writer's next transaction may take to come and look
for another process's commit taken in with it, before a look is taken anyway."""
INDEX_AFTER_S = 1.0
"""How soon after this process's commits of news the full-text index takes in their mail."""
INDEX_PAUSE_S = 0.1
"""Between two steps of indexing a backlog (`fulltext.BATCH` messages each), the write lock is
left free this long, as between purge steps (`PURGE_PAUSE_S`): sends write meanwhile, this
process's at once, another process's writer at its next try."""
PURGE_EVERY_S = 300.0
"""How often at most the background merges the full-text index until no wiped word is left in
it: each merge rewrites the whole index, and with `clear_on_ack` every ack wipes."""
PURGE_PAUSE_S = 0.1
"""Between two purge steps, the write lock is left free this long. Another process's writer
waiting for it tries again every so often (SQLite's busy handler: at most every 100 ms);
with the steps back to back it all but never found the lock free, and waited out the whole
purge, a second on an index of 200,000 messages (docs/BENCHMARKS.md), its busy timeout on a
large one. This process's own writes run in the pause too, at once."""
Clock = Callable[[], float]


class ReplicaSignal:
    """PostgreSQL's change signal: this replica's commits, and the other replicas' as
    `LISTEN/NOTIFY` tells them (`store.postgres`), wake waiters at once. Every wait also ends
    within `poll_s`, so waiters look again: each second while the others cannot be heard (the
    listening connection is lost), rarely while they are."""

    def __init__(self) -> None:
        self.version = 0
        self.poll_s: float | None = None
        self._changed = asyncio.Event()

    def notify_local(self) -> None:
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_changed(self, since: int, timeout: float | None) -> int:
        if self.version <= since:
            poll = self.poll_s
            if poll is not None:
                timeout = poll if timeout is None else min(timeout, poll)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):  # not `wait_for`: see `PostgresRunner`
                    await self._changed.wait()
        return self.version

    async def aclose(self) -> None:
        """Nothing to release."""


async def _in_steps(
    runner: SqliteRunner, step: Callable[[Connection], bool], pause_s: float
) -> None:
    """`step`, each a lengthy write of its own, until it says none is left, with the write lock
    left free `pause_s` between two: writers here and in other processes go meanwhile."""
    more = True
    while more:
        more = await runner.write(step, lengthy=True, touches_accounts=False)
        if more:
            await asyncio.sleep(pause_s)


class Store:
    """Open with `await Store.open(url)`; close with `await store.aclose()`."""

    def __init__(self, url: str, clock: Clock) -> None:
        self.url = url
        self.clock = clock
        self.dialect: ModuleType
        self._sqlite: SqliteRunner | None = None
        self._postgres: PostgresRunner | None = None
        # SQLite swaps in the file's change signal on start; both wake waiters after commits.
        self._signal: ChangeSignal | ReplicaSignal = ReplicaSignal()
        self._wakeups = Wakeups()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._look_timer: asyncio.TimerHandle | None = None
        self._looks_before = 0
        self._changed_at = 0.0
        self._index_timer: asyncio.TimerHandle | None = None
        self._indexing: asyncio.Task[None] | None = None
        self._indexing_one = asyncio.Lock()  # one indexing at a time (see `index_for_search`)
        self._purge_timer: asyncio.TimerHandle | None = None
        self._purging = asyncio.Lock()  # one purge at a time (see `purge_wiped`)
        self._purged_at = -math.inf  # loop time of the background's last purge
        self._listening: asyncio.Task[None] | None = None
        self._hears_replicas = False

    @classmethod
    async def open(cls, url: str, *, clock: Clock = time.time) -> Store:
        store = cls(url, clock)
        await store._start()
        return store

    @property
    def is_sqlite(self) -> bool:
        return self.url.startswith("sqlite")

    @property
    def hears_other_processes(self) -> bool:
        """Whether another process's commit wakes this one's watches (SQLite's change signal,
        PostgreSQL's LISTEN/NOTIFY); where not (PostgreSQL while its listening connection is
        lost), waits end within a poll instead."""
        return self._postgres is None or self._hears_replicas

    @property
    def path(self) -> Path | None:
        return sqlite.database_path(self.url) if self.is_sqlite else None

    async def _start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self.is_sqlite:
            path = sqlite.database_path(self.url)
            sqlite.prepare_file(path)
            with sqlite.kept_at(path):
                migrate.migrate_sqlite(path)
            self.dialect = sqlite
            runner = SqliteRunner(
                path,
                on_commit=self._committed,
                on_foreign=lambda: self._on_loop(self._foreign),  # on either thread
                commit_loop=self._loop,
                on_writer_busy=self._writer_busy,
            )
            self._sqlite = runner
            signal = ChangeSignal(
                path, on_change=self._file_changed, own_writes=lambda: runner.batches_begun
            )
            try:
                await signal.start()
            except BaseException:
                await anyio.to_thread.run_sync(runner.close)
                raise
            self._signal = signal
        else:
            # Imported here: asyncpg and SQLAlchemy's asyncio layer cost a SQLite start nothing.
            from agentpost.store import postgres

            self.dialect = postgres
            self._hearing(False)  # until the other replicas are heard, waits end within a poll
            self._postgres = postgres.PostgresRunner(
                self.url,
                on_commit=self._committed,
                on_foreign=self._heard_elsewhere,
                on_hearing=self._hearing,
            )
            try:
                await self._postgres.check_database()
                with postgres.unavailable_when_unreachable():
                    await migrate.migrate_postgres(self._postgres.engine)
            except BaseException:
                await self._postgres.aclose()
                raise
            first_try = asyncio.Event()
            self._listening = asyncio.create_task(self._postgres.listen(first_try))
            try:
                with contextlib.suppress(TimeoutError):  # polling meanwhile; it goes on trying
                    async with asyncio.timeout(LISTEN_START_S):
                        await first_try.wait()
            except BaseException:  # cancelled while opening: leave no task nor connection
                self._listening.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._listening
                await self._postgres.aclose()
                raise

    async def write(
        self,
        fn: Callable[[Connection], T],
        *,
        lengthy: bool = False,
        touches_accounts: bool = True,
    ) -> T:
        """Run `fn` in a write transaction (SQLite: `BEGIN IMMEDIATE`, batched with others).

        `lengthy`: the transaction may take long (a sweep's batch): on SQLite it then never
        runs on the event loop, which a small one does when it can, and commits alone, never
        with the small writes asked for beside it (see `store.sqlite_runner`).
        `touches_accounts=False` promises that `fn` changes nothing authentication reads for
        an existing key: no key, no agent's standing or trust, no session, no lockout (a send,
        which at most creates an agent of the roster, with no key yet): `accounts_version`
        then stays as it was."""
        if self._sqlite is not None:
            return await self._sqlite.write(fn, lengthy=lengthy, touches_accounts=touches_accounts)
        assert self._postgres is not None
        return await self._postgres.write(fn)

    def accounts_version(self) -> int | None:
        """A number that stays the same only while no key, agent, session or lockout can have
        changed: every commit of this process but those that promised not to touch accounts,
        and every commit of another process, makes it grow (another process's is looked for
        right now). None when that cannot be told at once: the writer thread is in the middle
        of a write, or the store is PostgreSQL, whose other replicas commit unseen.

        What was read from accounts while the number stood at N still holds while it does."""
        if self._sqlite is None:
            return None
        if self._sqlite.look_here() is None:
            return None
        return self._sqlite.accounts_version

    async def read(self, fn: Callable[[Connection], T]) -> T:
        if self._sqlite is not None:
            return await self._sqlite.read(fn)
        assert self._postgres is not None
        return await self._postgres.read(fn)

    async def schema_revision(self) -> str | None:
        """The schema revision the database holds (None: no agentpost schema there). A read
        like any other, so it also tells whether the database can be read at all. On
        PostgreSQL a newer one refuses every call from then on, as the replica's listening
        connection would on hearing the migration (`store.schema_watch`): a missed notice."""
        revision = await self.read(migrate.current_revision)
        if self._postgres is not None:
            self._postgres.saw_schema(revision)
        return revision

    async def refuses_writes(self) -> str | None:
        """Why the database takes no writes now though it answers reads (None: it takes
        them): a read-only file or file system, a full disk, a PostgreSQL standby."""
        if self._sqlite is not None:
            return await asyncio.to_thread(sqlite.refuses_writes, self._sqlite.path)
        from agentpost.store import postgres  # loaded only where PostgreSQL is used

        return await self.read(postgres.refuses_writes)

    async def glance(self, fn: Callable[[Connection], T]) -> T:
        """A read of a few indexed rows, done without a thread hand-off where that is cheaper."""
        if self._sqlite is not None:
            return await self._sqlite.glance(fn)
        return await self.read(fn)

    # -- full-text index -------------------------------------------------------------------------

    async def index_for_search(self) -> None:
        """Bring the full-text index up to the newest message: a search that follows finds
        all mail stored before it. (SQLite indexes in batches, see `store.fulltext`;
        PostgreSQL matches unindexed until scale-out.) With nothing new, it only glances:
        a search never waits for another process's write lock for nothing.

        One at a time: asked for while another runs (a search's and the background's), it
        waits for that one, which takes in the mail stored meanwhile too, and then mostly
        finds nothing left; run together, their steps would fill each other's pauses."""
        runner = self._sqlite
        if runner is None or not await runner.glance(fulltext.behind):
            return
        async with self._indexing_one:
            if not await runner.glance(fulltext.behind):
                return
            await _in_steps(runner, fulltext.index_new, INDEX_PAUSE_S)

    async def purge_wiped(self) -> None:
        """Merge the full-text index until no word of wiped or purged mail is left in the
        file (SQLite, see `store.fulltext`). PostgreSQL keeps the old row and its index
        entries until VACUUM, and the space freed then is not zeroed: see docs/CONFIG.md.

        One at a time: a purge asked for while another runs (the sweep's and the background's)
        waits for it, and then finds nothing left; run together, their steps would alternate,
        each in the other's pause (`PURGE_PAUSE_S`), which other processes would wait out."""
        async with self._purging:
            await self._purge_alone()

    async def _purge_alone(self) -> None:
        if self._sqlite is not None and await self._sqlite.glance(fulltext.wiped):
            # Each step, a lengthy write, has a checkpoint after it: the WAL stays small.
            await _in_steps(self._sqlite, fulltext.purge_step, PURGE_PAUSE_S)
            self._sqlite.checkpoints.truncate_soon()  # the WAL holds the pages as they were

    async def _purge_in_turn(self) -> None:
        """`purge_wiped` now, or once PURGE_EVERY_S has passed since the last (a timer)."""
        runner = self._sqlite
        if self._loop is None or runner is None or not await runner.glance(fulltext.wiped):
            return
        left = self._purged_at + PURGE_EVERY_S - self._loop.time()
        if left > 0:
            if self._purge_timer is None:
                self._purge_timer = self._loop.call_later(left, self._purge_due)
            return
        self._purged_at = self._loop.time()
        await self.purge_wiped()

    def _purge_due(self) -> None:
        self._purge_timer = None
        self._index_now()

    def _index_soon(self) -> None:
        if self._index_timer is None and self._loop is not None and self._sqlite is not None:
            self._index_timer = self._loop.call_later(INDEX_AFTER_S, self._index_now)

    def _index_now(self) -> None:
        self._index_timer = None
        if self._indexing is None or self._indexing.done():
            self._indexing = asyncio.ensure_future(self._index_quietly())

    async def _index_quietly(self) -> None:
        """In the background, where nobody awaits it: a failure is logged, and the next
        search tries again (and reports it, if it lasts)."""
        try:
            await self.index_for_search()
            await self._purge_in_turn()
        except AgentpostError:  # closing, or the file busy past the timeout
            log.debug("full-text indexing put off", exc_info=True)
        except Exception:
            log.warning("full-text indexing failed", exc_info=True)

    # -- change signal -------------------------------------------------------------------------

    def _on_loop(self, fn: Callable[..., None], *args: object) -> None:
        if self._loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting
            self._loop.call_soon_threadsafe(fn, *args)

    def _committed(self, concerned: Reach) -> None:
        """A commit of this process (on the loop): wake those it concerns, and whoever waits
        for every commit."""
        # The signal's reading of the file takes this commit in; if it moved, the writer looks
        # whether another process's commit came in with it (`_file_changed`).
        self._signal.notify_local()
        self._wakeups.publish(concerned)
        if concerned:  # news, so most likely new mail (the indexing's own commit concerns nobody)
            self._index_soon()

    def _file_changed(self, with_own_commit: bool) -> None:
        """The change signal saw the file change: the writer tells whose commit that was.

        A reading taken after this process's own commit most likely holds only that commit, and
        the writer's next transaction looks anyway (under load, at once); only when none comes
        within LOOK_AFTER_S of the latest such reading is the writer woken just to look."""
        runner = self._sqlite
        if runner is None or self._loop is None:
            return
        if not with_own_commit:
            runner.look_for_foreign()
            return
        self._looks_before = runner.looks_begun
        self._changed_at = self._loop.time()
        if self._look_timer is None:
            self._look_timer = self._loop.call_later(LOOK_AFTER_S, self._look_unless_looked)

    def _look_unless_looked(self) -> None:
        """One timer for a stream of commits: each commit's transaction looked for the
        readings before it, so only the latest reading may still want a look, once it is
        LOOK_AFTER_S old (sooner, it would only be done twice). The look is one PRAGMA on the
        writer's connection, right here when that is free: handed to the writer thread, it
        would cost a hand-off, and a write asked for meanwhile would queue behind it instead
        of running on the loop."""
        self._look_timer = None
        runner = self._sqlite
        if runner is None or self._loop is None or runner.looks_begun > self._looks_before:
            return
        left = self._changed_at + LOOK_AFTER_S - self._loop.time()
        if left > 0:
            self._look_timer = self._loop.call_later(left, self._look_unless_looked)
        elif runner.look_here() is None:  # the writer's connection is busy: the writer looks
            runner.look_for_foreign()

    def _writer_busy(self, busy: bool) -> None:
        """While the writer thread commits, each page it writes would wake the loop to look."""
        if isinstance(self._signal, ChangeSignal):
            self._signal.hold_events(busy)

    def _foreign(self) -> None:
        """Another process committed (the writer saw it): nobody knows whom it concerns."""
        if isinstance(self._signal, ChangeSignal):
            self._signal.changed_elsewhere()
        self._wakeups.wake_all()

    def _heard_elsewhere(self, concerned: Reach | None) -> None:
        """Another replica committed (its NOTIFY): wake whom it concerned (None: everyone)."""
        self._signal.notify_local()
        if concerned is None:
            self._wakeups.wake_all()
        else:
            self._wakeups.publish(concerned)

    def _hearing(self, hearing: bool) -> None:
        """The other replicas are heard from now on, or no longer. Either way every waiter
        looks again: what they committed unheard may concern it, and a wait begun without a
        poll must now end within one."""
        self._hears_replicas = hearing
        poll_s = self.dialect.HEARING_POLL_S if hearing else self.dialect.PG_POLL_S
        self._wakeups.poll_s = poll_s
        if isinstance(self._signal, ReplicaSignal):
            self._signal.poll_s = poll_s
        self._signal.notify_local()
        self._wakeups.wake_all()

    def watch(self, agent: str | None) -> Watch:
        """Register a waiter for `agent`'s news (None: for any news, i.e. any commit that wrote
        mail or events); register *before* looking, then `wait` on it. Use as a context
        manager."""
        return self._wakeups.watch(agent)

    def watching(self, agent: str) -> int:
        """How many watches of `agent`'s this process holds (its open waits and streams)."""
        return self._wakeups.watching(agent)

    def watch_following(self, agent_of: Callable[[], str]) -> Watch:
        """As `watch`, for whichever agent `agent_of()` names at each commit (a session that
        may take another name)."""
        return self._wakeups.watch_following(agent_of)

    @property
    def version(self) -> int:
        """Grows whenever this or another process may have committed."""
        return self._signal.version

    async def wait_changed(self, since: int, timeout: float | None) -> int:
        return await self._signal.wait_changed(since, timeout)

    def stop_waiting(self) -> None:
        """The process is shutting down: long-polls answer now (timed out), so the shutdown
        waits for no deadline and their clients go on to another replica at once."""
        self._wakeups.close()

    async def until_stopping(self) -> None:
        """Returns once `stop_waiting` was called: a stream held open with no deadline ends
        then, for its client to open it again elsewhere."""
        await self._wakeups.until_closed()

    async def aclose(self) -> None:
        for timer in (self._look_timer, self._index_timer, self._purge_timer):
            if timer is not None:
                timer.cancel()
        if self._indexing is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._indexing
        if self._listening is not None:
            self._listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listening
        if self._sqlite is not None:
            # Joining the threads waits for their last transactions: not on the event loop.
            await anyio.to_thread.run_sync(self._sqlite.close)
        if self._postgres is not None:
            await self._postgres.aclose()
        await self._signal.aclose()
        self._wakeups.wake_all()  # blocked waiters return now, and find the store closed
