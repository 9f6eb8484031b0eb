"""Bring the schema to the head revision on start, once, even when many processes start at once.

The check reads `alembic_version` with plain SQL; Alembic is imported only when the schema is
behind, so a current database starts without paying for it. Processes serialise on a lock (a
file lock beside a SQLite file, an advisory lock on PostgreSQL) and check again inside it.
"""

from __future__ import annotations

import fcntl
import functools
import os
from pathlib import Path
from typing import IO, TYPE_CHECKING

from sqlalchemy import Connection, text
from sqlalchemy.exc import OperationalError, ProgrammingError

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.store import sqlite

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.ext.asyncio import AsyncEngine

SCHEMA_HEAD = "0023"
"""The newest revision in migrations/versions (a test keeps the two equal)."""

MIGRATIONS = Path(__file__).parent / "migrations"
_PG_LOCK_KEY = 0x61676E74706F7374  # "agntpost"


def current_revision(conn: Connection) -> str | None:
    try:
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except (OperationalError, ProgrammingError):
        return None


@functools.cache  # asked at every readiness check too
def known_revisions() -> frozenset[str]:
    """The revisions this agentpost's migrations hold (their files are named `NNNN_…`)."""
    return frozenset(p.name.split("_", 1)[0] for p in (MIGRATIONS / "versions").glob("[0-9]*.py"))


def newer_than_known(found: str | None, *, running: bool = False) -> AgentpostError | None:
    """The refusal of a schema newer than this agentpost knows (a newer replica migrated it),
    with the way out; None for one it knows. At a start the way out is a newer agentpost; for
    a process `running` on the file when it was migrated, a restart: most often the newer
    agentpost that migrated it is the one installed by now, and the process, however current
    its installation, stays refused until it starts again."""
    if found is None or found in known_revisions():
        return None
    way_out = (
        "a newer agentpost migrated it while this process ran; restart this process"
        " (the MCP server, the service) on the newer release"
        if running
        else "upgrade agentpost to open it"
    )
    return AgentpostError(
        ErrorCode.UNAVAILABLE,
        f"the database's schema ({found}) is newer than this agentpost knows"
        f" ({SCHEMA_HEAD}); {way_out}",
    )


def _refuse_unknown(found: str | None) -> None:
    """Refused at start: an older program would otherwise fail deep in Alembic."""
    if (refusal := newer_than_known(found)) is not None:
        raise refusal


def upgrade(conn: Connection, target: str = "head") -> None:
    """Apply every pending revision up to `target` on `conn`, inside the caller's transaction."""
    from alembic import command

    command.upgrade(_config(conn), target)


def downgrade(conn: Connection, target: str) -> None:
    """Undo the revisions past `target` on `conn`, inside the caller's transaction (tests
    and benchmarks take a file back to what an older agentpost left)."""
    from alembic import command

    command.downgrade(_config(conn), target)


def _config(conn: Connection) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = conn
    return config


def _lock_file(path: Path) -> IO[str]:
    """The lock beside the file, as private as the file (whatever the umask, or an older
    version, made it)."""
    fd = os.open(path.with_name(path.name + ".migrate-lock"), os.O_CREAT | os.O_WRONLY, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "w")


def migrate_sqlite(path: Path) -> bool:
    """Put the file in WAL mode and upgrade it if it is behind; True when this process did."""
    if sqlite.journal_mode(path) == "wal" and _sqlite_revision(path) == SCHEMA_HEAD:
        return False
    with _lock_file(path) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        sqlite.ensure_wal(path)
        engine = sqlite.make_engine(path, pooled=False)
        try:
            with engine.connect() as conn, sqlite.transaction(conn, immediate=True):
                found = current_revision(conn)
                if found == SCHEMA_HEAD:
                    return False
                _refuse_unknown(found)
                upgrade(conn)
                _move_schema_cookie(conn)
                return True
        finally:
            engine.dispose()


def _move_schema_cookie(conn: Connection) -> None:
    """Move SQLite's schema cookie, in the upgrade's transaction, even when its revisions
    change only data (0020 does): an older agentpost still running on the file learns by the
    cookie that it was migrated under it (`store.schema_watch`). A table made and dropped
    moves it and leaves nothing."""
    sqlite.raw(conn, "CREATE TABLE agentpost_upgraded (x)")
    sqlite.raw(conn, "DROP TABLE agentpost_upgraded")


def _sqlite_revision(path: Path) -> str | None:
    engine = sqlite.make_engine(path, pooled=False)
    try:
        with engine.connect() as conn, sqlite.transaction(conn):
            return current_revision(conn)
    finally:
        engine.dispose()


async def migrate_postgres(engine: AsyncEngine) -> bool:
    """Upgrade the database if it is behind, and say so to the replicas running on it: an
    older one still running refuses every call from then on (`store.schema_watch`)."""
    from agentpost.store import postgres  # asyncpg costs a SQLite process nothing

    async with engine.connect() as conn:
        if await conn.run_sync(current_revision) == SCHEMA_HEAD:
            return False
    async with engine.begin() as conn:
        # Another replica's migration may take longer than the lock timeout: wait it out.
        await conn.execute(text("SET LOCAL lock_timeout = 0"))
        await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
        found = await conn.run_sync(_revision_in_savepoint)
        if found == SCHEMA_HEAD:
            return False
        _refuse_unknown(found)
        await conn.run_sync(upgrade)
        await conn.run_sync(postgres.announce_migration, SCHEMA_HEAD)  # heard at the commit
        return True


def _revision_in_savepoint(conn: Connection) -> str | None:
    # A failed SELECT aborts a PostgreSQL transaction; a savepoint keeps the lock's transaction.
    with conn.begin_nested() as savepoint:
        revision = current_revision(conn)
        if revision is None:
            savepoint.rollback()
        return revision
