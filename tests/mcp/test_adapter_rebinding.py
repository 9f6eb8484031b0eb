"""`RebindingCheck`, the DNS-rebinding protection in front of `/mcp`, called as ASGI in process
(the end to end case is in test_http_service.py)."""

from __future__ import annotations

import json

import pytest
from starlette.types import Message, Receive, Scope, Send

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.mcp.adapter.rebinding import RebindingCheck

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def passed(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"passed", "more_body": False})


async def nothing_sent() -> Message:
    return {"type": "http.disconnect"}


async def answer(
    host: str | None,
    origin: str | None = None,
    *,
    hosts: tuple[str, ...] = (),
    origins: tuple[str, ...] = (),
) -> tuple[int, str]:
    """The status a request naming `host` and `origin` gets, and its body."""
    headers = [] if host is None else [(b"host", host.encode())]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers}
    sent: list[Message] = []

    async def record(message: Message) -> None:
        sent.append(message)

    check = RebindingCheck(passed, allowed_hosts=hosts, allowed_origins=origins)
    await check(scope, nothing_sent, record)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], body.decode()


@pytest.mark.parametrize(
    "host", ["127.0.0.1:8470", "localhost:8470", "[::1]:8470", "LocalHost:8470", "localhost"]
)
async def test_a_loopback_host_passes_in_any_case_on_any_port_or_none(host: str) -> None:
    assert await answer(host) == (200, "passed")


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:8470",
        "127.0.0.1:8470.evil.example",
        "localhost.:8470",
        "localhost:",
        "[::1]x",
        "",
        None,
    ],
)
async def test_a_host_that_is_not_loopback_nor_listed_is_refused(host: str | None) -> None:
    status, body = await answer(host)
    assert status == 421
    message = json.loads(body)["error"]["message"]
    assert message.startswith("forbidden: ")
    assert "allowed_hosts" in message


async def test_a_listed_host_passes_as_listed() -> None:
    listed = ("box.lan:8470", "Proxy.Example:*", "bare.example")
    for host in ("box.lan:8470", "proxy.example:443", "PROXY.example", "bare.example"):
        assert (await answer(host, hosts=listed))[0] == 200, host
    for host in ("box.lan:8471", "box.lan", "bare.example:80"):
        assert (await answer(host, hosts=listed))[0] == 421, host


@pytest.mark.parametrize(
    "origin",
    ["http://127.0.0.1:5173", "http://LOCALHOST:8470", "http://localhost", "http://[::1]:1"],
)
async def test_a_loopback_origin_passes(origin: str) -> None:
    assert await answer("localhost:8470", origin) == (200, "passed")


@pytest.mark.parametrize(
    "origin",
    [
        "null",
        "https://evil.example",
        "http://127.0.0.1.evil.example:80",
        "http://127.0.0.1:8470/",
        "file://",
        "",
    ],
)
async def test_an_origin_that_is_not_loopback_nor_listed_is_refused(origin: str) -> None:
    status, body = await answer("localhost:8470", origin)
    assert status == 403
    assert "allowed_origins" in json.loads(body)["error"]["message"]


async def test_a_listed_origin_passes_with_its_scheme() -> None:
    listed = ("https://console.example", "https://dev.example:*")
    for origin in ("https://console.example", "https://dev.example:8443"):
        assert (await answer("localhost:8470", origin, origins=listed))[0] == 200, origin
    for origin in ("http://console.example", "https://console.example:8443"):
        assert (await answer("localhost:8470", origin, origins=listed))[0] == 403, origin


async def test_a_listed_http_origin_passes_as_http_only() -> None:
    listed = ("http://console.example:8470",)
    assert (await answer("localhost:8470", "http://console.example:8470", origins=listed))[0] == 200
    assert (await answer("localhost:8470", "https://console.example:8470", origins=listed))[
        0
    ] == 403


@pytest.mark.parametrize(
    ("hosts", "origins", "named"),
    [
        (("agents.example/mcp",), (), "allowed_hosts holds 'agents.example/mcp'"),
        (("admin@agents.example",), (), "allowed_hosts holds 'admin@agents.example'"),
        (("agents example",), (), "allowed_hosts holds 'agents example'"),
        (("[agents.example]:8470",), (), "allowed_hosts holds '[agents.example]:8470'"),
        ((), ("https://admin@agents.example",), "allowed_origins holds 'https://admin@agents"),
    ],
)
def test_a_listed_name_no_request_could_carry_is_refused_naming_it(
    hosts: tuple[str, ...], origins: tuple[str, ...], named: str
) -> None:
    """Taken as a name, `agents.example/mcp` matched no `Host` ever sent: the server started
    and refused every request from the host the user meant to let in."""
    with pytest.raises(AgentpostError) as refused:
        RebindingCheck(passed, allowed_hosts=hosts, allowed_origins=origins)
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT
    assert named in refused.value.message


def test_a_listed_ipv6_name_is_a_name() -> None:
    RebindingCheck(passed, allowed_hosts=("[2001:db8::1]:8470", "[fe80::1]"))
