"""The service's own lifecycle, in process: what `agentpost serve` does when part of it dies.

Driven through the ASGI lifespan protocol, as uvicorn drives it. (The HTTP faces are tested
against a real `agentpost serve` process in tests/http and tests/mcp.)
"""

from __future__ import annotations

import contextlib
import logging
import re
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from agentpost.config import Settings
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.service import Service, first_start_note, load_or_create_admin_key
from agentpost.services.sweeper import Sweeper

pytestmark = pytest.mark.anyio


async def test_a_background_task_that_dies_stops_the_server_rather_than_leave_it_half_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The store closes with the task group: a server that went on would answer every
    request `unavailable` while its health check still said ok."""

    async def broken(self: Sweeper) -> None:
        raise RuntimeError("the sweeper broke")

    monkeypatch.setattr(Sweeper, "run", broken)
    app = Service(Settings(home=tmp_path / "home"), on_admin_key=lambda key, created: None)
    stopped = anyio.Event()
    app.on_failure = stopped.set
    to_app, app_receives = anyio.create_memory_object_stream[dict[str, Any]](4)
    app_sends, from_app = anyio.create_memory_object_stream[dict[str, Any]](4)

    async def receive() -> dict[str, Any]:
        return await app_receives.receive()

    async def send(message: dict[str, Any]) -> None:
        await app_sends.send(message)

    streams = (to_app, app_receives, app_sends, from_app)
    with caplog.at_level(logging.CRITICAL, logger="agentpost.service"), anyio.fail_after(10):
        async with contextlib.AsyncExitStack() as stack, anyio.create_task_group() as group:
            for stream in streams:
                await stack.enter_async_context(stream)
            group.start_soon(app, {"type": "lifespan"}, receive, send)
            await to_app.send({"type": "lifespan.startup"})
            assert (await from_app.receive())["type"] == "lifespan.startup.complete"
            await stopped.wait()  # no shutdown was asked for
    assert isinstance(app.failed, RuntimeError)
    assert "agentpost stopped serving: the sweeper broke" in caplog.text


@pytest.mark.parametrize(
    ("host", "base"),
    [("127.0.0.1", "http://127.0.0.1:8470"), ("::1", "http://[::1]:8470")],
)
def test_the_first_start_note_gives_urls_a_client_can_open(
    tmp_path: Path, host: str, base: str
) -> None:
    note = first_start_note(Settings(home=tmp_path), "ap_k", host, 8470)
    assert f"agentpost admin create-agent alice --url {base} --key ap_k\n" in note
    assert f"curl -s -X POST {base}/v1/admin/agents " in note
    assert f"agentpost {base}/mcp " in note
    for url in re.findall(r"http://\S+", note):
        assert httpx.URL(url).port == 8470, url


@pytest.mark.parametrize("content", [b"", b"\n", b"short\n", b"\xff" * 40])
def test_an_admin_key_file_holding_no_key_is_refused_naming_the_file(
    tmp_path: Path, content: bytes
) -> None:
    (tmp_path / "admin.key").write_bytes(content)
    with pytest.raises(AgentpostError) as caught:
        load_or_create_admin_key(Settings(home=tmp_path))
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert f"{tmp_path / 'admin.key'} holds no admin key" in caught.value.message
