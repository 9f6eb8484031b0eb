"""A running process whose SQLite file a newer agentpost migrated under it: it refuses every
call with the start's own refusal, and writes nothing with its old idea of the schema."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Connection, func, select

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.store import migrate
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
