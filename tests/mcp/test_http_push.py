"""Push over HTTP: each agent's connections hear of new mail, and one agent's client that
stopped reading holds up nobody else's news. Through the `push_news` seam, with a real store;
the end-to-end push is in test_http_service.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import cast

import anyio
import pytest

from agentpost.mcp.adapter import MailboxServer
from agentpost.mcp.http import push_news
from agentpost.services import PostOffice

pytestmark = pytest.mark.anyio


class StallingServer:
    """Tells every agent at once, except `stalled`, whose telling hangs until `release`."""

    def __init__(self, stalled: str, connected: frozenset[str] | None = None) -> None:
        self.stalled = stalled
        self.connected = connected
        """The agents with a connection that may hear news (None: every one)."""
        self.release = anyio.Event()
        self.stalling = anyio.Event()
        self.told: list[str] = []
        self.telling_stalled = 0
        self.most_at_once = 0
        self._told_more = anyio.Event()

    def may_hear(self, audience: str) -> bool:
        return self.connected is None or audience in self.connected

    async def notify_resource_updated(self, uri: str, audience: str | None = None) -> None:
        assert audience is not None
        if audience == self.stalled:
            self.telling_stalled += 1
            self.most_at_once = max(self.most_at_once, self.telling_stalled)
            self.stalling.set()
            try:
                await self.release.wait()
            finally:
                self.telling_stalled -= 1
        self.told.append(audience)
        self._told_more.set()

    async def told_at_least(self, count: int) -> list[str]:
        with anyio.fail_after(5):
            while len(self.told) < count:
                self._told_more = anyio.Event()
                await self._told_more.wait()
        return self.told


@asynccontextmanager
async def pushing(office: PostOffice, server: StallingServer) -> AsyncIterator[None]:
    async with anyio.create_task_group() as tg:
        tg.start_soon(push_news, office, cast(MailboxServer, server))
        await anyio.sleep(0.2)  # its watch is open before the first send
        yield
        tg.cancel_scope.cancel()


async def test_an_agent_whose_client_stopped_reading_holds_up_no_other_agents_news(
    office: PostOffice,
) -> None:
    alice, bob, _ = [await office.presence.ensure_agent(n) for n in ("alice", "bob", "carol")]
    server = StallingServer(stalled="alice")
    async with pushing(office, server):
        await office.mailbox.send(bob, "alice", "to the stalled one")
        with anyio.fail_after(5):
            await server.stalling.wait()

        await office.mailbox.send(alice, "carol", "to another")
        assert await server.told_at_least(1) == ["carol"]


async def test_news_for_an_agent_being_told_is_told_once_more_after(office: PostOffice) -> None:
    _, bob = [await office.presence.ensure_agent(n) for n in ("alice", "bob")]
    server = StallingServer(stalled="alice")
    async with pushing(office, server):
        await office.mailbox.send(bob, "alice", "first")
        with anyio.fail_after(5):
            await server.stalling.wait()
        for n in range(3):  # news while the first telling hangs
            await office.mailbox.send(bob, "alice", f"more {n}")
        await anyio.sleep(0.3)
        server.release.set()

        assert await server.told_at_least(2) == ["alice", "alice"]
        await anyio.sleep(0.3)
        assert server.told == ["alice", "alice"]
        assert server.most_at_once == 1


async def test_news_for_an_agent_without_a_connection_is_told_to_nobody(
    office: PostOffice,
) -> None:
    _, bob, carol = [await office.presence.ensure_agent(n) for n in ("alice", "bob", "carol")]
    server = StallingServer(stalled="nobody", connected=frozenset({"alice"}))
    async with pushing(office, server):
        await office.mailbox.send(bob, "carol", "to one who is not connected")
        await office.mailbox.send(carol, "alice", "to one who is")
        assert await server.told_at_least(1) == ["alice"]
        await anyio.sleep(0.3)
        assert server.told == ["alice"]
