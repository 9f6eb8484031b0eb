"""A raw MCP client of a real `agentpost mcp` process: JSON-RPC lines on its pipes, no SDK.

The SDK's client drops notifications it has no type for, so what a Claude Code channel
receives (`notifications/claude/channel`) is read here straight off the server's stdout: every
notification is kept, in the order it arrived, whatever its method.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from stdio_agents import LEGACY, server_command

LINE_LIMIT = 16 * 1024 * 1024


def legacy_initialize(request_id: int = 1, client: str = "raw-test-client") -> dict[str, Any]:
    """The `initialize` request of a 2025-11-25 client that speaks JSON-RPC by hand."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": {"name": client, "version": "0"},
        },
    }


class RawSession:
    """One `agentpost mcp` process, spoken to over its pipes as a 2025-11-25 client."""

    def __init__(self, process: Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self.process = process
        self._lines = BufferedByteReceiveStream(process.stdout)
        self._next_id = 0
        self.notifications: list[dict[str, Any]] = []
        """Every notification read so far, oldest first."""
        self.initialized: dict[str, Any] = {}
        """The `initialize` result."""

    async def _write(self, message: Mapping[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(json.dumps(message).encode() + b"\n")

    async def _read(self) -> dict[str, Any]:
        line = await self._lines.receive_until(b"\n", LINE_LIMIT)
        message = json.loads(line)
        assert isinstance(message, dict)
        if "id" not in message:
            self.notifications.append(message)
        return message

    async def request(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """Send a request and return its result; notifications read meanwhile are kept."""
        self._next_id += 1
        await self._write(
            {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params}
        )
        while True:
            message = await self._read()
            if message.get("id") == self._next_id:
                assert "error" not in message, message
                result = message["result"]
                assert isinstance(result, dict)
                return result

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        await self._write({"jsonrpc": "2.0", "method": method, "params": dict(params or {})})

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """A tool's structured answer (the call must succeed)."""
        result = await self.request("tools/call", {"name": tool, "arguments": arguments})
        assert not result.get("isError"), result
        structured = result["structuredContent"]
        assert isinstance(structured, dict)
        return structured

    async def next_notification(self, method: str) -> dict[str, Any]:
        """The params of the next notification of `method` not yet taken (others are skipped)."""
        while True:
            for index, message in enumerate(self.notifications):
                if message.get("method") == method:
                    del self.notifications[index]
                    params = message["params"]
                    assert isinstance(params, dict)
                    return params
            await self._read()


@asynccontextmanager
async def raw_session(
    cwd: Path, env: Mapping[str, str], stderr: Path, args: tuple[str, ...] = ()
) -> AsyncIterator[RawSession]:
    """A real `agentpost mcp` process, initialized; closing stdin ends it."""
    command, base = server_command()
    environ = {**os.environ, **env}
    with stderr.open("ab") as errlog:
        process = await anyio.open_process(
            [command, *base, *args], cwd=cwd, env=environ, stderr=errlog
        )
        async with process:
            session = RawSession(process)
            with anyio.fail_after(60):
                hello = legacy_initialize()
                session.initialized = await session.request(hello["method"], hello["params"])
                await session.notify("notifications/initialized")
            try:
                yield session
            finally:
                assert process.stdin is not None
                await process.stdin.aclose()
                with anyio.fail_after(30):
                    await process.wait()
