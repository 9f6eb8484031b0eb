"""`MailboxServer` over Streamable HTTP: real uvicorn on loopback, the SDK's own client.

What only HTTP has: `Mcp-Param-*` headers, which a 2026-07-28 client mirrors from the arguments
a tool's schema declares (`x-mcp-header`), and which the server compares with the body.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import anyio
import httpx
import httpx2
import pytest
import uvicorn
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from pydantic import Field

from agentpost.mcp.adapter import MailboxServer, ToolOutput
from raw_stdio import legacy_initialize
from stdio_agents import LEGACY

pytestmark = pytest.mark.anyio
WAIT_S = 10


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def read_resource(uri: str) -> str:
    return "{}"


async def routed(
    region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})],
) -> ToolOutput:
    """A tool whose `region` rides in a header too, for intermediaries to route on."""
    return ToolOutput(text=region, structured={"region": region})


async def plain(text: str) -> ToolOutput:
    """A tool that declares no header."""
    return ToolOutput(text=text, structured={"text": text})


class Uvicorn(uvicorn.Server):
    """uvicorn, telling when it listens."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = anyio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.listening.set()


@asynccontextmanager
async def serving() -> AsyncIterator[str]:
    """The server's /mcp URL, with uvicorn serving it on a free loopback port."""
    server = MailboxServer("agentpost-test", "0.0.1", "Test post office.", read_resource)
    server.add_tool(routed)
    server.add_tool(plain)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning", lifespan="on")
    web = Uvicorn(config)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: web.serve(sockets=[sock]))
            with anyio.fail_after(WAIT_S):
                await web.listening.wait()
            try:
                yield f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
            finally:
                web.should_exit = True


@asynccontextmanager
async def client(url: str, mode: str = "auto", **forced: str) -> AsyncIterator[Client]:
    """The SDK's client; `forced` headers replace what it sends (the way a proxy could)."""

    async def force(request: httpx2.Request) -> None:
        request.headers.update(forced)

    async with (
        httpx2.AsyncClient(timeout=WAIT_S, event_hooks={"request": [force]}) as http,
        Client(
            streamable_http_client(url, http_client=http),
            read_timeout_seconds=WAIT_S,
            mode=mode,
        ) as c,
    ):
        yield c


async def test_a_declared_header_that_matches_the_argument_passes() -> None:
    async with serving() as url, client(url) as c:
        result = await c.call_tool("routed", {"region": "eu"})

    assert result.structured_content == {"region": "eu"}


async def test_a_declared_header_that_contradicts_the_argument_is_refused() -> None:
    async with serving() as url, client(url, **{"Mcp-Param-Region": "us"}) as c:
        with pytest.raises(MCPError, match="Mcp-Param-Region"):
            await c.call_tool("routed", {"region": "eu"})


async def test_a_tool_that_declares_no_header_ignores_such_headers() -> None:
    async with serving() as url, client(url, **{"Mcp-Param-Region": "us"}) as c:
        result = await c.call_tool("plain", {"text": "hi"})

    assert result.structured_content == {"text": "hi"}


async def test_a_stream_reopened_with_a_last_event_id_is_a_new_stream() -> None:
    """No event store keeps what a stream carried, so there is nothing to replay: a client that
    reopens its 2025-era stream with `Last-Event-ID` gets a stream from now on (it was a 500,
    the SDK answering nothing at all)."""
    accepts = {"Accept": "application/json, text/event-stream"}
    async with serving() as url, httpx.AsyncClient(headers=accepts, timeout=WAIT_S) as http:
        hello = await http.post(url, json=legacy_initialize())
        on_it = {"Mcp-Session-Id": hello.headers["mcp-session-id"], "MCP-Protocol-Version": LEGACY}
        done = await http.post(
            url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=on_it
        )
        assert done.status_code == 202
        reopened = {**on_it, "Accept": "text/event-stream", "Last-Event-ID": "7"}
        async with http.stream("GET", url, headers=reopened) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")


async def test_a_subscription_to_a_resource_not_served_is_refused() -> None:
    """Each subscription is kept for as long as its connection lives: one to any URI at all
    let a client fill the server's memory, a URI of a few hundred kilobytes at a time."""
    async with serving() as url, client(url, mode="legacy") as c:
        with pytest.warns(MCPDeprecationWarning), pytest.raises(MCPError, match="not_found"):
            await c.subscribe_resource("agentpost://" + "x" * 1000)
        with pytest.warns(MCPDeprecationWarning):
            await c.subscribe_resource("agentpost://inbox")
