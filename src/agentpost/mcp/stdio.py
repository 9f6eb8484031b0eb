"""`agentpost mcp`: one agent session over stdio, on the local post office.

The process registers its session, heartbeats in the background (following the worktree's
branch across a `git checkout`), pushes "your inbox changed"
to a subscribed client and each new message to Claude Code's channel (`agentpost.mcp.channel`)
the moment another process delivers mail, expires mail as its TTL falls due and purges old
mail hourly (`agentpost.services.sweeper`), and ends its
session as soon as the client closes stdin or the process is told to stop (SIGTERM, SIGHUP,
SIGINT).
The server itself, shared with a remote post office's session, is `agentpost.mcp.session`.
"""

from __future__ import annotations

import logging

import anyio

from agentpost.config import Settings
from agentpost.domain.models import Caller
from agentpost.heap import settle
from agentpost.mcp import channel
from agentpost.mcp.adapter import MailboxServer
from agentpost.mcp.desk import LocalDesk, SessionCaller
from agentpost.mcp.presenting import (
    COLLEAGUES_NAMED,
    INBOX_URI,
    colleagues,
    render_instructions,
)
from agentpost.mcp.session import build_server, every, run_session, survive
from agentpost.services import PostOffice
from agentpost.services.local_identity import BranchWatch, detect

log = logging.getLogger(__name__)


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


class _BranchMoves:
    """The branch the heartbeat last saw, and an event set when a checkout moved it."""

    def __init__(self, branch: str | None) -> None:
        self.branch = branch
        self.moved = anyio.Event()

    def seen(self, branch: str | None) -> None:
        if branch != self.branch:
            self.branch = branch
            self.moved.set()
            self.moved = anyio.Event()


async def _stand_for_leader(
    office: PostOffice, callers: SessionCaller, branches: _BranchMoves
) -> None:
    """Lead the project whenever the seat is free (`auto_lead`): on start, on failover, and
    after a checkout of a branch that may lead (standing is decided afresh on each one; a
    seat held is kept until stepped down or lapsed, as ever)."""
    while True:
        moved = branches.moved
        async with anyio.create_task_group() as group:

            async def standing() -> None:
                while True:
                    with survive("standing for leader"):
                        await office.leadership.stand(lambda: callers.caller)
                        return  # this session may not lead, on this branch
                    await anyio.sleep(1)  # after a failure only

            group.start_soon(standing)
            await moved.wait()
            group.cancel_scope.cancel()


SETTLE_AFTER_S = 1.0
"""How long after it starts serving a session settles its heap (`heap.settle`): the client's
first requests are answered by then."""


async def _settle_after_start() -> None:
    """The start's objects out of the collector, once the first answers are out: collecting
    them first takes about 0.1 s, which start to first answer (figure 3) need not wait for."""
    await anyio.sleep(SETTLE_AFTER_S)
    settle()


async def serve_stdio(settings: Settings) -> None:
    office = await PostOffice.open(settings)
    session_id: str | None = None
    try:
        context = detect(project_override=settings.project)
        session = await office.presence.open_local_session(context, name=settings.agent)
        session_id = session.id
        callers = SessionCaller(Caller(session.agent, session.id), office.admission.admit)
        agents = await office.directory.search(callers.caller, limit=COLLEAGUES_NAMED)
        instructions = render_instructions(
            settings.instructions, session.agent, colleagues(session.agent, agents)
        )
        server = build_server(LocalDesk(office, callers), instructions)
        heartbeat_id = session.id
        branch = BranchWatch(context)
        branches = _BranchMoves(context.branch)

        async def heartbeat() -> None:
            """Alive, and on the branch the worktree has checked out now."""
            now = await branch.now()
            await office.presence.heartbeat(heartbeat_id, branch=now)
            branches.seen(now)  # recorded first: standing afresh reads the session's branch

        start = await office.mailbox.newest_seq()
        await run_session(
            server,
            [
                _settle_after_start,
                lambda: every(settings.heartbeat_s, "heartbeat", heartbeat),
                lambda: _push_arrivals(office, server, callers, start),
                lambda: _push_to_channel(office, server, callers, start),
                office.sweeper.run,
                *(
                    [lambda: _stand_for_leader(office, callers, branches)]
                    if settings.auto_lead
                    else []
                ),
            ],
        )
    finally:
        with anyio.CancelScope(shield=True):
            if session_id is not None:
                await office.presence.end_session(session_id)
            await office.aclose()
