"""Agent and session queries: who exists, who is live, one presence row per agent."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy import Connection

from agentpost.domain.models import SessionInfo, Status
from agentpost.store import agents
from agentpost.store.database import Store
from backends import FakeClock

pytestmark = pytest.mark.anyio

OFFLINE_AFTER = 45.0


def session(sid: str, agent: str, now: float, project: str = "shop") -> SessionInfo:
    return SessionInfo(
        id=sid,
        agent=agent,
        transport="stdio",
        host="host",
        pid=None,
        project=project,
        worktree="/src",
        branch="main",
        objective="",
        status=Status.ACTIVE,
        started_at=now,
        heartbeat_at=now,
        ended_at=None,
    )


async def add(store: Store, name: str, *sessions: str, project: str = "shop") -> None:
    def tx(conn: Connection) -> None:
        agents.create_agent(conn, name, now=store.clock(), project=project)
        for sid in sessions:
            agents.open_session(
                conn, session(sid, name, store.clock(), project), derived_name=False
            )

    await store.write(tx)


async def live(store: Store, agent: str | None = None) -> list[str]:
    def tx(conn: Connection) -> list[str]:
        rows = agents.live_sessions(conn, store.clock(), OFFLINE_AFTER, agent=agent)
        return sorted(r.id for r in rows)

    return await store.read(tx)


async def test_existing_names_tells_enabled_from_disabled_and_omits_unknown(
    store: Store, clock: FakeClock
) -> None:
    await add(store, "alice")
    await add(store, "bob")
    await store.write(lambda c: agents.update_agent(c, "bob", disabled_at=clock()))
    found = await store.read(lambda c: agents.existing_names(c, ["alice", "bob", "carol"]))
    assert found == {"alice": True, "bob": False}
    assert await store.read(agents.enabled_agent_names) == ["alice"]


async def test_a_session_is_live_until_it_ends_or_its_heartbeat_is_too_old(
    store: Store, clock: FakeClock
) -> None:
    await add(store, "alice", "s1", "s2", "s3")
    await store.write(lambda c: agents.end_sessions(c, ["s1"], clock()))
    clock.advance(30)
    await store.write(lambda c: agents.update_session(c, "s2", heartbeat_at=clock()))
    assert await live(store) == ["s2", "s3"]
    clock.advance(15)
    assert await live(store) == ["s2"]
    assert await live(store, "bob") == []


async def test_ending_a_session_twice_keeps_its_first_end(store: Store, clock: FakeClock) -> None:
    await add(store, "alice", "s1")
    await store.write(lambda c: agents.end_sessions(c, ["s1"], clock()))
    ended = clock.now
    clock.advance(10)
    await store.write(lambda c: agents.end_sessions(c, ["s1"], clock()))
    row = await store.read(lambda c: agents.get_session(c, "s1"))
    assert row is not None
    assert row.ended_at == ended


async def test_sessions_the_owner_ended_are_the_local_ones_disabling_ended_enabled_or_not(
    store: Store, clock: FakeClock
) -> None:
    """Not one that ended itself before, nor one over HTTP (no process of this host runs it)."""
    await add(store, "alice", "s_closed", "s_disabled")
    await store.write(
        lambda c: agents.open_session(
            c, replace(session("s_http", "alice", clock()), transport="http"), derived_name=False
        )
    )
    await store.write(lambda c: agents.end_sessions(c, ["s_closed"], clock()))
    clock.advance(1)
    await store.write(lambda c: agents.update_agent(c, "alice", disabled_at=clock()))
    await store.write(lambda c: agents.end_agent_sessions(c, "alice", clock()))
    await store.write(lambda c: agents.update_agent(c, "alice", disabled_at=None))
    found = await store.read(agents.sessions_the_owner_ended)
    assert [row.id for row in found] == ["s_disabled"]


async def test_an_ended_session_takes_no_more_heartbeats(store: Store, clock: FakeClock) -> None:
    await add(store, "alice", "s1", "s2")
    await store.write(lambda c: agents.end_sessions(c, ["s1"], clock()))
    began = clock.now
    clock.advance(10)
    await store.write(lambda c: agents.beat_sessions(c, ["s1", "s2"], clock()))
    ended = await store.read(lambda c: agents.get_session(c, "s1"))
    beating = await store.read(lambda c: agents.get_session(c, "s2"))
    assert ended is not None
    assert ended.heartbeat_at == began
    assert beating is not None
    assert beating.heartbeat_at == clock.now


async def test_presence_has_one_row_per_enabled_agent_with_its_freshest_session(
    store: Store, clock: FakeClock
) -> None:
    await add(store, "alice", "s1", "s2")  # two sessions, equal heartbeats
    await add(store, "bob", "s3", project="blog")
    await add(store, "idle")
    clock.advance(1)
    await store.write(lambda c: agents.update_session(c, "s1", heartbeat_at=clock()))
    rows = await store.read(lambda c: agents.presence_rows(c, None, clock(), OFFLINE_AFTER))
    assert [(r.name, r.session_id) for r in rows] == [
        ("alice", "s1"),
        ("bob", "s3"),
        ("idle", None),
    ]
    shop = await store.read(lambda c: agents.presence_rows(c, "shop", clock(), OFFLINE_AFTER))
    assert [r.name for r in shop] == ["alice", "idle"]


async def test_projects_lists_each_project_of_an_enabled_agent_once(
    store: Store, clock: FakeClock
) -> None:
    await add(store, "a", project="shop")
    await add(store, "b", project="shop")
    await add(store, "c", project="blog")
    await add(store, "d", project="gone")
    await store.write(lambda c: agents.update_agent(c, "d", disabled_at=clock()))
    assert await store.read(agents.projects) == ["blog", "shop"]
    assert sorted(await store.read(lambda c: agents.project_agent_names(c, "shop"))) == ["a", "b"]


NAMES_BY_CODE_POINT = ["a-b", "a.c", "a9", "a_a", "ab"]
"""As SQLite orders them; a database collated for English reads `a_a` before `a-b`."""


async def test_agents_are_listed_by_code_point_whatever_the_databases_collation(
    collated_store: Store,
) -> None:
    store = collated_store
    for name in reversed(NAMES_BY_CODE_POINT):
        await add(store, name, f"s-{name}")

    def listed(conn: Connection) -> list[list[str]]:
        accounts = agents.account_rows(conn, now=store.clock(), offline_after_s=OFFLINE_AFTER)
        return [
            agents.enabled_agent_names(conn),
            [row.name for row in agents.presence_rows(conn, None, store.clock(), OFFLINE_AFTER)],
            [row.name for row in accounts],
        ]

    assert await store.read(listed) == [NAMES_BY_CODE_POINT] * 3
