"""End-to-end tests of `agentpost.mcp.adapter`: a real server process, the SDK's own client.

Every test runs `_adapter_server.py` as a subprocess over stdio and talks to it with `mcp.Client`,
in both protocol revisions: 2025-11-25 (`mode="legacy"`, initialize handshake) and 2026-07-28
(the default `mode="auto"`, which negotiates it through `server/discover`). Pushes are triggered
by a signal to the server process, never by an MCP request, so they prove delivery with nothing
in flight.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream
from mcp.client.client import Client
from mcp.client.extension import ClientExtension, NotificationBinding
from mcp.client.session import IncomingMessage
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.subscriptions import ResourceUpdated
from pydantic import BaseModel

SERVER_SCRIPT = Path(__file__).with_name("_adapter_server.py")
INBOX = "agentpost://inbox"
OTHER = "agentpost://other"
LEGACY = "2025-11-25"
MODERN = "2026-07-28"
WAIT_S = 10

revisions = pytest.mark.parametrize("revision", [LEGACY, MODERN])


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class ChannelParams(BaseModel):
    content: str
    meta: dict[str, str]


class ChannelListener(ClientExtension):
    """Receives `notifications/claude/channel`, which the SDK client otherwise drops."""

    identifier = "dev.agentpost.test/channel"

    def __init__(self) -> None:
        self.send, self.received = anyio.create_memory_object_stream[ChannelParams](16)

    def notifications(self) -> list[NotificationBinding[Any]]:
        return [
            NotificationBinding(
                method="notifications/claude/channel", params_type=ChannelParams, handler=self._got
            )
        ]

    async def _got(self, params: ChannelParams) -> None:
        await self.send.send(params)


@asynccontextmanager
async def connect(revision: str, exit_marker: Path, **client_kwargs: Any) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable, args=[str(SERVER_SCRIPT), str(exit_marker)]
    )
    mode = "legacy" if revision == LEGACY else "auto"
    async with Client(params, mode=mode, read_timeout_seconds=WAIT_S, **client_kwargs) as client:
        assert client.protocol_version == revision
        yield client


async def server_pid(client: Client) -> int:
    result = await client.call_tool("whoami", {})
    assert result.structured_content is not None
    pid = result.structured_content["pid"]
    assert isinstance(pid, int)
    return pid


def text_of(result: types.CallToolResult) -> str:
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


@revisions
@pytest.mark.anyio
async def test_tools_resources_and_clean_exit(revision: str, tmp_path: Path) -> None:
    marker = tmp_path / "exit"
    async with connect(revision, marker) as client:
        caps = client.server_capabilities
        assert caps.experimental == {"claude/channel": {}}
        assert caps.resources is not None
        assert caps.resources.subscribe is True
        assert client.instructions == "Test post office."

        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == {"echo", "refuse", "crash", "whoami"}
        assert tools["echo"].input_schema["required"] == ["text"]
        assert tools["echo"].description == "Repeat text back."
        assert tools["refuse"].description == "Refuse with a code."

        ok = await client.call_tool("echo", {"text": "hi", "times": 2})
        assert ok.is_error is False
        assert text_of(ok) == "echo: hihi"
        assert ok.structured_content == {"text": "hi", "times": 2}

        refused = await client.call_tool("refuse", {"code": "inbox_full"})
        assert refused.is_error is True
        assert text_of(refused) == "inbox_full: nothing here"
        assert refused.structured_content == {
            "error": {
                "code": "inbox_full",
                "message": "nothing here",
                "details": {"asked": "inbox_full"},
            }
        }

        invalid = await client.call_tool("echo", {"times": "many"})
        assert invalid.is_error is True
        text = text_of(invalid)
        assert text.startswith("invalid_argument: ")
        assert "text: Field required" in text
        assert "times: " in text
        assert "many" not in text  # the caller's values are not echoed

        crashed = await client.call_tool("crash", {})
        assert crashed.is_error is True
        assert text_of(crashed) == "Error executing tool crash"

        with pytest.raises(MCPError) as unknown:
            await client.call_tool("nope", {})
        assert unknown.value.code == types.INVALID_PARAMS

        listed = (await client.list_resources()).resources
        assert [(r.uri, r.name, r.mime_type) for r in listed] == [
            (INBOX, "inbox", "application/json"),
            (OTHER, "other", "application/json"),
        ]
        read = await client.read_resource(INBOX)
        [contents] = read.contents
        assert isinstance(contents, types.TextResourceContents)
        assert json.loads(contents.text) == {"messages": []}
        with pytest.raises(MCPError) as missing:
            await client.read_resource("agentpost://nowhere")
        assert missing.value.message.startswith("not_found: ")

    # Closing stdin lets run_stdio() return normally, so the script gets to write its marker.
    assert marker.read_text() == "run_stdio returned"


@revisions
@pytest.mark.anyio
async def test_resource_update_pushed_with_no_request_in_flight(
    revision: str, tmp_path: Path
) -> None:
    if revision == LEGACY:
        await _legacy_subscribe_and_receive(tmp_path / "exit")
    else:
        await _modern_listen_and_receive(tmp_path / "exit")


async def _legacy_subscribe_and_receive(marker: Path) -> None:
    send, updates = anyio.create_memory_object_stream[str](16)

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            await send.send(message.params.uri)

    with send, updates:
        async with connect(LEGACY, marker, message_handler=on_message) as client:
            await _subscribe_switch_and_receive(client, updates)


async def _subscribe_switch_and_receive(
    client: Client, updates: MemoryObjectReceiveStream[str]
) -> None:
    pid = await server_pid(client)
    with pytest.warns(MCPDeprecationWarning):
        await client.subscribe_resource(INBOX)
    with pytest.warns(MCPDeprecationWarning):
        await client.subscribe_resource(INBOX)  # idempotent: still one notification

    os.kill(pid, signal.SIGUSR1)  # server pushes INBOX, then OTHER
    with anyio.fail_after(WAIT_S):
        assert await updates.receive() == INBOX

    # Switch subscriptions; the next push must carry OTHER only.
    with pytest.warns(MCPDeprecationWarning):
        await client.unsubscribe_resource(INBOX)
    with pytest.warns(MCPDeprecationWarning):
        await client.subscribe_resource(OTHER)
    os.kill(pid, signal.SIGUSR1)
    with anyio.fail_after(WAIT_S):
        # A stale INBOX push, or a duplicate from the double subscribe, would come first.
        assert await updates.receive() == OTHER


async def _modern_listen_and_receive(marker: Path) -> None:
    async with connect(MODERN, marker) as client:
        pid = await server_pid(client)
        async with client.listen(resource_subscriptions=[INBOX]) as subscription:
            assert subscription.honored.resource_subscriptions == [INBOX]
            os.kill(pid, signal.SIGUSR1)  # server publishes INBOX, then OTHER (filtered out)
            with anyio.fail_after(WAIT_S):
                event = await anext(subscription)
            assert event == ResourceUpdated(uri=INBOX)


@pytest.mark.anyio
async def test_custom_channel_notification_reaches_legacy_client(tmp_path: Path) -> None:
    listener = ChannelListener()
    with listener.send, listener.received:
        async with connect(LEGACY, tmp_path / "exit", extensions=[listener]) as client:
            pid = await server_pid(client)
            os.kill(pid, signal.SIGUSR2)
            with anyio.fail_after(WAIT_S):
                got = await listener.received.receive()
    assert got == ChannelParams(content="you have mail", meta={"sender": "alice"})
