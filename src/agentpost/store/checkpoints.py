"""Copying the WAL back into the database file, off the write path, for the SQLite runner.

SQLite's automatic checkpoint runs inside the commit that crosses 1,000 pages, so one unlucky
send would wait for it (hundreds of ms with an fsync). The writer connection turns it off and
`Checkpoints` does the same work on a thread of its own, beside the writer.

A writer starts the WAL over only when it begins with every page copied back, which a steady
stream of writes never lets a PASSIVE checkpoint reach: the file would grow for good (some
80 kB a send). So each checkpoint ends with a RESTART, which holds writers off while it copies
what is left and waits for readers still in the WAL (at most `RESTART_WAIT_MS`); then the next
write starts the WAL over.

What the RESTART copies, it copies with the writers held off, and with two fsyncs (the WAL's,
the file's) that take as long as there is to write. One PASSIVE copied some 4,000 pages while
sends went on, and the RESTART after it the 400 written meanwhile: 2 to 25 ms, and a send that
wanted to begin meanwhile waited it out. So PASSIVE checkpoints come first, each copying what
was written during the one before, until one finds nothing new or `ROUNDS` have run: each is
shorter than the one before (4,000 pages, then 400, then about one send's 15), and the RESTART
copies only what the last one let through. Whether anything was written since the last one
began, `PRAGMA data_version` tells (it changes with each commit of another connection); what
a PASSIVE answers cannot: the WAL's length when it began, and how much of it is copied, are the
same after the writer started the WAL over (it does when it finds every page copied) and wrote
as many pages again.

Our own writes are held off by the runner's write lock, which the RESTART holds as they do,
not by SQLite's: a connection that finds SQLite's lock taken sleeps 1 ms, then 2, 5, 10 (its
busy handler), however soon the lock is free. A send that came to begin during a RESTART
waited 1.1 ms however short the RESTART, or 3.2, 8.3, 18.5 ms; a RESTART that found our writer
in a transaction slept as well, while sends went on landing for it to copy, and after 20 ms of
it gave up (the WAL went on growing). Under the runner's lock the RESTART finds SQLite's free
at once, and a write waiting for it goes on the moment it ends. Other processes' writes wait
as before.

A WAL started over is overwritten from its start, and keeps the older pages past what is
written again: after words were wiped (`store.fulltext`), `truncate_soon` has the next
checkpoint cut it to nothing (TRUNCATE, which also waits at most `RESTART_WAIT_MS` for readers;
when they stay, a later one tries again).
"""

from __future__ import annotations

import contextlib
import threading

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import OperationalError

RESTART_WAIT_MS = 20
ROUNDS = 4
"""The most PASSIVE checkpoints before a RESTART: rounds shrink fast while writes go on (by
the fourth, about one send's pages), and the RESTART must come, or the WAL never starts over."""


class Checkpoints:
    """The checkpointing thread's state: run `run` on a thread; `due` asks for a checkpoint."""

    def __init__(self, engine: Engine, writes: threading.Lock) -> None:
        """`writes`: the lock this process's writes hold (the runner's), held for a RESTART."""
        self._engine = engine
        self._writes = writes
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
                    self._catch_up(conn)
                    with self._writes:
                        if not self._truncate:
                            conn.exec_driver_sql("PRAGMA wal_checkpoint(RESTART)").fetchall()
                            continue
                        busy, _, _ = conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").one()
                    self._truncate = bool(busy)  # readers stayed in the WAL: the next one tries

    @staticmethod
    def _catch_up(conn: Connection) -> None:
        """PASSIVE checkpoints until one has copied all it found with nothing committed since
        it began (or `ROUNDS` of them, or another connection is checkpointing)."""
        version, copied_all = None, False
        for _ in range(ROUNDS):
            before, version = version, conn.exec_driver_sql("PRAGMA data_version").scalar()
            if copied_all and version == before:
                return
            busy, log, copied = conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)").one()
            if busy:
                return
            copied_all = copied == log
