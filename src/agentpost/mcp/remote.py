"""`agentpost mcp --url URL --key KEY`: the stdio tools, backed by a remote agentpost service.

For MCP clients that only speak stdio, or a machine that should not hold the post office: the
same tools as a local session, through the Python client. The process mints a session of the
key's agent with this worktree's project and branch, heartbeats it (with the branch a `git
checkout` moved it to, as a local session's heartbeat does: on a branch that may lead, the
service gives it the free leader seat), pushes `agentpost://inbox`
updates and Claude Code channel notifications from the service's event stream (new mail only:
receipts do not change the inbox), and ends the session when the client closes stdin or the
process is told to stop; a session the service ends or forgets meanwhile is minted again, with
the same branch, status and objective, by the next call that hears of it. As with a local
session, mail that comes before Claude Code's `initialize` is pushed once it has connected (the
newest `HELD` of it, if ever that many). Once the service refuses the key (revoked, or its agent
disabled), the process tells the calls of the next `TELL_S` seconds so, then exits with
`unauthenticated`, as it does when the key is refused at the start. A service that cannot be
reached at the start does not stop it: an agent session may start before the service does
(at login, say, alongside it), so the process waits a few seconds for it, then serves the tools
all the same (each answering `unavailable` meanwhile, the instructions naming no agent:
`whoami` does), and the session is minted by whatever reaches the service first: a call, the
heartbeat, or the event stream, which tries every 5 s.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import aclosing

import anyio

from agentpost.client import AsyncClient
from agentpost.client.desk import RemoteDesk
from agentpost.config import Settings
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.events import EventType
from agentpost.mcp import channel
from agentpost.mcp.adapter import MailboxServer
from agentpost.mcp.presenting import (
    COLLEAGUES_NAMED,
    INBOX_URI,
    colleagues,
    instructions_for_a_key,
    render_instructions,
)
from agentpost.mcp.session import build_server, every, run_session, survive
from agentpost.services.local_identity import BranchWatch, detect

log = logging.getLogger(__name__)

START_WAIT_S = 5
"""How long a start waits for a service it cannot reach before serving (and answering
`initialize`) without it: a service started alongside (at login, or restarting) answers
within it, and the instructions then name the agent and its colleagues."""
START_RETRY_S = 0.5
"""The pause between tries meanwhile (a try against a service that is down takes over a
second of its own: the client sends it again twice)."""
LISTEN_S = 10
"""How long serving waits for the event stream to open; after that it serves without push
until the stream opens (the tools, `wait` and the piggyback still work)."""
GOODBYE_S = 5
"""How long ending the session may take when the process stops (the service may be gone)."""
TELL_S = 10
"""How long the process serves on once the event stream or the heartbeat heard the key
refused: the service ends a revoked key's stream at once, and an agent's next call should
learn why (`unauthenticated`, answered here without a request) rather than find the server
gone."""
HELD = 1000
"""New mail's ids kept for the channel until a 2025-era client has connected: a client that
never takes the channel (a 2026-era one) must not make the list grow for ever."""


class _ChannelPush:
    """Pushes each new message to Claude Code's channel in arrival order, holding what comes
    before the client's `initialize` until then, as the local session does."""

    def __init__(self, desk: RemoteDesk, server: MailboxServer) -> None:
        self.desk, self.server = desk, server
        self.held: deque[str] = deque(maxlen=HELD)
        self.open = False  # set once what was held has been pushed

    async def arrived(self, message_id: str) -> None:
        if self.open:
            await _push_to_channel(self.desk, self.server, message_id)
        else:
            self.held.append(message_id)

    async def release_when_connected(self) -> None:
        await self.server.first_legacy_peer()
        while self.held:  # what arrives meanwhile is appended, and pushed in this loop too
            await _push_to_channel(self.desk, self.server, self.held.popleft())
        self.open = True  # no await since the last look: nothing can slip in between


class _KeyWatch:
    """Ends the session once the service refuses the key, and says why.

    Every refused key is a failed authentication, and failures lock their address out: a
    heartbeat and an event stream that kept knocking with a revoked key would lock out every
    agent (and the owner) on this machine within a minute, for as long as the process lives."""

    def __init__(self, scope: anyio.CancelScope) -> None:
        self.scope = scope
        self.refused: AgentpostError | None = None

    async def checked(self, action: Callable[[], Awaitable[None]]) -> None:
        """`action`; a refusal of the key stops the session `TELL_S` later (and still
        raises). Meanwhile nothing knocks with the key: the desk refuses every call itself."""
        try:
            await action()
        except AgentpostError as err:
            if err.code is ErrorCode.UNAUTHENTICATED and self.refused is None:
                self.refused = err
                self.scope.deadline = min(self.scope.deadline, anyio.current_time() + TELL_S)
            raise


async def _push_new_mail(
    desk: RemoteDesk,
    server: MailboxServer,
    listening: anyio.Event,
    push: _ChannelPush,
    watch: _KeyWatch,
) -> None:
    """Tell the client its inbox changed on every `message.created` event, and push that message
    to Claude Code's channel (a peek: `get_message` reads no delivery). The stream reopens itself
    after a dropped connection, after the last event seen, so each message is pushed once; any
    other refusal (too many streams open, a locked-out address) is retried slowly, a refused key
    ends the session, and a session the service no longer knows is minted again. Each of those
    resumes where the last stream was, its opening cursor if no event came: opened at a later
    "now", it missed the mail that came in between."""
    cursor: int | None = None
    client = desk.client

    def moved(seq: int) -> None:
        nonlocal cursor
        cursor = seq

    async def follow() -> None:
        stream = client.events(after=cursor, on_open=listening.set, on_cursor=moved)
        async with aclosing(stream) as events:
            async for event in events:
                if event.type == EventType.MESSAGE_CREATED:
                    await server.notify_resource_updated(INBOX_URI)
                    if event.message_id is not None:
                        await push.arrived(event.message_id)

    while True:
        with survive("following the service's events"):
            await watch.checked(lambda: desk.keep_session(follow))
        await anyio.sleep(5)  # after a refusal only


async def _push_to_channel(desk: RemoteDesk, server: MailboxServer, message_id: str) -> None:
    """One message to Claude Code's channel; one that cannot be read (gone already) is skipped
    without reopening the stream."""
    with survive("pushing a message to the channel"):
        message = await desk.keep_session(lambda: desk.client.get_message(message_id))
        await server.send_custom_notification(channel.METHOD, channel.channel_params(message))


async def _colleagues(desk: RemoteDesk) -> str | None:
    """The session minted and the colleagues' names for the instructions, the service
    waited for up to START_WAIT_S; None if it has not answered by then (the session is then
    minted by the first call that reaches it). Any other refusal (the key) is raised: the
    process exits with its code."""
    unreached = f"no answer within {START_WAIT_S} s"
    with anyio.move_on_after(START_WAIT_S):
        while True:
            try:
                await desk.connect()
                agents = await desk.client.directory(limit=COLLEAGUES_NAMED)
            except AgentpostError as err:
                if err.code is not ErrorCode.UNAVAILABLE:
                    raise
                unreached = err.message
                await anyio.sleep(START_RETRY_S)
                continue
            return colleagues(desk.agent, agents)
    log.warning("serving without the post office for now: %s", unreached)
    return None


def _instructions(settings: Settings, desk: RemoteDesk, others: str | None) -> str:
    """Named for the agent and its colleagues once the service has answered; else true
    whoever they are (`whoami` and `who` tell), rather than holding placeholders."""
    if others is None:
        return instructions_for_a_key(settings.instructions)
    return render_instructions(settings.instructions, desk.agent, others)


async def serve_remote_stdio(settings: Settings) -> None:
    context = detect(project_override=settings.project)
    async with AsyncClient(settings.url, settings.key) as client:
        desk = RemoteDesk(
            client, project=context.project, worktree=context.worktree, branch=context.branch
        )
        serving = anyio.CancelScope()
        watch = _KeyWatch(serving)
        branch = BranchWatch(context)

        async def heartbeat() -> None:
            """Alive, and on the branch the worktree has checked out now."""
            moved = await branch.now()
            await watch.checked(lambda: desk.heartbeat(moved))

        try:
            others = await _colleagues(desk)
            server = build_server(desk, _instructions(settings, desk, others))
            listening = anyio.Event()
            push = _ChannelPush(desk, server)

            async def push_is_listening() -> None:
                """Mail sent once the client is served must be pushed: the stream starts now
                (unless the service is down: the client is then served at once)."""
                with anyio.move_on_after(LISTEN_S if others is not None else 0):
                    await listening.wait()

            with serving:
                await run_session(
                    server,
                    [
                        lambda: every(settings.heartbeat_s, "heartbeat", heartbeat),
                        lambda: _push_new_mail(desk, server, listening, push, watch),
                        push.release_when_connected,
                    ],
                    ready=push_is_listening,
                )
            if watch.refused is not None:
                raise watch.refused
        finally:
            if watch.refused is None:  # a refused key would be one more failure to count
                with anyio.CancelScope(shield=True) as scope, survive("ending the session"):
                    scope.deadline = anyio.current_time() + GOODBYE_S
                    await desk.close()
