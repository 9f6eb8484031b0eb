"""SQLite specifics: pragmas, one writer that commits concurrent writes together, no lock errors."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from sqlalchemy import Connection, select, text

from agentpost.store import rates, sqlite
from agentpost.store.database import Store
from agentpost.store.schema import rate_windows

pytestmark = pytest.mark.anyio


def pragma(name: str) -> Any:
    return lambda conn: conn.exec_driver_sql(f"PRAGMA {name}").scalar()


LOCAL_START = """
import sys, anyio
import agentpost.cli.entry, agentpost.mcp.stdio
from agentpost.store.database import Store

async def main():
    await (await Store.open(sys.argv[1])).aclose()

anyio.run(main)
print(sorted(m for m in sys.modules if m.startswith("sqlalchemy.dialects.postgresql")))
"""


async def test_a_local_start_never_loads_the_postgresql_dialect(
    lite: Store, tmp_path: Path
) -> None:
    """Importing it costs about 90 ms, and every local agent session starts this way (the
    file is current: `lite` migrated it)."""
    url = f"sqlite:///{tmp_path / 'agentpost.db'}"
    done = await anyio.run_process([sys.executable, "-c", LOCAL_START, url])
    assert done.stdout.decode().strip() == "[]"


async def test_the_file_is_in_wal_mode_with_normal_sync_and_a_busy_timeout(lite: Store) -> None:
    assert await lite.read(pragma("journal_mode")) == "wal"
    assert await lite.write(pragma("synchronous")) == 1  # NORMAL
    assert await lite.read(pragma("busy_timeout")) == sqlite.BUSY_TIMEOUT_MS
    assert await lite.write(pragma("foreign_keys")) == 1


def insert_key(key: str) -> Any:
    def tx(conn: Connection) -> Any:
        conn.execute(rate_windows.insert().values(key=key, window_start=0.0, count=1))
        return conn.get_transaction()

    return tx


async def stored_keys(store: Store) -> set[str]:
    return set(await store.read(lambda conn: conn.execute(select(rate_windows.c.key)).scalars()))


async def test_concurrent_writes_are_committed_together_and_a_failure_undoes_only_itself(
    lite: Store,
) -> None:
    started, release = threading.Event(), threading.Event()

    def blocker(conn: Connection) -> None:
        started.set()
        release.wait(10)

    def failing(conn: Connection) -> None:
        conn.execute(rate_windows.insert().values(key="doomed", window_start=0.0, count=1))
        raise ValueError("refused")

    results: dict[int, Any] = {}

    async def write(i: int, fn: Any) -> None:
        try:
            results[i] = await lite.write(fn)
        except ValueError as exc:
            results[i] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(write, -1, blocker)
        await anyio.to_thread.run_sync(started.wait)  # the writer is busy: the rest queue up
        for i in range(20):
            tg.start_soon(write, i, failing if i == 7 else insert_key(f"k{i}"))
        await anyio.wait_all_tasks_blocked()
        release.set()

    assert isinstance(results[7], ValueError)
    assert await stored_keys(lite) == {f"k{i}" for i in range(20) if i != 7}
    transactions = {id(results[i]) for i in range(20) if i != 7}
    assert len(transactions) == 1  # one BEGIN IMMEDIATE … COMMIT for the whole batch


async def test_a_lone_failing_write_raises_its_error_and_leaves_nothing(lite: Store) -> None:
    def failing(conn: Connection) -> None:
        conn.execute(rate_windows.insert().values(key="doomed", window_start=0.0, count=1))
        raise LookupError("refused")

    with pytest.raises(LookupError, match="refused"):
        await lite.write(failing)
    assert await stored_keys(lite) == set()
    await lite.write(insert_key("next"))
    assert await stored_keys(lite) == {"next"}


async def test_reads_do_not_wait_for_a_busy_writer(lite: Store) -> None:
    started, release = threading.Event(), threading.Event()

    def slow_write(conn: Connection) -> None:
        conn.execute(rate_windows.insert().values(key="slow", window_start=0.0, count=1))
        started.set()
        release.wait(10)

    async with anyio.create_task_group() as tg:
        tg.start_soon(lite.write, slow_write)
        await anyio.to_thread.run_sync(started.wait)
        with anyio.fail_after(5):
            assert await stored_keys(lite) == set()  # the uncommitted row is not seen
        release.set()
    assert await stored_keys(lite) == {"slow"}


async def test_the_writer_is_told_of_a_commit_so_local_waiters_wake(lite: Store) -> None:
    before = lite.version
    await lite.write(insert_key("x"))
    with anyio.fail_after(5):
        assert await lite.wait_changed(before, timeout=5) > before


async def test_text_is_stored_verbatim_whatever_it_contains(lite: Store) -> None:
    odd = "'; DROP TABLE agents; -- \x00 ü 🚀"

    def tx(conn: Connection) -> None:
        rates.hit(conn, sqlite, odd, 0.0, 60.0)

    await lite.write(tx)
    assert await stored_keys(lite) == {odd}
    assert await lite.read(lambda c: c.execute(text("SELECT count(*) FROM agents")).scalar()) == 0
