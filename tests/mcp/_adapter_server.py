"""A real stdio MCP server built on `MailboxServer`, for the adapter's end-to-end tests.

Pushes are triggered from outside any MCP request, by a signal, so a test proves they arrive
with no request in flight: SIGUSR1 marks "agentpost://inbox" then "agentpost://other" updated,
SIGUSR2 sends a `notifications/claude/channel` message. The tool `whoami` hands out the pid.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import anyio
import anyio.abc

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.mcp.adapter import MailboxServer, ToolOutput

INBOX = "agentpost://inbox"
OTHER = "agentpost://other"
CHANNEL_METHOD = "notifications/claude/channel"


async def echo(text: str, times: int = 1) -> ToolOutput:
    """Repeat text back."""
    return ToolOutput(text=f"echo: {text * times}", structured={"text": text, "times": times})


async def refuse(code: str = "not_found") -> ToolOutput:
    """Always refuse with the given stable code."""
    raise AgentpostError(ErrorCode(code), "nothing here", details={"asked": code})


async def crash() -> ToolOutput:
    """Fail like a bug would."""
    raise RuntimeError("secret internal detail")


async def whoami() -> ToolOutput:
    """Report this process's pid, so a test can signal it."""
    return ToolOutput(text=f"pid {os.getpid()}", structured={"pid": os.getpid()})


async def read_resource(uri: str) -> str:
    if uri not in (INBOX, OTHER):
        raise AgentpostError(ErrorCode.NOT_FOUND, f"no resource {uri}")
    return json.dumps({"messages": []})


async def push_on_signals(
    server: MailboxServer, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    with anyio.open_signal_receiver(signal.SIGUSR1, signal.SIGUSR2) as signals:
        task_status.started()
        async for signum in signals:
            if signum == signal.SIGUSR1:
                await server.notify_resource_updated(INBOX)
                await server.notify_resource_updated(OTHER)
            else:
                await server.send_custom_notification(
                    CHANNEL_METHOD, {"content": "you have mail", "meta": {"sender": "alice"}}
                )


async def main(exit_marker: Path) -> None:
    server = MailboxServer(
        "agentpost-test",
        "0.0.1",
        "Test post office.",
        read_resource,
        resource_uris=(INBOX, OTHER),
        experimental_capabilities={"claude/channel": {}},
    )
    server.add_tool(echo)
    server.add_tool(refuse, description="Refuse with a code.")
    server.add_tool(crash)
    server.add_tool(whoami)
    async with anyio.create_task_group() as tg:
        await tg.start(push_on_signals, server)
        await server.run_stdio()
        await anyio.Path(exit_marker).write_text("run_stdio returned")
        tg.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main, Path(sys.argv[1]))
