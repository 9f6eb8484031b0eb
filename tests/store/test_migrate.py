"""Migrations: an empty database reaches the head schema, once, however many start at once."""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio
import asyncpg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, create_engine, inspect, text
from sqlalchemy.ext.asyncio import create_async_engine

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.store import migrate
from agentpost.store.database import Store
from agentpost.store.postgres import NEWS_CHANNEL, libpq_url
from agentpost.store.schema import metadata

T = TypeVar("T")

pytestmark = pytest.mark.anyio


def _default(value: str | None) -> str | None:
    """A server default as both dialects spell it: no casts, quotes or brackets; 0/1 booleans."""
    if value is None:
        return None
    bare = re.sub(r"::[a-z ]+$", "", value.strip()).strip("()'\"")
    return {"false": "0", "true": "1"}.get(bare, bare)


def _differs(
    _context: Any,
    _inspected_column: Any,
    _metadata_column: Any,
    inspected: str | None,
    _metadata_default: Any,
    rendered: str | None,
) -> bool:
    return _default(inspected) != _default(rendered)


def _not_fts(_obj: Any, name: str | None, type_: str, _reflected: bool, _compare_to: Any) -> bool:
    """Each database's own full-text index stands outside the schema module: SQLite's FTS5
    tables, PostgreSQL's index of the words (`test_postgresql_search_reads_its_index`)."""
    if type_ == "index" and name == "ix_messages_search":
        return False
    return not (type_ == "table" and (name or "").startswith("messages_fts"))


def schema_diff(conn: Connection) -> list[Any]:
    context = MigrationContext.configure(
        conn,
        opts={
            "compare_type": True,
            "compare_server_default": _differs,
            "include_object": _not_fts,
        },
    )
    return list(compare_metadata(context, metadata))


def _asyncpg_url(url: str) -> str:
    """SQLAlchemy's name for a test's PostgreSQL database (the store itself connects through
    asyncpg's own parser, `libpq_url`, which reads the URL's options)."""
    return "postgresql+asyncpg://" + libpq_url(url).removeprefix("postgresql://")


async def migrated_diff(url: str) -> list[Any]:
    if url.startswith("sqlite"):
        engine = create_engine(url)
        try:
            with engine.connect() as conn:
                return schema_diff(conn)
        finally:
            engine.dispose()
    async_engine = create_async_engine(_asyncpg_url(url))
    try:
        async with async_engine.connect() as conn:
            return await conn.run_sync(schema_diff)
    finally:
        await async_engine.dispose()


async def revision(url: str) -> str | None:
    store = await Store.open(url)
    try:
        return await store.read(migrate.current_revision)
    finally:
        await store.aclose()


async def test_opening_an_empty_database_migrates_it_to_the_head_schema(
    fresh_database_url: str,
) -> None:
    assert await revision(fresh_database_url) == migrate.SCHEMA_HEAD
    assert await migrated_diff(fresh_database_url) == []


async def inspected(url: str, look: Callable[[Connection], T]) -> T:
    """What `look` finds on a connection of its own to the database at `url`."""
    if url.startswith("sqlite"):
        engine = create_engine(url)
        with engine.connect() as conn:
            found = look(conn)
        engine.dispose()
        return found
    async_engine = create_async_engine(_asyncpg_url(url))
    async with async_engine.connect() as conn:
        found = await conn.run_sync(look)
    await async_engine.dispose()
    return found


async def test_the_schema_module_and_the_migrations_describe_the_same_tables(
    fresh_database_url: str,
) -> None:
    await revision(fresh_database_url)

    def tables(conn: Connection) -> set[str]:
        return {t for t in inspect(conn).get_table_names() if not t.startswith("messages_fts")}

    assert await inspected(fresh_database_url, tables) == {*metadata.tables, "alembic_version"}


def partial_indexes() -> dict[str, tuple[str, str]]:
    """The schema's partial indexes: name -> (table, the rows it holds, as SQLite says it)."""
    return {
        str(index.name): (table.name, str(index.dialect_options["sqlite"]["where"]))
        for table in metadata.tables.values()
        for index in table.indexes
        if index.dialect_options["sqlite"]["where"] is not None
    }


def test_each_partial_index_holds_the_same_rows_on_postgresql() -> None:
    from sqlalchemy.dialects import postgresql
    from sqlalchemy.schema import CreateIndex

    import agentpost.store.postgres  # noqa: F401  (it says the rows for PostgreSQL)

    indexes = {str(i.name): i for t in metadata.tables.values() for i in t.indexes}
    assert set(partial_indexes()) == {
        "ix_deliveries_expiry",
        "ix_messages_channel",
        "ux_messages_response",
    }
    for name, (_table, where) in partial_indexes().items():
        ddl = str(CreateIndex(indexes[name]).compile(dialect=postgresql.dialect()))
        assert ddl.endswith(f"WHERE {where}"), ddl


async def test_the_migrations_make_each_partial_index_partial(fresh_database_url: str) -> None:
    await revision(fresh_database_url)
    option = "sqlite_where" if fresh_database_url.startswith("sqlite") else "postgresql_where"

    def wheres(conn: Connection) -> dict[str, Any]:
        found = {}
        for name, (table, _where) in partial_indexes().items():
            (index,) = [i for i in inspect(conn).get_indexes(table) if i["name"] == name]
            where = index.get("dialect_options", {}).get(option)
            found[name] = None if where is None else str(where)
        return found

    found = await inspected(fresh_database_url, wheres)
    assert set(found) == set(partial_indexes())
    assert all(found.values()), found


def test_schema_head_is_the_newest_revision_in_the_migrations_folder() -> None:
    scripts = ScriptDirectory(str(migrate.MIGRATIONS))
    assert scripts.get_heads() == [migrate.SCHEMA_HEAD]


def test_a_sqlite_file_is_migrated_once_and_then_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "agentpost.db"
    from agentpost.store import sqlite

    sqlite.prepare_file(path)
    assert migrate.migrate_sqlite(path) is True
    assert migrate.migrate_sqlite(path) is False


def test_sqlite_full_text_search_is_created_with_the_schema(tmp_path: Path) -> None:
    path = tmp_path / "agentpost.db"
    from agentpost.store import sqlite

    sqlite.prepare_file(path)
    migrate.migrate_sqlite(path)
    engine = create_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        names = {
            row[0]
            for row in conn.execute(text("SELECT name FROM sqlite_master WHERE name LIKE '%fts%'"))
        }
    engine.dispose()
    assert {"messages_fts", "messages_fts_cursor", "messages_fts_ad", "messages_fts_au"} <= names
    assert "messages_fts_ai" not in names  # sends are indexed in batches (store.fulltext)


OPEN_ONCE = """
import anyio, sys
from agentpost.store.database import Store

async def main():
    store = await Store.open(sys.argv[1])
    await store.aclose()

anyio.run(main)
print("alembic" in sys.modules)
"""


def run_opens(url: str, count: int) -> list[subprocess.CompletedProcess[str]]:
    """`count` processes opening `url` at the same moment; their outcomes."""
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_ONCE, url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(count)
    ]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


async def test_opening_a_current_database_does_not_import_alembic(fresh_database_url: str) -> None:
    assert await revision(fresh_database_url) == migrate.SCHEMA_HEAD
    (second,) = run_opens(fresh_database_url, 1)
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "False"


async def test_many_processes_opening_a_fresh_database_at_once_all_start(
    fresh_database_url: str,
) -> None:
    outcomes = run_opens(fresh_database_url, 8)
    assert [o.returncode for o in outcomes] == [0] * 8, [o.stderr for o in outcomes]
    assert await revision(fresh_database_url) == migrate.SCHEMA_HEAD


def test_a_sqlite_file_in_rollback_journal_mode_is_switched_to_wal(tmp_path: Path) -> None:
    path = tmp_path / "agentpost.db"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA journal_mode=DELETE")
        db.execute("CREATE TABLE kept (x)")
    (opened,) = run_opens(f"sqlite:///{path}", 1)
    assert opened.returncode == 0, opened.stderr
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.fixture
def private_umask() -> Iterator[None]:
    """A permissive umask, as some shells have: privacy must not depend on the user's."""
    old = os.umask(0o002)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.usefixtures("private_umask")
async def test_the_database_file_and_its_folder_are_private_to_the_user(tmp_path: Path) -> None:
    folder = tmp_path / "home" / "agentpost"
    store = await Store.open(f"sqlite:///{folder / 'agentpost.db'}")
    try:
        await store.write(lambda conn: conn.execute(text("SELECT 1")))
        assert (folder / "agentpost.db").stat().st_mode & 0o777 == 0o600
        assert folder.stat().st_mode & 0o777 == 0o700
        # -wal and -shm hold the same data; the migration's lock file lies beside them
        companions = [*folder.glob("agentpost.db-*"), *folder.glob("agentpost.db.*")]
        assert folder / "agentpost.db.migrate-lock" in companions
        for companion in companions:
            assert companion.stat().st_mode & 0o077 == 0, companion
    finally:
        await store.aclose()


async def test_a_database_file_made_read_only_is_made_private_and_kept_read_only(
    tmp_path: Path,
) -> None:
    """Making it private takes others' access away and gives its owner none: a file the owner
    set read-only (an archived post office, say) stays so, rather than be written again."""
    path = tmp_path / "agentpost.db"
    store = await Store.open(f"sqlite:///{path}")
    await store.aclose()
    path.chmod(0o444)
    with contextlib.suppress(AgentpostError):  # unavailable but to root, who writes it anyway
        await (await Store.open(f"sqlite:///{path}")).aclose()
    assert path.stat().st_mode & 0o777 == 0o400


async def test_an_existing_database_file_is_made_private_again(tmp_path: Path) -> None:
    path = tmp_path / "agentpost.db"
    path.touch(mode=0o644)
    path.chmod(0o644)
    store = await Store.open(f"sqlite:///{path}")
    await store.aclose()
    assert path.stat().st_mode & 0o777 == 0o600


async def test_a_schema_newer_than_this_agentpost_knows_is_refused_with_the_way_out(
    fresh_database_url: str,
) -> None:
    """A newer replica migrated the database: an older one says so, and leaves it alone."""
    assert await revision(fresh_database_url) == migrate.SCHEMA_HEAD
    await inspected(fresh_database_url, _pretend_newer)
    with pytest.raises(AgentpostError) as refused:
        await Store.open(fresh_database_url)
    assert refused.value.code is ErrorCode.UNAVAILABLE
    assert "schema (9999) is newer than this agentpost knows" in refused.value.message
    assert "upgrade agentpost" in refused.value.message
    assert await inspected(fresh_database_url, migrate.current_revision) == "9999"


def _pretend_newer(conn: Connection) -> None:
    conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    conn.commit()


async def test_an_upgrade_moves_the_schema_cookie_even_when_it_changes_only_data(
    tmp_path: Path,
) -> None:
    """0020 changes only data: without a move of the cookie, an older process on the file
    would not look at the revision, and write on as if the file were its own."""
    from store.test_fulltext import alembic_on

    path = tmp_path / "agentpost.db"
    await (await Store.open(f"sqlite:///{path}")).aclose()
    alembic_on(path, "downgrade", "0019")
    with contextlib.closing(sqlite3.connect(path)) as conn:
        before = conn.execute("PRAGMA schema_version").fetchone()[0]
    assert migrate.migrate_sqlite(path) is True
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA schema_version").fetchone()[0] != before
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert "agentpost_upgraded" not in tables


def test_the_known_revisions_are_the_migration_files() -> None:
    assert migrate.SCHEMA_HEAD in migrate.known_revisions()
    assert len(migrate.known_revisions()) == int(migrate.SCHEMA_HEAD)


async def migrate_to(url: str, target: str, *, back: bool = False) -> None:
    """Alembic's upgrade to `target` on the database at `url`, as a start would run it (its
    downgrade, going `back`)."""
    if url.startswith("sqlite"):
        from agentpost.store import sqlite
        from store.test_fulltext import alembic_on

        path = Path(url.removeprefix("sqlite:///"))
        sqlite.prepare_file(path)
        alembic_on(path, "downgrade" if back else "upgrade", target)
        return

    def move(conn: Connection) -> None:
        (migrate.downgrade if back else migrate.upgrade)(conn, target)

    async_engine = create_async_engine(_asyncpg_url(url))
    try:
        async with async_engine.begin() as conn:
            await conn.run_sync(move)
    finally:
        await async_engine.dispose()


@pytest.mark.postgres
async def test_a_postgresql_migration_is_announced_to_the_replicas_running_on_the_database(
    fresh_pg_url: str,
) -> None:
    """The replicas already listen on the channel of commits: an older one hears that the
    schema moved under it (`store.schema_watch`). A start that migrates nothing says nothing."""
    heard: list[str] = []
    came = anyio.Event()

    def hear(*news: Any) -> None:
        heard.append(news[-1])
        came.set()

    listening = await asyncpg.connect(libpq_url(fresh_pg_url))
    try:
        await listening.add_listener(NEWS_CHANNEL, hear)
        await (await Store.open(fresh_pg_url)).aclose()
        with anyio.fail_after(10):
            await came.wait()
        assert heard == [f'{{"migrated":"{migrate.SCHEMA_HEAD}"}}']

        await (await Store.open(fresh_pg_url)).aclose()
        await listening.execute("SELECT 1")  # a notification sent before it has come by now
        assert len(heard) == 1
    finally:
        await listening.close()
