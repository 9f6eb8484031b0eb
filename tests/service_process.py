"""`agentpost serve` as a real process on a loopback port, and HTTP clients that talk to it.

The server is started the way a user starts it (the console script), on the test's own
AGENTPOST_HOME, with port 0 so the kernel picks a free port; the port is read from uvicorn's
own "running on" line.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from stdio_agents import LEGACY

AGENTPOST = Path(sys.executable).with_name("agentpost")
START_TIMEOUT_S = 30
_RUNNING = re.compile(rb"running on http://127\.0\.0\.1:(\d+)")


def serve_command(*args: str) -> list[str]:
    if AGENTPOST.exists():
        return [str(AGENTPOST), "serve", *args]
    return [sys.executable, "-m", "agentpost.cli.entry", "serve", *args]


@dataclass
class Service:
    """One running `agentpost serve`; `restart()` keeps its home (and so its database)."""

    home: Path
    log: Path
    env: dict[str, str]
    process: anyio.abc.Process | None = None
    port: int = 0
    admin_key: str = ""
    clients: list[httpx.AsyncClient] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = await anyio.open_process(
                # Port 0 the first time (the kernel picks); the same port on a restart, so the
                # clients made before it reach the new process.
                serve_command("--port", str(self.port)),
                env=self.env,
                stdout=out,
                stderr=out,
            )
        with anyio.fail_after(START_TIMEOUT_S):
            while True:
                found = _RUNNING.search(self.log.read_bytes().split(b"--restart--")[-1])
                if found:
                    self.port = int(found.group(1))
                    break
                if self.process.returncode is not None:
                    pytest.fail(f"agentpost serve exited:\n{self.log.read_text()}")
                await anyio.sleep(0.05)
        configured = self.env.get("AGENTPOST_ADMIN_KEY")
        self.admin_key = configured or (self.home / "admin.key").read_text().strip()

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            with anyio.fail_after(15):
                await self.process.wait()
        with self.log.open("ab") as out:
            out.write(b"\n--restart--\n")

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    def client(self, key: str | None = None, **headers: str) -> httpx.AsyncClient:
        """An HTTP client for this service, speaking with `key` (none: anonymous)."""
        sent = dict(headers)
        if key is not None:
            sent["Authorization"] = f"Bearer {key}"
        client = httpx.AsyncClient(base_url=self.url, headers=sent, timeout=30)
        self.clients.append(client)
        return client

    @property
    def admin(self) -> httpx.AsyncClient:
        return self.client(self.admin_key)

    async def create_agent(self, name: str, **fields: Any) -> str:
        """Create an agent with the admin key; its key."""
        answer = await self.admin.post("/v1/admin/agents", json={"name": name, **fields})
        assert answer.status_code == 201, answer.text
        key: str = answer.json()["key"]["key"]
        return key

    async def agent(self, name: str, **fields: Any) -> httpx.AsyncClient:
        return self.client(await self.create_agent(name, **fields))

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()
        await self.stop()


@asynccontextmanager
async def running_service(
    tmp_path: Path, env: Mapping[str, str] | None = None
) -> AsyncIterator[Service]:
    environ = dict(os.environ)  # AGENTPOST_HOME and AGENTPOST_CONFIG of this test
    environ.update(env or {})
    home = Path(environ["AGENTPOST_HOME"])
    service = Service(home=home, log=tmp_path / "serve.log", env=environ)
    try:
        await service.start()
        yield service
    except BaseException:
        sys.stderr.write(service.log.read_text() if service.log.exists() else "")
        raise
    finally:
        await service.aclose()


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[Service]:
    """A running `agentpost serve` on this test's home."""
    async with running_service(tmp_path) as running:
        yield running


async def eventually(check: Callable[[], Awaitable[bool]], within_s: float = 10) -> None:
    """Until `check` holds, asked again every 50 ms: for what only another process's state
    shows (a server saw a client leave). Fails after `within_s`."""
    with anyio.fail_after(within_s):
        while True:
            if await check():
                return
            await anyio.sleep(0.05)


@asynccontextmanager
async def over_http(service: Service, key: str, revision: str) -> AsyncIterator[Client]:
    """An MCP client of the service's `/mcp`, speaking with `key` in protocol `revision`."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http,
        Client(
            streamable_http_client(f"{service.url}/mcp", http_client=http),
            mode="legacy" if revision == LEGACY else "auto",
            read_timeout_seconds=30,
        ) as client,
    ):
        yield client
