"""`agentpost mcp`: one agent session over stdio, on the local post office.

The process registers its session, heartbeats in the background, pushes "your inbox changed"
to a subscribed client and each new message to Claude Code's channel (`agentpost.mcp.channel`)
the moment another process delivers mail, sweeps expired and old mail hourly, and ends its
session as soon as the client closes stdin or the process is told to stop (SIGTERM).
`build_server` and `run_session` serve a remote post office's session too
(`agentpost.mcp.remote`): the tools only ever see a `Desk`.
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
from agentpost.config import Settings
from agentpost.domain.desk import Desk
from agentpost.domain.errors import AgentpostError
from agentpost.domain.models import Caller
from agentpost.mcp import channel
from agentpost.mcp.adapter import MailboxServer
from agentpost.mcp.desk import LocalDesk, SessionCaller
from agentpost.mcp.leader_tools import register_leader_tools
from agentpost.mcp.presenting import INBOX_URI, inbox_resource, render_instructions
from agentpost.mcp.reservation_tools import register_reservation_tools
from agentpost.mcp.task_tools import register_task_tools
from agentpost.mcp.tools import register_tools
from agentpost.services import PostOffice
from agentpost.services.local_identity import detect

log = logging.getLogger(__name__)

Background = Callable[[], Coroutine[Any, Any, None]]


def build_server(desk: Desk, instructions: str, others: list[str]) -> MailboxServer:
    async def read_resource(uri: str) -> str:
        return await inbox_resource(desk)

    text = render_instructions(instructions, desk.agent, others)
    server = MailboxServer(
        "agentpost",
        __version__,
        text,
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
    """Serve stdio until the client closes it or SIGTERM, with `background` tasks beside; once
    `ready` returns, if given (say, when push is listening)."""
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
        log.warning("%s failed, will retry: %s", what, err)


async def every(period_s: float, what: str, action: Callable[[], Awaitable[None]]) -> None:
    """`action` every `period_s`, forever; a failed round is logged and the next one tries."""
    while True:
        await anyio.sleep(period_s)
        with survive(what):
            await action()


SWEEP_EVERY_S = 3600


async def _sweep_periodically(office: PostOffice) -> None:
    """TTL tombstones and retention: every local server helps, so no daemon is needed."""
    while True:
        with survive("sweep"):
            await office.mailbox.sweep()
        await anyio.sleep(SWEEP_EVERY_S)


async def _push_arrivals(
    office: PostOffice, server: MailboxServer, callers: SessionCaller, start: int
) -> None:
    """Tell a subscribed client its inbox changed, for each arrival after `start`; after a
    failure it goes on from the last arrival told, so mail that came meanwhile is told too."""
    cursor = start
    while True:
        with survive("watching for new mail"):
            async for seq in office.mailbox.arrivals(lambda: callers.caller, after=cursor):
                await server.notify_resource_updated(INBOX_URI)
                cursor = seq
        await anyio.sleep(1)  # after a failure only


async def _push_to_channel(
    office: PostOffice, server: MailboxServer, callers: SessionCaller, start: int
) -> None:
    """Each message delivered after `start` (the session's start), once, to a 2025-era client:
    Claude Code's channel. It waits for that client's `initialize`, so mail that came in the
    meantime is told then; a cursor in memory makes each message told once, and `arrivals`
    starts from that cursor, so mail delivered after the last look (or during a failure) is
    told without waiting for more."""
    cursor = start

    async def tell() -> None:
        nonlocal cursor
        while True:
            found = await office.mailbox.arrived_after(callers.caller, cursor, channel.BATCH)
            for message in found:
                await server.send_custom_notification(
                    channel.METHOD, channel.channel_params(message)
                )
                cursor = message.seq
            if len(found) < channel.BATCH:
                return

    await server.first_legacy_peer()
    while True:
        with survive("pushing mail to the channel"):
            async for _ in office.mailbox.arrivals(lambda: callers.caller, after=cursor):
                await tell()
        await anyio.sleep(1)  # after a failure only


async def _stand_for_leader(office: PostOffice, callers: SessionCaller) -> None:
    """Lead the project whenever the seat is free (`auto_lead`): on start, and on failover."""
    while True:
        with survive("standing for leader"):
            await office.leadership.stand(lambda: callers.caller)
            return  # this session may not lead
        await anyio.sleep(1)  # after a failure only


async def _stop_on_sigterm(group: TaskGroup) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP) as signals:
        async for _ in signals:
            group.cancel_scope.cancel()
            return


async def serve_stdio(settings: Settings) -> None:
    office = await PostOffice.open(settings)
    session_id: str | None = None
    try:
        context = detect(project_override=settings.project)
        session = await office.presence.open_local_session(context, name=settings.agent)
        session_id = session.id
        callers = SessionCaller(Caller(session.agent, session.id))
        others = [n for n in await office.presence.agent_names() if n != session.agent]
        server = build_server(LocalDesk(office, callers), settings.instructions, others)
        heartbeat_id = session.id
        start = await office.mailbox.latest_arrival(callers.caller)
        await run_session(
            server,
            [
                lambda: every(
                    settings.heartbeat_s,
                    "heartbeat",
                    lambda: office.presence.heartbeat(heartbeat_id),
                ),
                lambda: _push_arrivals(office, server, callers, start),
                lambda: _push_to_channel(office, server, callers, start),
                lambda: _sweep_periodically(office),
                *([lambda: _stand_for_leader(office, callers)] if settings.auto_lead else []),
            ],
        )
    finally:
        with anyio.CancelScope(shield=True):
            if session_id is not None:
                await office.presence.end_session(session_id)
            await office.aclose()
