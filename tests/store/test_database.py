"""The store: one handle on either database, transactions in, results and refusals out."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from sqlalchemy import Connection, func, select

from agentpost.domain.errors import AgentpostError, ErrorCode, invalid
from agentpost.store import agents, migrate
from agentpost.store.database import Store
from agentpost.store.schema import agents as agents_table
from agentpost.store.schema import rate_windows
from backends import FakeClock
from store.test_sqlite_runner import writer_thread_held

pytestmark = pytest.mark.anyio


async def agent_names(store: Store) -> list[str]:
    return await store.read(lambda conn: list(conn.execute(select(agents_table.c.name)).scalars()))


def create(name: str) -> object:
    return lambda conn: agents.create_agent(conn, name, now=1.0)


async def test_a_write_is_committed_and_returns_what_its_function_returns(store: Store) -> None:
    def tx(conn: Connection) -> str:
        agents.create_agent(conn, "alice", now=store.clock())
        return "made"

    assert await store.write(tx) == "made"
    assert await agent_names(store) == ["alice"]


async def test_a_refused_write_changes_nothing_and_its_refusal_reaches_the_caller(
    store: Store,
) -> None:
    def tx(conn: Connection) -> None:
        agents.create_agent(conn, "alice", now=store.clock())
        raise invalid("changed my mind")

    with pytest.raises(AgentpostError) as caught:
        await store.write(tx)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert await agent_names(store) == []


async def test_concurrent_writes_on_either_database_are_all_kept(store: Store) -> None:
    async with anyio.create_task_group() as tg:
        for i in range(30):
            tg.start_soon(store.write, create(f"agent-{i}"))
    assert sorted(await agent_names(store)) == sorted(f"agent-{i}" for i in range(30))


async def test_a_failing_write_among_concurrent_ones_undoes_only_itself(store: Store) -> None:
    async def attempt(name: str) -> None:
        with contextlib.suppress(Exception):  # the duplicate: its database error is its own
            await store.write(create(name))

    await store.write(create("taken"))
    async with anyio.create_task_group() as tg:
        for name in ["a1", "a2", "taken", "a3", "a4"]:
            tg.start_soon(attempt, name)
    assert sorted(await agent_names(store)) == ["a1", "a2", "a3", "a4", "taken"]


async def test_the_store_clock_is_the_one_it_was_opened_with(
    store: Store, clock: FakeClock
) -> None:
    assert store.clock() == clock.now
    clock.advance(90)
    assert store.clock() == clock.now


async def test_a_commit_in_this_process_wakes_a_waiter(store: Store) -> None:
    seen = store.version
    async with anyio.create_task_group() as tg:

        async def waiter() -> None:
            assert await store.wait_changed(seen, timeout=10) > seen

        tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        with anyio.fail_after(5):
            await store.write(create("alice"))


async def test_waiting_with_nothing_committed_ends_at_the_timeout(store: Store) -> None:
    seen = store.version
    assert await store.wait_changed(seen, timeout=0.01) == seen


async def test_reads_see_committed_writes_and_count_on_both_databases(store: Store) -> None:
    for name in ["a", "b", "c"]:
        await store.write(create(name))
    count = await store.read(
        lambda conn: conn.execute(select(func.count()).select_from(agents_table)).scalar()
    )
    assert count == 3
    assert store.is_sqlite == (store.path is not None)


STARTER = """
import anyio, sys
from agentpost.store import rates
from agentpost.store.database import Store

async def main():
    store = await Store.open(sys.argv[1])
    me = sys.argv[2]

    def hit(conn):  # reads, then writes: the pattern that deadlocks without BEGIN IMMEDIATE
        rates.hit(conn, store.dialect, "shared", 0.0, 3600.0)
        rates.hit(conn, store.dialect, "own:" + me, 0.0, 3600.0)

    async with anyio.create_task_group() as tg:
        for _ in range(int(sys.argv[3])):
            tg.start_soon(store.write, hit)
    await store.aclose()

anyio.run(main)
"""


def run_starters(url: str, processes: int, writes: int) -> list[tuple[int, str]]:
    """Start them all, then wait for each: (exit status, stderr) of every process."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", STARTER, url, str(n), str(writes)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONWARNINGS": "error"},
        )
        for n in range(processes)
    ]
    outcomes = []
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        outcomes.append((proc.returncode, err))
    return outcomes


async def test_processes_starting_on_a_fresh_database_at_once_all_open_it_and_write(
    fresh_database_url: str,
) -> None:
    """Each migrates or waits for the one migrating; then all write at once, nothing lost,
    and no "database is locked" (or any other error) reaches any of them."""
    # PostgreSQL serialises every hit of "shared" on one row lock, commit by commit: fewer.
    processes, writes = (6, 50) if fresh_database_url.startswith("sqlite") else (4, 25)
    outcomes = await anyio.to_thread.run_sync(run_starters, fresh_database_url, processes, writes)
    assert [code for code, _ in outcomes] == [0] * processes, outcomes
    assert not any(err for _, err in outcomes), outcomes

    store = await Store.open(fresh_database_url)
    try:
        assert await store.read(migrate.current_revision) == migrate.SCHEMA_HEAD

        def counts(conn: Connection) -> dict[str, int]:
            rows = conn.execute(select(rate_windows.c.key, rate_windows.c.count))
            return dict(rows.all())

        found = await store.read(counts)
    finally:
        await store.aclose()
    assert found.pop("shared") == processes * writes  # no read-modify-write was lost
    assert found == {f"own:{n}": writes for n in range(processes)}


async def test_an_unreachable_postgresql_server_is_unavailable_not_a_driver_error() -> None:
    with pytest.raises(AgentpostError) as caught:
        await Store.open("postgresql://postgres@127.0.0.1:1/agentpost")
    assert caught.value.code is ErrorCode.UNAVAILABLE


async def test_a_closed_store_refuses_new_work_instead_of_waiting_forever(
    tmp_path: Path,
) -> None:
    store = await Store.open(f"sqlite:///{tmp_path / 'post.db'}")
    await store.aclose()
    for run in (store.write, store.read, store.glance):
        with anyio.fail_after(5), pytest.raises(AgentpostError) as caught:
            await run(lambda conn: conn.execute(select(func.count())).scalar())
        assert caught.value.code is ErrorCode.UNAVAILABLE


# -- accounts_version: when what authentication read still holds ------------------------------


async def known_version(store: Store) -> int:
    """The version, once the writer thread lets go of the file: a write it ran may answer its
    caller a moment before that, and the version is unknown meanwhile."""
    with anyio.fail_after(5):
        # Nothing to await: the lock is the writer thread's.
        while (version := store.accounts_version()) is None:  # noqa: ASYNC110
            await anyio.sleep(0.001)
    return version


def commit_from_another_connection(path: Path, key: str) -> None:
    """A commit the store did not make, as another process's (a plain sqlite3 connection)."""
    db = sqlite3.connect(path, timeout=30)
    try:
        db.execute("INSERT INTO rate_windows (key, window_start, count) VALUES (?, 0, 1)", (key,))
        db.commit()
    finally:
        db.close()


async def test_the_accounts_version_moves_with_every_commit_but_those_that_touch_no_account(
    lite: Store,
) -> None:
    before = await known_version(lite)
    await lite.write(create("alice"))
    after_create = await known_version(lite)
    assert after_create > before
    await lite.write(create("bob"), touches_accounts=False)  # a promise (a send keeps it)
    assert await known_version(lite) == after_create
    await lite.read(lambda conn: agents.get_agent(conn, "alice"))  # reads never move it
    assert await known_version(lite) == after_create


async def test_another_processs_commit_moves_the_accounts_version_at_once(lite: Store) -> None:
    """No waiting for the change signal: the version looks for such commits when asked."""
    assert lite.path is not None
    before = await known_version(lite)
    commit_from_another_connection(lite.path, "elsewhere")
    after = lite.accounts_version()  # nothing of this process writes: the file is free
    assert after is not None
    assert after > before


async def test_a_failed_write_that_left_a_cursor_half_read_hides_no_later_commit(
    lite: Store,
) -> None:
    """The half-read cursor would keep the writer's read snapshot open for as long as the
    caller held the error: `PRAGMA data_version` would stand still, the next write fail."""
    assert lite.path is not None

    class Refused(Exception):
        pass

    def half_read(conn: Connection) -> None:
        rows = conn.exec_driver_sql("SELECT name FROM sqlite_master")
        rows.fetchone()
        raise Refused

    with pytest.raises(Refused) as caught:  # held on to until the end, as callers may
        await lite.write(half_read)
    before = await known_version(lite)
    commit_from_another_connection(lite.path, "elsewhere")
    after = lite.accounts_version()
    assert after is not None
    assert after > before
    await lite.write(create("alice"))
    assert await agent_names(lite) == ["alice"]
    assert caught.value is not None


async def test_the_accounts_version_is_unknown_while_the_writer_thread_holds_the_file(
    lite: Store,
) -> None:
    async with writer_thread_held(lite):
        assert lite.accounts_version() is None
    await known_version(lite)


async def test_postgresql_never_tells_an_accounts_version(pg_session_database: str) -> None:
    """Its other replicas commit unseen: every request reads."""
    store = await Store.open(pg_session_database)
    try:
        await store.read(lambda conn: agents.get_agent(conn, "alice"))
        assert store.accounts_version() is None
    finally:
        await store.aclose()


async def test_text_no_database_can_hold_is_an_invalid_argument_not_a_driver_error(
    store: Store,
) -> None:
    """Half of a surrogate pair (what undecodable bytes on a command line become) reaching a
    statement, in a read, a glance or a write: refused, and nothing written."""
    half = "m_\udcff"
    by_name = select(agents_table.c.name).where(agents_table.c.name == half)
    for call in (
        store.read(lambda conn: conn.execute(by_name).first()),
        store.glance(lambda conn: conn.execute(by_name).first()),
        store.write(lambda conn: agents.create_agent(conn, half, now=1.0)),
    ):
        with pytest.raises(AgentpostError) as refused:
            await call
        assert refused.value.code is ErrorCode.INVALID_ARGUMENT
    assert await agent_names(store) == []
