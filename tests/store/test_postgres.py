"""Replicas on one PostgreSQL database hear each other's commits (LISTEN/NOTIFY).

Each test opens two stores on the session's database, as two `agentpost serve` replicas
would. While a replica hears the others, its waits poll only every `HEARING_POLL_S` (30 s): a
wait that no NOTIFY reached would run into the tests' deadline first, so these tests fail when
the announcement is lost rather than pass a second later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator

import anyio
import asyncpg
import pytest
from sqlalchemy import Connection, select
from sqlalchemy.exc import TimeoutError as PoolTimeout

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.store import wakeups
from agentpost.store.database import Store
from agentpost.store.postgres import (
    HEARING_POLL_S,
    IDLE_IN_TRANSACTION_S,
    LISTENER_NAME,
    LOCK_TIMEOUT_S,
    MAX_ANNOUNCEMENT_BYTES,
    NEWS_CHANNEL,
    PostgresRunner,
    _Listening,
    announcements,
    heard,
    libpq_url,
    search,
    unavailable_when_unreachable,
)
from agentpost.store.schema import messages, rate_windows
from backends import (
    PG_ADMIN_URL,
    create_pg_database,
    drop_pg_database,
    pg_url,
    refuse_connections,
    refuse_writes,
)
from service_process import eventually as eventually_true

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

DEADLINE_S = 10
WRITE_LOCK_KEY = 0x61676E7477726974  # the store's write lock ("agntwrit")
assert DEADLINE_S < HEARING_POLL_S


@pytest.fixture
async def replicas(pg_session_database: str) -> AsyncIterator[tuple[Store, Store]]:
    first = await Store.open(pg_session_database)
    try:
        second = await Store.open(pg_session_database)
        try:
            yield first, second
        finally:
            await second.aclose()
    finally:
        await first.aclose()


def concerning(**news: int) -> Callable[[Connection], None]:
    """A write transaction whose commit concerns these agents (as a send to them does)."""

    def tx(conn: Connection) -> None:
        wakeups.concern(conn, news.items())

    return tx


async def eventually(check: Callable[[], bool]) -> None:
    with anyio.fail_after(DEADLINE_S):
        while not check():  # noqa: ASYNC110 - a state change of another task, polled briefly
            await anyio.sleep(0.02)


async def test_an_opened_replica_hears_the_others(replicas: tuple[Store, Store]) -> None:
    first, second = replicas
    assert first.hears_other_processes
    assert second.hears_other_processes


async def test_a_commit_on_one_replica_wakes_the_waiter_it_concerns_on_another(
    replicas: tuple[Store, Store],
) -> None:
    first, second = replicas
    with second.watch("bob") as bobs, anyio.fail_after(DEADLINE_S):
        await first.write(concerning(bob=7))
        assert await bobs.wait(None)


async def test_a_replica_learns_whom_another_replicas_commit_concerned(
    replicas: tuple[Store, Store],
) -> None:
    """The push loop and the webhook dispatcher read no log to learn who has news."""
    first, second = replicas
    with second.watch(None) as news, anyio.fail_after(DEADLINE_S):
        await first.write(concerning(bob=7, carol=8))
        assert await news.wait(None)
        assert news.reach() == {"bob": 7, "carol": 8}


async def test_a_commit_that_concerns_nobody_wakes_only_who_waits_for_every_change(
    replicas: tuple[Store, Store],
) -> None:
    """Leadership standing waits for any commit (a lease moved, say); mail waiters sleep on."""
    first, second = replicas
    version = second.version
    with second.watch("bob") as bobs, anyio.fail_after(DEADLINE_S):
        await first.write(concerning())
        assert await second.wait_changed(version, None) > version
        assert not await bobs.wait(0)


async def test_a_rolled_back_transaction_announces_nothing(
    replicas: tuple[Store, Store],
) -> None:
    first, second = replicas

    def refused(conn: Connection) -> None:
        wakeups.concern(conn, [("bob", 7)])
        raise RuntimeError("refused")

    with second.watch("bob") as bobs, second.watch("carol") as carols:
        with pytest.raises(RuntimeError):
            await first.write(refused)
        await first.write(concerning(carol=9))  # announced after the refused one would be
        with anyio.fail_after(DEADLINE_S):
            assert await carols.wait(None)
        assert not await bobs.wait(0)


async def test_a_replica_is_not_woken_again_by_its_own_announcement(
    replicas: tuple[Store, Store],
) -> None:
    """Its own commit woke its waiters already; each commit counts once."""
    first, second = replicas
    before = first.version
    await first.write(concerning(bob=7))
    with first.watch("carol") as carols, anyio.fail_after(DEADLINE_S):
        await second.write(concerning(carol=8))
        # Each connection hears in commit order: the echo of its own came first.
        assert await carols.wait(None)
    assert first.version == before + 2


@contextlib.asynccontextmanager
async def connected(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(database_url, timeout=5)
    try:
        yield conn
    finally:
        await conn.close()


async def terminate_listeners(database_url: str) -> int:
    """What a restart of the server, or a network gone, does to the listening connections."""
    async with connected(database_url) as conn:
        killed = await conn.fetch(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = $1 AND datname = current_database()",
            LISTENER_NAME,
        )
        return len(killed)


async def test_a_lost_listening_connection_is_opened_again_and_every_waiter_looks_again(
    replicas: tuple[Store, Store], pg_session_database: str
) -> None:
    first, second = replicas
    with second.watch("bob") as bobs, anyio.fail_after(DEADLINE_S):
        assert await terminate_listeners(pg_session_database) == 2
        # What was committed while nobody listened may concern bob: he looks again.
        assert await bobs.wait(None)
        await eventually(lambda: second.hears_other_processes)
        while await bobs.wait(0):  # the wake-ups of losing and hearing again
            pass
        await first.write(concerning(bob=7))
        assert await bobs.wait(None)


async def backends(database_url: str) -> int:
    """How many connections the database holds, but the one asking."""
    async with connected(database_url) as conn:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        )


async def test_a_lost_listening_connection_leaves_the_replica_no_more_connections_than_its_pool(
    fresh_pg_url: str,
) -> None:
    """Only the listening connection was lost (an idle timeout of the network in between, or
    `pg_terminate_backend`): the pooled ones it had, working or not, are replaced, never kept
    beside their replacements. A replica kept them open in a discarded pool until garbage
    collection, holding 20 idle connections where its pool keeps 10 (and more, under load,
    than the 21 that docs/SERVICE.md counts with), so the replicas of a server ran out of
    connections (`too many clients`)."""
    store = await Store.open(fresh_pg_url)
    try:

        def hold(conn: Connection) -> None:
            conn.exec_driver_sql("SELECT pg_sleep(0.5)")

        async def busy() -> None:  # the pool's 10 and its 10 more, all in use at once
            async with anyio.create_task_group() as group:
                for _ in range(20):
                    group.start_soon(store.read, hold)

        with anyio.fail_after(DEADLINE_S):
            async with anyio.create_task_group() as group:
                group.start_soon(busy)
                await anyio.sleep(0.2)
                assert await terminate_listeners(fresh_pg_url) == 1
            await eventually(lambda: store.hears_other_processes)
            await busy()
        assert await backends(fresh_pg_url) <= 10 + 1  # the pool's, and the listening one
    finally:
        await store.aclose()


@contextlib.asynccontextmanager
async def connections_refused(database_url: str) -> AsyncIterator[None]:
    """The database refuses new connections, and those it had are gone: the server restarting,
    as the replicas see it. Afterwards it takes connections again."""
    name = database_url.rsplit("/", 1)[1]
    async with connected(PG_ADMIN_URL) as admin:
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        try:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name
            )
            yield
        finally:
            await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')


async def test_while_the_others_cannot_be_heard_waits_end_within_a_poll_and_hearing_resumes(
    replicas: tuple[Store, Store], pg_session_database: str
) -> None:
    first, second = replicas
    with anyio.fail_after(DEADLINE_S):
        async with connections_refused(pg_session_database):
            await eventually(lambda: not second.hears_other_processes)
            with second.watch("bob") as bobs:
                while await bobs.wait(0):  # the wake-up of losing the others
                    pass
                # Nothing wakes it, and yet the wait ends, for its waiter to look again.
                assert not await bobs.wait(None)
        await eventually(lambda: second.hears_other_processes)
        with second.watch("bob") as bobs:
            await first.write(concerning(bob=7))  # the pool's lost connections are replaced
            assert await bobs.wait(None)


async def test_a_commit_concerning_a_whole_big_channel_names_each_agent_to_the_others(
    replicas: tuple[Store, Store],
) -> None:
    """Over several NOTIFYs when one cannot hold them all: the others wake no waiter more."""
    first, second = replicas
    members = {f"member-{n:04d}": n for n in range(1, 1_001)}  # seqs start at 1: 0 is a rouse
    heard_of: dict[str, int] = {}
    with second.watch(None) as news, anyio.fail_after(DEADLINE_S):
        await first.write(concerning(**members))
        while heard_of != members:
            assert await news.wait(None)
            reach = news.reach()
            assert reach is not None, "named, not everyone woken"
            heard_of.update(reach)


async def test_a_notification_agentpost_did_not_write_wakes_every_waiter(
    replicas: tuple[Store, Store], pg_session_database: str
) -> None:
    _, second = replicas
    with second.watch("bob") as bobs, anyio.fail_after(DEADLINE_S):
        async with connected(pg_session_database) as conn:
            await conn.execute("SELECT pg_notify($1, 'not ours')", NEWS_CHANNEL)
        assert await bobs.wait(None)


async def listeners(database_url: str) -> int:
    async with connected(database_url) as conn:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name = $1 AND datname = current_database()",
            LISTENER_NAME,
        )
        return count


async def test_a_closed_replica_leaves_no_listening_connection_and_opens_no_other(
    pg_session_database: str,
) -> None:
    before = await listeners(pg_session_database)
    store = await Store.open(pg_session_database)
    assert await listeners(pg_session_database) == before + 1
    await store.aclose()

    async def gone() -> bool:
        return await listeners(pg_session_database) == before

    await eventually_true(gone, DEADLINE_S)
    with pytest.raises(AgentpostError) as refused:
        await store.read(lambda conn: None)
    assert refused.value.code is ErrorCode.UNAVAILABLE


def test_an_announcement_names_whom_the_commit_concerned() -> None:
    assert [heard(p) for p in announcements("r1", {"bob": 7})] == [("r1", {"bob": 7})]
    assert [heard(p) for p in announcements("r1", {})] == [("r1", {})]


def test_a_commit_concerning_many_is_announced_in_payloads_postgresql_takes() -> None:
    many = {f"agent-{n:05d}": n for n in range(1_000)}
    payloads = announcements("r1", many)
    assert len(payloads) > 1
    assert all(len(p.encode()) <= MAX_ANNOUNCEMENT_BYTES for p in payloads)
    named: dict[str, int] = {}
    for payload in payloads:
        replica, concerned = heard(payload)
        assert replica == "r1"
        assert concerned is not None
        named.update(concerned)
    assert named == many


def test_a_commit_concerning_too_many_to_name_is_announced_as_concerning_everyone() -> None:
    many = {f"agent-{n:05d}": n for n in range(20_000)}
    assert [heard(p) for p in announcements("r1", many)] == [("r1", None)]


@pytest.mark.parametrize(
    "payload", ["", "not json", "[1]", '["r1", {"bob": "7"}]', "{}", "[" * 5_000 + "]" * 5_000]
)
def test_a_notification_agentpost_did_not_write_concerns_everyone(payload: str) -> None:
    _, concerned = heard(payload)
    assert concerned is None


async def test_a_replica_that_froze_holding_the_write_lock_makes_the_others_unavailable_not_hang(
    replicas: tuple[Store, Store], pg_session_database: str
) -> None:
    """A paused VM, a network gone: the lock's holder neither commits nor goes away."""
    first, _ = replicas
    async with connected(pg_session_database) as frozen, frozen.transaction():
        await frozen.execute(f"SELECT pg_advisory_xact_lock({WRITE_LOCK_KEY})")
        with anyio.fail_after(LOCK_TIMEOUT_S + DEADLINE_S):
            with pytest.raises(AgentpostError) as refused:
                await first.write(concerning(bob=7))
    assert refused.value.code is ErrorCode.UNAVAILABLE
    assert "pg_advisory" not in refused.value.message  # no statement told to the caller
    await first.write(concerning(bob=7))  # and once it is released, writes go on


async def test_postgresql_ends_a_transaction_left_idle_by_a_frozen_replica(
    replicas: tuple[Store, Store],
) -> None:
    first, _ = replicas

    def setting(conn: Connection) -> str:
        return str(conn.exec_driver_sql("SHOW idle_in_transaction_session_timeout").scalar())

    assert await first.read(setting) == f"{IDLE_IN_TRANSACTION_S}s"


async def test_a_database_restart_fails_no_waiter_that_looks_again(
    replicas: tuple[Store, Store], pg_session_database: str
) -> None:
    """Every connection of the database ends at once: the waiters wake to look again, on
    connections that work, not on the pool's dead ones."""
    _, second = replicas
    async with connected(pg_session_database) as conn:
        with second.watch("bob") as bobs, anyio.fail_after(DEADLINE_S):
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            assert await bobs.wait(None)
            assert await second.read(lambda c: c.exec_driver_sql("SELECT 1").scalar()) == 1


def test_no_free_pooled_connection_in_time_is_unavailable_not_a_crash() -> None:
    """Every pooled connection waiting on a frozen replica's lock: the next request, and the
    webhook dispatcher's next look, must hear `unavailable`, which they retry."""
    with pytest.raises(AgentpostError) as refused, unavailable_when_unreachable():
        raise PoolTimeout("QueuePool limit of size 10 overflow 10 reached")
    assert refused.value.code is ErrorCode.UNAVAILABLE


async def test_a_database_that_refuses_connections_is_unavailable_not_a_crash(
    fresh_pg_url: str,
) -> None:
    """Connecting refused (the database closed to connections, dropped, or its password
    changed): every read and write hears `unavailable`, the answer a replica's clients retry,
    until the database takes connections again."""
    store = await Store.open(fresh_pg_url)
    try:
        await refuse_connections(fresh_pg_url)
        try:
            for attempt in (store.read, store.write):
                with pytest.raises(AgentpostError) as refused:
                    await attempt(lambda c: c.exec_driver_sql("SELECT 1").scalar())
                assert refused.value.code is ErrorCode.UNAVAILABLE
                assert refused.value.message == "the database is unreachable"
        finally:
            await refuse_connections(fresh_pg_url, refuse=False)
        assert await store.read(lambda c: c.exec_driver_sql("SELECT 1").scalar()) == 1
    finally:
        await store.aclose()


async def test_a_database_that_refuses_writes_is_unavailable_and_keeps_nothing(
    fresh_pg_url: str,
) -> None:
    """A database that takes no write (a standby the URL now names after a failover, or one
    set read-only): every write is `unavailable` and leaves nothing, not an internal error;
    reads go on, and writes are taken again once the database takes them."""
    store = await Store.open(fresh_pg_url)

    def insert(key: str) -> Callable[[Connection], None]:
        def tx(conn: Connection) -> None:
            conn.execute(rate_windows.insert().values(key=key, window_start=0.0, count=1))

        return tx

    def keys(conn: Connection) -> set[str]:
        return set(conn.execute(select(rate_windows.c.key)).scalars())

    try:
        await refuse_writes(fresh_pg_url)
        try:
            with pytest.raises(AgentpostError) as refused:
                await store.write(insert("refused"))
            assert refused.value.code is ErrorCode.UNAVAILABLE
            assert "read-only" in refused.value.message
            assert await store.read(keys) == set()
        finally:
            await refuse_writes(fresh_pg_url, refuse=False)
        await store.write(insert("taken"))
        assert await store.read(keys) == {"taken"}
    finally:
        await store.aclose()


async def end_pooled_connections(database_url: str) -> None:
    """What an idle timeout, a pooler or a database restart does to the connections a replica
    keeps in its pool; its listening connection stays, so nothing tells it. Returns once they
    are gone (PostgreSQL waits up to 5 s for each)."""
    async with connected(database_url) as conn:
        await conn.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND application_name <> $1",
            LISTENER_NAME,
        )


@pytest.mark.parametrize("attempt", ["read", "write"])
async def test_a_pooled_connection_the_server_ended_is_replaced_not_answered_unavailable(
    replicas: tuple[Store, Store], pg_session_database: str, attempt: str
) -> None:
    """The server ended the connections a replica kept in its pool, and nothing told the
    replica: its next read or write takes a fresh connection instead of failing the request
    it serves with `unavailable`."""
    first, _ = replicas
    assert await first.read(lambda c: c.exec_driver_sql("SELECT 1").scalar()) == 1  # pooled
    await end_pooled_connections(pg_session_database)
    ask = first.read if attempt == "read" else first.write
    assert await ask(lambda c: c.exec_driver_sql("SELECT 2").scalar()) == 2


def _plan(conn: Connection) -> str:
    """The plan of a search, with a scan of every message ruled out where another way exists
    (the planner scans a table this small whatever its indexes)."""
    query = search(select(messages.c.seq), messages, ["billing", "café"])
    sql = str(query.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
    conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
    return "\n".join(row[0] for row in conn.exec_driver_sql("EXPLAIN " + sql))


async def test_a_search_reads_the_index_of_the_words_not_every_message(
    pg_session_database: str,
) -> None:
    """Migration 0011 indexes the very expression a search matches (`postgres.document`):
    were the two to differ, a search would read every message again, and take seconds."""
    store = await Store.open(pg_session_database)
    try:
        plan = await store.read(_plan)
    finally:
        await store.aclose()
    assert "ix_messages_search" in plan, plan


@pytest.fixture
def ascii_letters_url() -> Iterator[str]:
    """A database whose character type is C: only ASCII letters are letters there."""
    name = create_pg_database("agentpost_ctype_c", "LOCALE 'C' ENCODING 'UTF8'")
    try:
        yield pg_url(name)
    finally:
        drop_pg_database(name)


def _ctype_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "LC_CTYPE" in r.getMessage()]


async def test_a_database_that_knows_only_ascii_letters_is_named_in_the_log_on_open(
    ascii_letters_url: str, pg_session_database: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Search breaks words at every other letter there; the owner is told how to mend it."""
    caplog.set_level(logging.WARNING, logger="agentpost.store.postgres")
    await (await Store.open(pg_session_database)).aclose()
    assert _ctype_warnings(caplog) == []
    await (await Store.open(ascii_letters_url)).aclose()
    (warning,) = _ctype_warnings(caplog)
    assert "LC_CTYPE is C" in warning
    assert "C.UTF-8" in warning


@pytest.fixture
def icu_c_url() -> Iterator[str]:
    """A database whose character type is C, its letters ICU's."""
    options = "LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C' ENCODING 'UTF8'"
    name = create_pg_database("agentpost_icu_c", options)
    try:
        yield pg_url(name)
    finally:
        drop_pg_database(name)


async def test_a_database_whose_letters_come_from_icu_is_not_named_though_its_ctype_is_c(
    icu_c_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """With the ICU provider, `datctype` C says nothing of what is a letter: ICU knows é."""
    caplog.set_level(logging.WARNING, logger="agentpost.store.postgres")
    await (await Store.open(icu_c_url)).aclose()
    assert _ctype_warnings(caplog) == []


@pytest.fixture
def latin1_url() -> Iterator[str]:
    name = create_pg_database("agentpost_latin1", "ENCODING 'LATIN1' LOCALE 'C'")
    try:
        yield pg_url(name)
    finally:
        drop_pg_database(name)


async def test_a_database_not_in_utf8_is_refused_on_open_and_left_alone(latin1_url: str) -> None:
    """It could not hold every message, and search folds text as PostgreSQL does only in
    UTF8: refused before anything is written, rather than every send failing later."""
    with pytest.raises(AgentpostError) as refused:
        await Store.open(latin1_url)
    assert refused.value.code is ErrorCode.UNAVAILABLE
    assert "encoding is LATIN1; agentpost needs UTF8" in refused.value.message
    conn = await asyncpg.connect(latin1_url)
    try:
        assert await conn.fetchval("SELECT to_regclass('alembic_version')") is None
    finally:
        await conn.close()


async def test_the_options_a_postgresql_url_carries_reach_the_connection(
    pg_session_database: str,
) -> None:
    """`sslmode`, `application_name` and the like, as libpq and every PostgreSQL tool read them:
    SQLAlchemy handed each to asyncpg as a keyword it does not take, and no replica started."""
    url = f"{pg_session_database}?sslmode=disable&application_name=agentpost-replica-7"
    store = await Store.open(url)
    try:

        def settings(conn: Connection) -> tuple[str, str]:
            name = conn.exec_driver_sql("SHOW application_name").scalar()
            lock = conn.exec_driver_sql("SHOW lock_timeout").scalar()
            return str(name), str(lock)

        assert await store.read(settings) == ("agentpost-replica-7", f"{LOCK_TIMEOUT_S}s")
    finally:
        await store.aclose()


async def test_a_url_asking_for_ssl_of_a_server_without_it_is_unavailable(
    pg_session_database: str,
) -> None:
    """Refused by the server, said as any database that cannot be reached is."""
    with pytest.raises(AgentpostError) as refused:
        await Store.open(f"{pg_session_database}?sslmode=require")
    assert refused.value.code is ErrorCode.UNAVAILABLE


async def test_the_listening_loop_ends_when_cancelled_as_it_is_stirred(
    pg_session_database: str,
) -> None:
    """On Python 3.11 `asyncio.wait_for` drops a cancellation that comes as what it waits for
    is done: the loop went on after its store's `aclose` cancelled it, and a test run hung at
    its end, its event loop waiting for the loop to end."""
    heard_nothing: Callable[[object], None] = lambda _: None  # noqa: E731
    runner = PostgresRunner(pg_session_database, heard_nothing, heard_nothing, heard_nothing)
    driver = await asyncpg.connect(libpq_url(pg_session_database))
    try:
        listening = _Listening(driver)
        loop = asyncio.create_task(runner._until_lost(listening))
        await asyncio.sleep(0.5)  # past its look at the revision: waiting to be stirred
        listening.stirred.set()
        loop.cancel()
        await asyncio.wait({loop}, timeout=5)
        assert loop.cancelled(), "the loop went on, cancelled"
    finally:
        loop.cancel()  # once more, should it have gone on: the test ends either way
        await driver.close()
        await runner.aclose()
