"""What a key holds open over MCP Streamable HTTP ends at once when the key is revoked or its
agent disabled, as over REST (tests/http/test_rest_keys.py): a 2026-07-28
`subscriptions/listen` stream, a 2025-11-25 connection's own stream and a `wait` tool call in
flight. The streams ended only at their next heartbeat (15 s by default); each test asks for
its end well within one, with no news to wake it."""

from __future__ import annotations

from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp.client.subscriptions import SubscriptionLost
from mcp.shared.exceptions import MCPError

from raw_stdio import legacy_initialize
from service_process import Service, over_http
from stdio_agents import INBOX_URI, LEGACY, MODERN

pytestmark = pytest.mark.anyio

AT_ONCE_S = 3
"""Well within the default 15 s heartbeat the service runs with here."""

TURNED_OFF = pytest.mark.parametrize("how", ["key_revoked", "agent_disabled"])


async def alice_and_turn_off(service: Service) -> tuple[str, Any]:
    """Alice's key, and how to revoke it or disable her over the admin REST API."""
    created = (await service.admin.post("/v1/admin/agents", json={"name": "alice"})).json()

    async def turn_off(how: str) -> None:
        if how == "key_revoked":
            answer = await service.admin.delete(f"/v1/admin/keys/{created['key']['id']}")
        else:
            answer = await service.admin.post("/v1/admin/agents/alice/disable")
        assert answer.status_code == 200, answer.text

    return created["key"]["key"], turn_off


async def refused_next(service: Service, key: str, how: str) -> None:
    """The key's next request is refused, saying why."""
    error = (await service.client(key).get("/v1/inbox")).json()["error"]
    assert (error["code"], error["details"]) == ("unauthenticated", {"reason": how})


@TURNED_OFF
async def test_a_listen_stream_ends_at_once_when_its_key_is_turned_off(
    service: Service, how: str
) -> None:
    key, turn_off = await alice_and_turn_off(service)
    async with over_http(service, key, MODERN) as alice:
        await alice.call_tool("whoami", {})
        async with alice.listen(resource_subscriptions=[INBOX_URI]) as events:
            await anyio.sleep(0.5)  # the stream is open
            await turn_off(how)
            with anyio.fail_after(AT_ONCE_S), pytest.raises(SubscriptionLost) as lost:
                await anext(events)
        why = lost.value.__cause__ or lost.value.__context__
        assert isinstance(why, MCPError)
        assert str(why).startswith("unauthenticated: ")
    await refused_next(service, key, how)


@TURNED_OFF
async def test_a_legacy_connections_own_stream_ends_at_once_when_its_key_is_turned_off(
    service: Service, how: str
) -> None:
    key, turn_off = await alice_and_turn_off(service)
    http = service.client(key, Accept="application/json, text/event-stream")
    hello = await http.post("/mcp", json=legacy_initialize())
    assert hello.status_code == 200, hello.text
    on_it = {"Mcp-Session-Id": hello.headers["mcp-session-id"], "MCP-Protocol-Version": LEGACY}
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await http.post("/mcp", json=initialized, headers=on_it)).status_code == 202
    async with http.stream("GET", "/mcp", headers=on_it) as stream:
        assert stream.status_code == 200
        await anyio.sleep(0.5)  # the stream is open
        await turn_off(how)
        with anyio.fail_after(AT_ONCE_S):
            async for _ in stream.aiter_bytes():
                pass
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    refused = await http.post("/mcp", json=ping, headers=on_it)
    assert refused.status_code == 401
    await refused_next(service, key, how)


@TURNED_OFF
async def test_a_wait_tool_call_ends_at_once_when_its_key_is_turned_off(
    service: Service, revision: str, how: str
) -> None:
    key, turn_off = await alice_and_turn_off(service)
    results: list[types.CallToolResult] = []
    async with over_http(service, key, revision) as alice:

        async def wait() -> None:
            results.append(await alice.call_tool("wait", {"timeout_s": 60}))

        with anyio.fail_after(0.5 + AT_ONCE_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await anyio.sleep(0.5)  # the wait is open
                await turn_off(how)
    (result,) = results
    assert result.is_error
    assert result.structured_content is not None
    error = result.structured_content["error"]
    assert (error["code"], error["details"]) == ("unauthenticated", {"reason": how})
    await refused_next(service, key, how)
