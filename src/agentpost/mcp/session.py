"""One agent session's MCP server over stdio, wherever its post office lives.

`agentpost mcp` serves the tools of a `Desk`: the local services (`agentpost.mcp.stdio`) or a
remote service through the Python client (`agentpost.mcp.remote`). What both need lives here,
apart from either, so the remote server starts without loading the services and the store.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import anyio
from anyio.abc import TaskGroup

from agentpost import __version__
from agentpost.domain.desk import Desk
from agentpost.domain.errors import AgentpostError
from agentpost.mcp import channel
from agentpost.mcp.adapter import MailboxServer
from agentpost.mcp.leader_tools import register_leader_tools
from agentpost.mcp.presenting import INBOX_URI, inbox_resource
from agentpost.mcp.reservation_tools import register_reservation_tools
from agentpost.mcp.task_tools import register_task_tools
from agentpost.mcp.tools import register_tools
from agentpost.retries import RetryLog

log = logging.getLogger(__name__)
_retries = RetryLog(log)

Background = Callable[[], Coroutine[Any, Any, None]]


def build_server(desk: Desk, instructions: str) -> MailboxServer:
    """The session's server, giving `instructions` (rendered) at `initialize`."""

    async def read_resource(uri: str) -> str:
        return await inbox_resource(desk)

    server = MailboxServer(
        "agentpost",
        __version__,
        instructions,
        read_resource,
        (INBOX_URI,),
        experimental_capabilities={channel.CAPABILITY: {}},
    )
    register_tools(server, desk)
    register_leader_tools(server, desk)
    register_task_tools(server, desk)
    register_reservation_tools(server, desk)
    return server


async def run_session(
    server: MailboxServer,
    background: Sequence[Background],
    *,
    ready: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Serve stdio until the client closes it or a signal stops it, with `background` tasks
    beside; once `ready` returns, if given (say, when push is listening)."""
    async with anyio.create_task_group() as group:
        for task in background:
            group.start_soon(task)
        group.start_soon(_stop_on_sigterm, group)
        if ready is not None:
            await ready()
        await server.run_stdio()
        group.cancel_scope.cancel()


@contextmanager
def survive(what: str) -> Iterator[None]:
    """A busy database (or an unreachable service) must not end the session: log it, and the
    next round tries again."""
    try:
        yield
    except AgentpostError as err:
        _retries.failed(what, err)
    else:
        _retries.recovered(what)


async def every(period_s: float, what: str, action: Callable[[], Awaitable[None]]) -> None:
    """`action` every `period_s`, forever; a failed round is logged and the next one tries."""
    while True:
        await anyio.sleep(period_s)
        with survive(what):
            await action()


async def _stop_on_sigterm(group: TaskGroup) -> None:
    """SIGTERM, SIGHUP, or SIGINT (Ctrl-C in the terminal the client runs in reaches its whole
    process group): stop serving, end the session, exit quietly."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP, signal.SIGINT) as signals:
        async for _ in signals:
            group.cancel_scope.cancel()
            return
