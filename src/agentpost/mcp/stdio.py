"""`agentpost mcp`: one agent session over stdio, on the local post office.

The process registers its session, heartbeats in the background, pushes "your inbox changed"
to a subscribed client the moment another process delivers mail, sweeps expired and old mail
hourly, and ends its session as soon as the client closes stdin or the process is told to stop
(SIGTERM).
"""

from __future__ import annotations

import json
import logging
import signal
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
from anyio.abc import TaskGroup

from agentpost import __version__
from agentpost.config import Settings
from agentpost.domain.errors import AgentpostError
from agentpost.domain.framing import frame_messages
from agentpost.domain.models import Caller
from agentpost.mcp.adapter import MailboxServer
from agentpost.mcp.presenting import messages_json
from agentpost.mcp.tools import Desk, register_tools
from agentpost.services import PostOffice
from agentpost.services.local_identity import detect

INBOX_URI = "agentpost://inbox"
log = logging.getLogger(__name__)


def render_instructions(template: str, agent: str, others: list[str]) -> str:
    """Fill `{agent}` and `{agents}` only, so other braces in a custom template stay as written."""
    return template.replace("{agent}", agent).replace("{agents}", ", ".join(others) or "none yet")


def build_server(office: PostOffice, desk: Desk, others: list[str]) -> MailboxServer:
    async def read_resource(uri: str) -> str:
        found = await office.mailbox.inbox(desk.caller, peek=True, limit=50)
        return json.dumps(
            {
                "agent": desk.caller.agent,
                "unread": found.unread,
                "messages": messages_json(found.messages),
                # What a model should be shown: the same messages inside their frames.
                "framed": frame_messages(found.messages, title=f"{found.unread} unread"),
            }
        )

    instructions = render_instructions(office.settings.instructions, desk.caller.agent, others)
    server = MailboxServer("agentpost", __version__, instructions, read_resource, (INBOX_URI,))
    register_tools(server, office, desk)
    return server


async def _heartbeat(office: PostOffice, session_id: str) -> None:
    while True:
        await anyio.sleep(office.settings.heartbeat_s)
        with _survive("heartbeat"):
            await office.presence.heartbeat(session_id)


@contextmanager
def _survive(what: str) -> Iterator[None]:
    """A busy database must not end the session: log it, and the next round tries again."""
    try:
        yield
    except AgentpostError as err:
        log.warning("%s failed, will retry: %s", what, err)


SWEEP_EVERY_S = 3600


async def _sweep_periodically(office: PostOffice) -> None:
    """TTL tombstones and retention: every local server helps, so no daemon is needed."""
    while True:
        with _survive("sweep"):
            await office.mailbox.sweep()
        await anyio.sleep(SWEEP_EVERY_S)


async def _push_arrivals(office: PostOffice, server: MailboxServer, desk: Desk) -> None:
    while True:
        with _survive("watching for new mail"):
            async for _ in office.mailbox.arrivals(lambda: desk.caller):
                await server.notify_resource_updated(INBOX_URI)
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
        desk = Desk(Caller(session.agent, session.id))
        others = [n for n in await office.presence.agent_names() if n != session.agent]
        server = build_server(office, desk, others)
        async with anyio.create_task_group() as group:
            group.start_soon(_heartbeat, office, session.id)
            group.start_soon(_push_arrivals, office, server, desk)
            group.start_soon(_sweep_periodically, office)
            group.start_soon(_stop_on_sigterm, group)
            await server.run_stdio()
            group.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            if session_id is not None:
                await office.presence.end_session(session_id)
            await office.aclose()
