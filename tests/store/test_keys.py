"""Keys as authentication reads them: one statement finds the address's lock, the key with
its agent, and the session the request speaks for."""

from __future__ import annotations

import pytest
from sqlalchemy import Connection

from agentpost.domain.models import SessionInfo, Status
from agentpost.store import agents, keys, lockouts
from agentpost.store.database import Store
from backends import FakeClock

pytestmark = pytest.mark.anyio

ADDRESS = "203.0.113.7"


async def a_key(store: Store, key_id: str = "k_abc123") -> None:
    def tx(conn: Connection) -> None:
        agents.create_agent(conn, "alice", now=store.clock(), project="shop")
        keys.insert_key(
            conn, key_id=key_id, agent="alice", digest="h1", admin=False, label="", now=1.0
        )
        own = SessionInfo(
            id=keys.own_session_id(key_id),
            agent="alice",
            transport="http",
            host=ADDRESS,
            pid=None,
            project="shop",
            worktree=None,
            branch=None,
            objective="",
            status=Status.ACTIVE,
            started_at=1.0,
            heartbeat_at=1.0,
            ended_at=None,
        )
        agents.open_session(conn, own, derived_name=False)

    await store.write(tx)


async def test_a_request_without_a_session_finds_the_keys_own(store: Store) -> None:
    await a_key(store)
    row = await store.read(
        lambda conn: keys.for_request(conn, digest="h1", ip=ADDRESS, session=None)
    )
    assert (row.id, row.agent, row.project, row.locked_at) == ("k_abc123", "alice", "shop", None)
    assert (row.session_id, row.session_agent) == (keys.own_session_id("k_abc123"), "alice")


async def test_an_unknown_key_still_reads_the_lock_of_its_address(
    store: Store, clock: FakeClock
) -> None:
    await store.write(
        lambda conn: lockouts.count_failure(conn, store.dialect, ADDRESS, clock.now, 900.0, 1)
    )
    row = await store.read(
        lambda conn: keys.for_request(conn, digest=None, ip=ADDRESS, session="s_x")
    )
    assert (row.locked_at, row.id, row.session_id) == (clock.now, None, None)


async def test_a_named_session_that_does_not_exist_is_none(store: Store) -> None:
    await a_key(store)
    row = await store.read(
        lambda conn: keys.for_request(conn, digest="h1", ip=ADDRESS, session="s_elsewhere")
    )
    assert (row.id, row.session_id) == ("k_abc123", None)
