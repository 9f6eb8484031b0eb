"""Whether a newer agentpost migrated the SQLite file under this running process.

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
"""

from __future__ import annotations

import logging
import sqlite3

from agentpost.store import migrate

log = logging.getLogger(__name__)


class SchemaWatch:
    """The schema this process found on its file, watched through the writer's connection
    (whoever calls `look` holds it). Once newer than known, it stays so: a migration is not
    undone under a running process."""

    def __init__(self, driver: sqlite3.Connection) -> None:
        # The revisions this code holds, read now: an agentpost upgraded in place later puts
        # the newer migration files where this process would otherwise look for them.
        migrate.known_revisions()
        self._cookie: int | None = None
        self.newer: str | None = None
        """The newer revision found on the file, None while it holds one this code knows."""
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
        found = None if row is None else str(row[0])
        if (refusal := migrate.newer_than_known(found, running=True)) is not None:
            self.newer = found
            log.error("%s; this process refuses every call from now on", refusal.message)

    def refuse(self) -> None:
        """Raise the refusal (`unavailable`, the way out: a restart) once the file is newer."""
        if self.newer is not None:
            refusal = migrate.newer_than_known(self.newer, running=True)
            assert refusal is not None
            raise refusal
