"""Explicit channel memberships (the implicit ones follow from agents' projects)."""

from __future__ import annotations

import pytest
from sqlalchemy import Connection

from agentpost.store import agents, channels
from agentpost.store.database import Store
from backends import FakeClock

pytestmark = pytest.mark.anyio


async def make(store: Store, *names: str) -> None:
    def tx(conn: Connection) -> None:
        for name in names:
            agents.create_agent(conn, name, now=store.clock())

    await store.write(tx)


async def join(store: Store, channel: str, agent: str) -> None:
    await store.write(lambda c: channels.join(c, store.dialect, channel, agent, store.clock()))


async def test_joining_twice_is_one_membership(store: Store) -> None:
    await make(store, "alice")
    await join(store, "ops", "alice")
    await join(store, "ops", "alice")
    assert await store.read(lambda c: channels.explicit_members(c, "ops")) == ["alice"]
    assert await store.read(lambda c: channels.joined_channels(c, "alice")) == ["ops"]
    assert await store.read(channels.explicit_channels) == {"ops": 1}


async def test_leaving_says_whether_there_was_a_membership(store: Store) -> None:
    await make(store, "alice")
    await join(store, "ops", "alice")
    assert await store.write(lambda c: channels.leave(c, "ops", "alice")) is True
    assert await store.write(lambda c: channels.leave(c, "ops", "alice")) is False
    assert await store.read(channels.explicit_channels) == {}


async def test_disabled_members_are_neither_listed_nor_counted(
    store: Store, clock: FakeClock
) -> None:
    await make(store, "alice", "bob")
    await join(store, "ops", "alice")
    await join(store, "ops", "bob")
    await store.write(lambda c: agents.update_agent(c, "bob", disabled_at=clock()))
    assert await store.read(lambda c: channels.explicit_members(c, "ops")) == ["alice"]
    assert await store.read(channels.explicit_channels) == {"ops": 1}
