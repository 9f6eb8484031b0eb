"""The checkpointer: the WAL copied back into the file and started over, beside the writes."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from agentpost.store.checkpoints import ROUNDS, Checkpoints
from agentpost.store.sqlite import make_engine

ROWS = 50
"""Rows the file starts with, each of its own commit: the WAL is 50 frames and more."""


def wal_file(path: Path) -> sqlite3.Connection:
    """A WAL file of some frames, none copied back, and a connection to write to it."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=wal")
    conn.execute("PRAGMA wal_autocheckpoint=0")  # as the runner's writer
    conn.execute("CREATE TABLE t (n INTEGER PRIMARY KEY, body TEXT)")
    for n in range(ROWS):
        conn.execute("INSERT INTO t (body) VALUES (?)", (f"row {n}",))
    return conn


def frames_in_the_wal(path: Path) -> int:
    with closing(sqlite3.connect(path)) as probe:
        _busy, log, _copied = probe.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return int(log)


@contextmanager
def one_checkpoint(
    path: Path, on_statement: Callable[[str], None], *, truncate: bool = False
) -> Iterator[list[str]]:
    """Run one checkpoint on `path`: the modes of the checkpoints it asks SQLite for, in
    order, each seen (and `on_statement(mode)` called) as it begins, before SQLite runs it,
    and whether it holds the lock this process's writes take (as the runner's do) meanwhile."""
    engine = make_engine(path)
    writes = threading.Lock()
    modes: list[str] = []
    done = threading.Event()

    def traced(sql: str) -> None:
        if "wal_checkpoint" in sql:
            mode = sql.split("(")[1].rstrip(")")
            modes.append(f"{mode} holding our writes off" if writes.locked() else mode)
            on_statement(mode)
            if mode != "PASSIVE":
                done.set()

    @event.listens_for(engine, "connect")
    def _trace(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.set_trace_callback(traced)

    checkpoints = Checkpoints(engine, writes)
    thread = threading.Thread(target=checkpoints.run)
    thread.start()
    try:
        if truncate:
            checkpoints.truncate_soon()
        else:
            checkpoints.due()
        assert done.wait(10)
    finally:
        checkpoints.close()
        thread.join(10)
        engine.dispose()
    yield modes


@pytest.mark.parametrize(("landing", "passives"), [(0, 1), (1, 2), (2, 3), (ROUNDS + 3, ROUNDS)])
def test_passive_checkpoints_catch_up_before_a_restart_holds_the_writers_off(
    tmp_path: Path, landing: int, passives: int
) -> None:
    """A RESTART holds every writer off while it copies, with fsyncs as long as what it
    copies. So PASSIVE checkpoints run first, each copying what was written during the one
    before, until one finds nothing new: here a write lands just before each of the first
    `landing` ones, as sends land during them. Writes that never stop get `ROUNDS` of them,
    then the RESTART all the same: without it the WAL would never start over. Only the
    RESTART holds our own writes off, by their own lock: SQLite's busy handler would have a
    write that found it busy sleep 1 ms at least, however short the RESTART."""
    path = tmp_path / "file.db"
    writer = wal_file(path)
    landed = 0

    def land(mode: str) -> None:
        nonlocal landed
        if mode == "PASSIVE" and landed < landing:
            writer.execute("INSERT INTO t (body) VALUES ('landed')")
            landed += 1

    with one_checkpoint(path, land) as modes:
        assert modes == ["PASSIVE"] * passives + ["RESTART holding our writes off"]
    writer.execute("INSERT INTO t (body) VALUES ('after')")
    assert frames_in_the_wal(path) < ROWS / 10  # started over: one write's frames
    writer.close()


def test_truncate_soon_cuts_the_wal_to_nothing_once_a_passive_checkpoint_caught_up(
    tmp_path: Path,
) -> None:
    path = tmp_path / "file.db"
    writer = wal_file(path)
    with one_checkpoint(path, lambda mode: None, truncate=True) as modes:
        assert modes == ["PASSIVE", "TRUNCATE holding our writes off"]
    assert (tmp_path / "file.db-wal").stat().st_size == 0
    writer.close()
