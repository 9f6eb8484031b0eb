"""A running process whose database a newer agentpost migrated under it: it refuses every call
with the start's own refusal, and writes nothing with its old idea of the schema. On SQLite it
finds out at another process's commit; on PostgreSQL by the migration's announcement, or by
reading the revision when no announcement came (its listener's keep-alive, `/ready`)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import anyio
import asyncpg
import pytest
from sqlalchemy import Connection, func, select

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.store import migrate, postgres
from agentpost.store.database import Store
from agentpost.store.schema import rate_windows

pytestmark = pytest.mark.anyio

NEWER = f"{int(migrate.SCHEMA_HEAD) + 1:04d}"
"""The revision a newer agentpost's next migration would bring."""


@contextlib.contextmanager
def another_connection(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection of another process's kind, committing when the block ends."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield conn
        conn.execute("COMMIT")
    finally:
        conn.close()


def migrate_as_a_newer_agentpost(path: Path) -> None:
    """What a future migration does: a column this agentpost does not know, and its revision."""
    with another_connection(path) as conn:
        conn.execute("ALTER TABLE tasks ADD COLUMN future_trust TEXT NOT NULL DEFAULT 'x'")
        conn.execute("UPDATE alembic_version SET version_num = ?", (NEWER,))


def insert_window(key: str) -> object:
    def tx(conn: Connection) -> None:
        conn.execute(rate_windows.insert().values(key=key, window_start=0.0, count=1))

    return tx


def windows(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("SELECT count(*) FROM rate_windows").fetchone()[0])


def count_windows(conn: Connection) -> int:
    return int(conn.execute(select(func.count()).select_from(rate_windows)).scalar_one())


async def start_refusal(path: Path) -> str:
    """What a process starting on the file now is told."""
    with pytest.raises(AgentpostError) as refused:
        await Store.open(f"sqlite:///{path}")
    return refused.value.message


async def test_a_write_after_a_newer_agentpost_migrated_the_file_is_refused_as_at_start(
    lite: Store,
) -> None:
    assert lite.path is not None
    await lite.write(insert_window("before"))
    migrate_as_a_newer_agentpost(lite.path)

    with pytest.raises(AgentpostError) as refused:
        await lite.write(insert_window("after"))
    assert refused.value.code is ErrorCode.UNAVAILABLE
    assert f"({NEWER}) is newer than this agentpost knows" in refused.value.message
    assert windows(lite.path) == 1


async def test_a_process_refused_while_it_runs_is_told_to_restart_where_a_start_is_told_to_upgrade(
    lite: Store,
) -> None:
    """The running process was told the start's way out, to upgrade agentpost: most often the
    newer agentpost that migrated the file is the one installed by now, and what the session
    needs is a restart, which nothing said."""
    assert lite.path is not None
    migrate_as_a_newer_agentpost(lite.path)
    with pytest.raises(AgentpostError) as refused:
        await lite.write(insert_window("after"))
    said = f"the database's schema ({NEWER}) is newer than this agentpost knows"
    assert refused.value.message == (
        f"{said} ({migrate.SCHEMA_HEAD}); a newer agentpost migrated it while this process ran;"
        " restart this process (the MCP server, the service) on the newer release"
    )
    assert await start_refusal(lite.path) == (
        f"{said} ({migrate.SCHEMA_HEAD}); upgrade agentpost to open it"
    )


async def test_once_refused_its_reads_and_glances_are_refused_too(lite: Store) -> None:
    assert lite.path is not None
    migrate_as_a_newer_agentpost(lite.path)
    with pytest.raises(AgentpostError):
        await lite.write(insert_window("after"))
    for ask in (lite.read, lite.glance, lite.write):
        with pytest.raises(AgentpostError) as refused:
            await ask(count_windows)
        assert refused.value.code is ErrorCode.UNAVAILABLE
        assert "is newer than this agentpost knows" in refused.value.message


async def test_a_look_for_another_process_s_commit_finds_the_migration_before_any_write(
    lite: Store,
) -> None:
    """A process that only reads learns of it too: the look the file's change signal asks
    for (here asked at once, as authentication does) sees the migration's commit."""
    assert lite.path is not None
    assert await lite.read(count_windows) == 0
    migrate_as_a_newer_agentpost(lite.path)
    lite.accounts_version()  # looks right now whether another process committed
    with pytest.raises(AgentpostError) as refused:
        await lite.read(count_windows)
    assert "is newer than this agentpost knows" in refused.value.message


async def test_a_change_of_the_schema_this_agentpost_knows_refuses_nothing(lite: Store) -> None:
    """An index made by another process moves the schema cookie too: the revision it reads
    then is one this code knows, and the process serves on."""
    assert lite.path is not None
    with another_connection(lite.path) as conn:
        conn.execute("CREATE INDEX somebodys_index ON rate_windows (count)")
    await lite.write(insert_window("after"))
    assert await lite.read(count_windows) == 1


# -- PostgreSQL replicas -------------------------------------------------------------------------

REFUSED_WITHIN_S = 10
WRITE_LOCK_KEY = 0x61676E7477726974  # the store's write lock ("agntwrit")


@contextlib.asynccontextmanager
async def pg_replica(url: str, keep_alive_s: float) -> AsyncIterator[Store]:
    """A replica of this agentpost whose listener reads the revision, as its keep-alive,
    every `keep_alive_s` seconds."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(postgres, "LISTEN_CHECK_S", keep_alive_s)
        opened = await Store.open(url)
        try:
            yield opened
        finally:
            await opened.aclose()


@pytest.fixture
async def replica(fresh_pg_url: str) -> AsyncIterator[Store]:
    """A replica alone on a database of its own, its listener's keep-alive put off past the
    test's end: what it finds out, it finds out another way."""
    async with pg_replica(fresh_pg_url, keep_alive_s=3600.0) as opened:
        yield opened


async def on_pg(url: str, *statements: tuple[str, ...]) -> None:
    """The statements in one transaction, on a connection of another process's kind."""
    conn = await asyncpg.connect(postgres.libpq_url(url))
    try:
        async with conn.transaction():
            for statement, *args in statements:
                await conn.execute(statement, *args)
    finally:
        await conn.close()


def announcement(revision: str) -> tuple[str, ...]:
    """A migration's announcement to the replicas, as `migrate.migrate_postgres` makes it."""
    return ("SELECT pg_notify($1, $2)", postgres.NEWS_CHANNEL, f'{{"migrated":"{revision}"}}')


async def migrate_pg_as_a_newer_agentpost(url: str, *, announced: bool) -> None:
    """What a newer agentpost's start does: a column this agentpost does not know and its
    revision, announced at the commit; or not announced, as one a replica did not hear."""
    await on_pg(
        url,
        ("ALTER TABLE tasks ADD COLUMN future_trust TEXT NOT NULL DEFAULT 'x'",),
        ("UPDATE alembic_version SET version_num = $1", NEWER),
        *([announcement(NEWER)] if announced else []),
    )


async def pg_windows(url: str) -> int:
    conn = await asyncpg.connect(postgres.libpq_url(url))
    try:
        return int(await conn.fetchval("SELECT count(*) FROM rate_windows"))
    finally:
        await conn.close()


async def refused_at_last(ask: Callable[[], Awaitable[object]]) -> AgentpostError:
    """The refusal `ask()` meets once the replica found out, asked again till then."""
    with anyio.fail_after(REFUSED_WITHIN_S):
        while True:
            try:
                await ask()
            except AgentpostError as refusal:
                return refusal
            await anyio.sleep(0.02)


@pytest.mark.postgres
async def test_a_replica_that_hears_a_migration_announced_refuses_every_call_and_writes_nothing(
    replica: Store, fresh_pg_url: str
) -> None:
    await replica.write(insert_window("before"))
    await migrate_pg_as_a_newer_agentpost(fresh_pg_url, announced=True)

    refusal = await refused_at_last(lambda: replica.read(count_windows))
    assert refusal.code is ErrorCode.UNAVAILABLE
    assert refusal.message == (
        f"the database's schema ({NEWER}) is newer than this agentpost knows"
        f" ({migrate.SCHEMA_HEAD}); a newer agentpost migrated it while this process ran;"
        " restart this process (the MCP server, the service) on the newer release"
    )
    for ask in (
        lambda: replica.write(insert_window("after")),
        lambda: replica.glance(count_windows),
        replica.schema_revision,
    ):
        with pytest.raises(AgentpostError) as refused:
            await ask()
        assert refused.value.message == refusal.message
    assert await pg_windows(fresh_pg_url) == 1


@pytest.mark.postgres
async def test_a_migration_the_replica_did_not_hear_is_found_by_its_listener_s_keep_alive(
    fresh_pg_url: str,
) -> None:
    async with pg_replica(fresh_pg_url, keep_alive_s=0.2) as replica:
        await migrate_pg_as_a_newer_agentpost(fresh_pg_url, announced=False)
        await refused_at_last(lambda: replica.read(count_windows))
        with pytest.raises(AgentpostError) as refused:
            await replica.write(insert_window("after"))
    assert f"({NEWER}) is newer than this agentpost knows" in refused.value.message
    assert await pg_windows(fresh_pg_url) == 0


@pytest.mark.postgres
async def test_a_migration_the_replica_did_not_hear_is_found_by_reading_the_revision_and_kept(
    replica: Store, fresh_pg_url: str
) -> None:
    """`/ready` reads the revision: from then on the replica refuses every call, as one that
    heard the migration does, where it answered unready and served whatever was sent to it."""
    await anyio.sleep(0.2)  # the listener's first look, as it starts, is over
    await migrate_pg_as_a_newer_agentpost(fresh_pg_url, announced=False)
    await replica.write(insert_window("unheard"))  # nothing told it yet
    assert await replica.schema_revision() == NEWER
    with pytest.raises(AgentpostError) as refused:
        await replica.write(insert_window("after"))
    assert f"({NEWER}) is newer than this agentpost knows" in refused.value.message
    with pytest.raises(AgentpostError):
        await replica.schema_revision()
    assert await pg_windows(fresh_pg_url) == 1


@pytest.mark.postgres
async def test_a_waiter_on_a_replica_that_hears_a_migration_is_woken_to_be_refused(
    replica: Store, fresh_pg_url: str
) -> None:
    woken = []
    with replica.watch("alice") as watch, anyio.fail_after(REFUSED_WITHIN_S):
        async with anyio.create_task_group() as group:

            async def wait() -> None:
                woken.append(await watch.wait(60.0))

            group.start_soon(wait)
            await anyio.sleep(0.2)
            await migrate_pg_as_a_newer_agentpost(fresh_pg_url, announced=True)
    assert woken == [True]
    with pytest.raises(AgentpostError):
        await replica.read(count_windows)


@pytest.mark.postgres
async def test_a_migration_to_a_revision_this_agentpost_knows_refuses_nothing(
    replica: Store, fresh_pg_url: str
) -> None:
    """As a replica of this release announces, having migrated an older database."""
    await on_pg(fresh_pg_url, announcement(migrate.SCHEMA_HEAD))
    await anyio.sleep(0.2)
    await replica.write(insert_window("after"))
    assert await replica.read(count_windows) == 1


@pytest.mark.postgres
async def test_a_write_that_waited_for_the_lock_while_the_replica_heard_a_migration_writes_nothing(
    replica: Store, fresh_pg_url: str
) -> None:
    refusals: list[AgentpostError] = []

    async def write() -> None:
        try:
            await replica.write(insert_window("waited"))
        except AgentpostError as refusal:
            refusals.append(refusal)

    holder = await asyncpg.connect(postgres.libpq_url(fresh_pg_url))
    try:
        held = holder.transaction()
        await held.start()
        await holder.execute(f"SELECT pg_advisory_xact_lock({WRITE_LOCK_KEY})")
        async with anyio.create_task_group() as group:
            group.start_soon(write)
            await anyio.sleep(0.3)  # it waits for the write lock
            await migrate_pg_as_a_newer_agentpost(fresh_pg_url, announced=True)
            await refused_at_last(lambda: replica.read(count_windows))
            await held.rollback()  # the lock is free: the write goes on
    finally:
        await holder.close()
    [refusal] = refusals
    assert f"({NEWER}) is newer than this agentpost knows" in refusal.message
    assert await pg_windows(fresh_pg_url) == 0
