"""The SQLite writer's upper bounds on open mail: a cap looked at without counting, never
wrong: mail delivered since, by this connection or any other, counts toward the cap."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import aclosing, contextmanager
from pathlib import Path

import pytest

from agentpost.store import mail
from agentpost.store import sqlite as store_sqlite
from agentpost.store.database import Store
from store.test_mail import put

pytestmark = pytest.mark.anyio


async def full(store: Store, caps: dict[str, int]) -> list[str]:
    """As a send looks, in a write transaction."""
    return await store.write(lambda conn: mail.at_cap(conn, caps, store.clock()))


async def test_an_inbox_counted_under_its_cap_reaches_it_by_the_mail_delivered_since(
    store: Store,
) -> None:
    await put(store, "alice", ["bob"])
    assert await full(store, {"bob": 3}) == []
    await put(store, "alice", ["bob", "carol"])
    assert await full(store, {"bob": 3, "carol": 3}) == []
    await put(store, "alice", ["bob"])
    assert await full(store, {"bob": 3, "carol": 3}) == ["bob"]


async def test_acked_mail_makes_room_again_once_the_cap_was_reached(store: Store) -> None:
    first, _ = await put(store, "alice", ["bob"])
    await put(store, "alice", ["bob"])
    assert await full(store, {"bob": 2}) == ["bob"]
    await store.write(lambda conn: mail.ack(conn, "bob", [first], store.clock()))
    assert await full(store, {"bob": 2}) == []
    assert await full(store, {"bob": 1}) == ["bob"]


async def test_mail_another_store_on_the_file_delivered_counts_toward_the_cap(
    tmp_path: Path,
) -> None:
    """As another process's would: a connection of its own, its commits seen only in the file."""
    url = f"sqlite:///{tmp_path / 'agentpost.db'}"
    async with (
        aclosing(await Store.open(url)) as here,
        aclosing(await Store.open(url)) as elsewhere,
    ):
        assert await full(here, {"bob": 2}) == []
        await put(elsewhere, "alice", ["bob"])
        await put(elsewhere, "alice", ["bob"])
        assert await full(here, {"bob": 2}) == ["bob"]


@contextmanager
def statements() -> Iterator[list[str]]:
    seen: list[str] = []
    execute = store_sqlite._execute

    def recording(conn: object, sql: str, values: object, *, many: bool = False) -> object:
        seen.append(sql)
        return execute(conn, sql, values, many=many)  # type: ignore[arg-type]

    store_sqlite._execute = recording  # type: ignore[assignment]
    try:
        yield seen
    finally:
        store_sqlite._execute = execute


async def test_the_writer_counts_an_inbox_again_only_near_its_cap(tmp_path: Path) -> None:
    async with aclosing(await Store.open(f"sqlite:///{tmp_path / 'agentpost.db'}")) as store:
        await put(store, "alice", ["bob"])
        assert await full(store, {"bob": 3}) == []  # counted: 1
        await put(store, "alice", ["bob"])
        with statements() as seen:
            assert await full(store, {"bob": 3}) == []  # 2 at most: no count
        assert not [sql for sql in seen if "FROM deliveries" in sql]
        await put(store, "alice", ["bob"])
        with statements() as seen:
            assert await full(store, {"bob": 3}) == ["bob"]
        assert [sql for sql in seen if "FROM deliveries" in sql]
