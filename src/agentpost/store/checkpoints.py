"""Copying the WAL back into the database file, off the write path, for the SQLite runner.

SQLite's automatic checkpoint runs inside the commit that crosses 1,000 pages, so one unlucky
send would wait for it (hundreds of ms with an fsync). The writer connection turns it off and
`Checkpoints` does the same work on a thread of its own, beside the writer: PASSIVE, the bulk of
it, then RESTART for the pages written meanwhile. A writer starts the WAL over only when it
begins with every page copied back, which a steady stream of writes never lets a PASSIVE
checkpoint reach: the file would grow for good (some 80 kB a send). RESTART holds writers off
for those few pages, and for readers still in the WAL, at most `RESTART_WAIT_MS`; then the next
write starts the WAL over.

A WAL started over is overwritten from its start, and keeps the older pages past what is
written again: after words were wiped (`store.fulltext`), `truncate_soon` has the next
checkpoint cut it to nothing (TRUNCATE, which also waits at most `RESTART_WAIT_MS` for readers;
when they stay, a later one tries again).
"""

from __future__ import annotations

import contextlib
import threading

from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError

RESTART_WAIT_MS = 20


class Checkpoints:
    """The checkpointing thread's state: run `run` on a thread; `due` asks for a checkpoint."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._due = threading.Event()
        self._truncate = False
        self._closing = False

    def due(self) -> None:
        self._due.set()

    def truncate_soon(self) -> None:
        """Have the next checkpoint cut the WAL to nothing: old copies of pages leave the disk."""
        self._truncate = True
        self._due.set()

    def close(self) -> None:
        self._closing = True
        self._due.set()

    def run(self) -> None:
        with self._engine.connect() as conn:
            conn.exec_driver_sql(f"PRAGMA busy_timeout={RESTART_WAIT_MS}").fetchall()
            while True:
                self._due.wait()
                self._due.clear()
                if self._closing:
                    return
                with contextlib.suppress(OperationalError):
                    conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    if not self._truncate:
                        conn.exec_driver_sql("PRAGMA wal_checkpoint(RESTART)").fetchall()
                        continue
                    busy, _, _ = conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").one()
                    self._truncate = bool(busy)  # readers stayed in the WAL: the next one tries
