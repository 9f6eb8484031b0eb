"""Whether a newer agentpost migrated the database under this running process.

A process refuses to start on a schema newer than it knows (`store.migrate`). One already
running would go on writing with its old idea of the schema: the columns it does not know would
take their defaults (a task's `creator_trust` untrusted, say), rows the newer code then misreads.
So once the file is found migrated past what this agentpost knows, the runner refuses every call
as a start would, but with a restart for the way out, and writes nothing more.

It costs the hot path nothing: the runner's writer asks only when it sees another process's
commit (`PRAGMA data_version` moved), within the write transaction that would otherwise write,
and then reads SQLite's schema cookie (`PRAGMA schema_version`, a number in the file's header
that any change of tables, columns or indexes moves: a few microseconds); only when the cookie
moved is the migration level read. An upgrade moves the cookie even when its revisions change
only data (`migrate.migrate_sqlite`).

PostgreSQL replicas share no file: a migration announces itself on the channel they already
listen on (`migrate.migrate_postgres`), and each replica's listening connection then reads the
revision; it reads it too when it connects and when its keep-alive asks (`store.postgres`),
and so does `/ready`, for a notice that never came. Nothing is asked in a transaction.
"""

from __future__ import annotations

import logging
import sqlite3

from agentpost.store import migrate

log = logging.getLogger(__name__)


class NewerSchema:
    """The schema revision found newer than this process knows, if it was. Once found, it
    stays so: a migration is not undone under a running process."""

    def __init__(self) -> None:
        # The revisions this code holds, read now: an agentpost upgraded in place later puts
        # the newer migration files where this process would otherwise look for them.
        migrate.known_revisions()
        self.newer: str | None = None
        """The newer revision found, None while the database holds one this code knows."""

    def found(self, revision: str | None) -> bool:
        """Take in the revision the database holds; True the first time it is a newer one."""
        if self.newer is not None:
            return False
        if (refusal := migrate.newer_than_known(revision, running=True)) is None:
            return False
        self.newer = revision
        log.error("%s; this process refuses every call from now on", refusal.message)
        return True

    def refuse(self) -> None:
        """Raise the refusal (`unavailable`, the way out: a restart) once a newer one was found."""
        if self.newer is not None:
            refusal = migrate.newer_than_known(self.newer, running=True)
            assert refusal is not None
            raise refusal


class SchemaWatch(NewerSchema):
    """The schema this process found on its SQLite file, watched through the writer's
    connection (whoever calls `look` holds it)."""

    def __init__(self, driver: sqlite3.Connection) -> None:
        super().__init__()
        self._cookie: int | None = None
        self.look(driver)

    def look(self, driver: sqlite3.Connection) -> None:
        """Read the cookie and, if it moved, the migration level. Cookie first: outside a
        transaction, a migration between the two reads then shows at the second."""
        if self.newer is not None:
            return
        cookie = int(driver.execute("PRAGMA schema_version").fetchone()[0])
        if cookie == self._cookie:
            return
        try:
            row = driver.execute("SELECT version_num FROM alembic_version").fetchone()
        except sqlite3.OperationalError:  # no agentpost schema there (not a newer one), or a
            return  # read that failed: either way asked again at the next foreign commit
        self._cookie = cookie
        self.found(None if row is None else str(row[0]))
