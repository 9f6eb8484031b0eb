"""SQLite specifics: a light start, the pragmas, text kept verbatim."""

from __future__ import annotations

import re
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlalchemy import Connection, text

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.store import rates, sqlite
from agentpost.store.database import Store
from store.test_sqlite_runner import insert_key, stored_keys

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
    assert await lite.write(pragma("busy_timeout"), lengthy=True) == sqlite.BUSY_TIMEOUT_MS
    assert await lite.write(pragma("foreign_keys")) == 1


async def test_the_writer_thread_waits_out_a_lock_and_the_event_loop_never_does(
    lite: Store,
) -> None:
    """The writer's one connection serves both, in turns: the loop hands a write that finds
    the file locked to the thread rather than wait (see test_sqlite_runner). A small write
    runs on the loop only when the writer thread is idle, so each is judged by where it ran."""

    def where_and_timeout(conn: Connection) -> tuple[bool, int]:
        return threading.get_ident() == loop_thread, pragma("busy_timeout")(conn)

    async def write(lengthy: bool) -> bool:
        on_the_loop, timeout = await lite.write(where_and_timeout, lengthy=lengthy)
        assert timeout == (0 if on_the_loop else sqlite.BUSY_TIMEOUT_MS)
        return on_the_loop

    loop_thread = threading.get_ident()
    for _ in range(3):
        assert not await write(lengthy=True)
        for _ in range(100):  # until the writer thread has let go of the connection
            if await write(lengthy=False):
                break
            await anyio.sleep(0.01)
        else:
            raise AssertionError("no small write ran on the event loop")


async def test_text_is_stored_verbatim_whatever_it_contains(lite: Store) -> None:
    odd = "'; DROP TABLE agents; -- \x00 ü 🚀"

    def tx(conn: Connection) -> None:
        rates.hit(conn, sqlite, odd, 0.0, 60.0)

    await lite.write(tx)
    assert await stored_keys(lite) == {odd}
    assert await lite.read(lambda c: c.execute(text("SELECT count(*) FROM agents")).scalar()) == 0


async def test_a_database_path_naming_a_folder_is_refused_and_the_folder_left_as_it_was(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "projects"
    folder.mkdir(mode=0o755)
    with pytest.raises(AgentpostError) as caught:
        await Store.open(f"sqlite:///{folder}")
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert f"{folder} is not a file" in caught.value.message
    assert folder.stat().st_mode & 0o777 == 0o755
    assert list(folder.iterdir()) == []


async def test_a_file_that_is_no_database_is_unavailable_naming_it(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("shopping list: " * 500)
    with pytest.raises(AgentpostError) as caught:
        await Store.open(f"sqlite:///{notes}")
    assert caught.value.code is ErrorCode.UNAVAILABLE
    assert f"cannot keep the post office at {notes}" in caught.value.message
    assert notes.read_text() == "shopping list: " * 500


async def test_a_home_that_cannot_be_made_is_unavailable_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(AgentpostError) as caught:
        await Store.open(f"sqlite:///{blocker / 'home' / 'agentpost.db'}")
    assert caught.value.code is ErrorCode.UNAVAILABLE
    assert str(blocker / "home" / "agentpost.db") in caught.value.message


@pytest.mark.parametrize("folder", ["q?mode=memory", "issue#12", "p%20q", "with space ✉"])
async def test_a_home_whose_name_reads_as_a_url_keeps_the_post_office_in_its_own_file(
    tmp_path: Path, folder: str
) -> None:
    """A path is a path, not a URL: `?` once sent the mail to a world-readable file named for
    what came before it, and `%20` to a folder that does not exist (`unavailable`)."""
    path = tmp_path / folder / "agentpost.db"
    store = await Store.open(f"sqlite:///{path}")
    try:
        await store.write(insert_key("kept"))
    finally:
        await store.aclose()
    assert [p.name async for p in anyio.Path(tmp_path).iterdir()] == [folder]
    assert (await anyio.Path(path).stat()).st_mode & 0o777 == 0o600
    reopened = await Store.open(f"sqlite:///{path}")
    try:
        assert await stored_keys(reopened) == {"kept"}
    finally:
        await reopened.aclose()


README = Path(__file__).resolve().parents[2] / "README.md"


async def test_the_readmes_backup_taken_while_the_store_writes_holds_every_committed_write(
    tmp_path: Path,
) -> None:
    """The newest commits are in the WAL, which a copy of the file alone lacks: the README's
    backup command copies one consistent state, and the copy opens as a post office."""
    program = re.search(r"python3 -c '([^']+)'", README.read_text())
    assert program is not None, "the README shows a backup command"
    path, copy = tmp_path / "agentpost.db", tmp_path / "backup" / "agentpost.db"
    copy.parent.mkdir()
    store = await Store.open(f"sqlite:///{path}")
    try:
        for n in range(200):
            await store.write(insert_key(f"before-{n}"))
        async with anyio.create_task_group() as writers:

            async def go_on_writing() -> None:
                for n in range(200):
                    await store.write(insert_key(f"during-{n}"))

            writers.start_soon(go_on_writing)
            await anyio.run_process([sys.executable, "-c", program[1], str(path), str(copy)])
    finally:
        await store.aclose()
    restored = await Store.open(f"sqlite:///{copy}")
    try:
        kept = await stored_keys(restored)
    finally:
        await restored.aclose()
    assert {f"before-{n}" for n in range(200)} <= kept
    assert kept - {f"during-{n}" for n in range(200)} == {f"before-{n}" for n in range(200)}


async def test_a_write_ahead_log_deleted_under_a_running_store_is_refused_naming_it(
    tmp_path: Path,
) -> None:
    """Its -wal and -shm gone, a process started after would make new ones, and the two would
    keep separate books on one file: a send the newcomer acknowledged was gone once the running
    process checkpointed. So the running one refuses, as for the file itself."""
    path = tmp_path / "agentpost.db"
    store = await Store.open(f"sqlite:///{path}")
    try:
        await store.write(insert_key("before"))
        for name in (path.name + "-wal", path.name + "-shm"):
            (tmp_path / name).unlink()
        with pytest.raises(AgentpostError) as caught:
            await store.write(insert_key("after"))
        assert caught.value.code is ErrorCode.UNAVAILABLE
        assert f"{path}-wal was deleted or replaced" in caught.value.message
    finally:
        await store.aclose()


async def test_a_store_opened_beside_another_is_not_refused_when_that_one_closes(
    tmp_path: Path,
) -> None:
    """The last process to close a file removes its -wal and -shm; one still open keeps them."""
    path = tmp_path / "agentpost.db"
    first = await Store.open(f"sqlite:///{path}")
    second = await Store.open(f"sqlite:///{path}")
    await first.write(insert_key("first"))
    await first.aclose()
    try:
        await second.write(insert_key("second"))
        assert await stored_keys(second) == {"first", "second"}
    finally:
        await second.aclose()


@pytest.mark.parametrize("how", ["deleted", "replaced"])
async def test_a_file_deleted_or_replaced_under_a_running_store_is_refused_naming_it(
    tmp_path: Path, how: str
) -> None:
    """Work kept on in the unlinked file would vanish with the process: every transaction is
    refused instead, and the file now at the path is left to the processes started after."""
    path = tmp_path / "agentpost.db"
    store = await Store.open(f"sqlite:///{path}")
    try:
        await store.write(insert_key("before"))
        for name in (path.name, path.name + "-wal", path.name + "-shm"):
            (tmp_path / name).unlink(missing_ok=True)
        if how == "replaced":  # a backup moved into place, say
            fresh = await Store.open(f"sqlite:///{tmp_path / 'backup.db'}")
            await fresh.aclose()
            (tmp_path / "backup.db").rename(path)
        for attempt in (lambda: store.write(insert_key("after")), lambda: stored_keys(store)):
            with pytest.raises(AgentpostError) as caught:
                await attempt()
            assert caught.value.code is ErrorCode.UNAVAILABLE
            assert f"the database {path} was deleted or replaced" in caught.value.message
    finally:
        await store.aclose()
    reopened = await Store.open(f"sqlite:///{path}")  # as the next process does
    try:
        await reopened.write(insert_key("new"))
        assert await stored_keys(reopened) == {"new"}
    finally:
        await reopened.aclose()
