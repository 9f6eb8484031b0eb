"""MCP over Streamable HTTP: the connections of many agents in one process.

Nothing here remembers who a connection is. Every request is authenticated before it reaches
the SDK (the service's guard), and each tool call, listing and subscription asks afresh who
sent it (`RequestCaller`), so two connections never share an identity, whatever session ids
they present. On a 2025-era connection `register` mints a session handle (`HttpDesk`), and the
connection speaks for it from then on; 2026-era requests have no connection to carry one.

Which tools a connection sees is chosen per connection (`/mcp?tools=core,profile`) or by the
`tool_groups` setting; the `admin` group only ever reaches an admin key.

Push: each agent's connections are one audience. A background task follows the event log and
tells exactly the agents with news that their inbox changed.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Collection
from contextlib import AbstractAsyncContextManager, nullcontext
from contextvars import ContextVar
from dataclasses import replace

import anyio

from agentpost import __version__
from agentpost.domain.errors import AgentpostError, ErrorCode, forbidden, invalid
from agentpost.domain.models import Caller
from agentpost.mcp.account_tools import register_admin_tools, register_profile_tools
from agentpost.mcp.adapter import HttpRequest, MailboxServer, current_http_request
from agentpost.mcp.desk import LocalDesk
from agentpost.mcp.leader_tools import register_leader_tools
from agentpost.mcp.presenting import INBOX_URI, inbox_resource, instructions_for_a_key
from agentpost.mcp.reservation_tools import register_reservation_tools
from agentpost.mcp.task_tools import register_task_tools
from agentpost.mcp.tools import register_tools
from agentpost.services import PostOffice
from agentpost.services.keys import default_session_id

log = logging.getLogger(__name__)

GROUPS: dict[str, tuple[str, ...]] = {
    "core": (
        "register",
        "whoami",
        "who",
        "set_status",
        "send",
        "inbox",
        "ack",
        "wait",
        "thread",
        "sent",
        "search",
    ),
    "channels": ("channels", "join", "leave", "read_channel"),
    "profile": ("directory", "update_profile", "block", "unblock", "blocked", "usage"),
    "coord": (
        "leader",
        "claim_leadership",
        "release_leadership",
        "delegate",
        "tasks",
        "task",
        "update_task",
        "request",
        "respond",
        "check_request",
        "reserve",
        "renew_reservations",
        "release_reservations",
        "reservations",
    ),
    "admin": (
        "admin_create_agent",
        "admin_issue_key",
        "admin_list_keys",
        "admin_revoke_key",
        "admin_disable_agent",
        "admin_enable_agent",
        "admin_vouch_agent",
        "admin_unvouch_agent",
        "admin_list_agents",
        "admin_audit_log",
        "admin_set_limits",
        "admin_set_block",
        "admin_usage",
    ),
}
"""Tool groups and their members; docs/SERVICE.md lists the same (a test keeps them equal)."""


def asked_groups(value: str | None) -> list[str]:
    """The groups `?tools=` names (none: it asks for nothing, whatever commas it holds)."""
    return [g.strip() for g in value.split(",") if g.strip()] if value else []


def parse_groups(value: str | None, default: Collection[str]) -> list[str]:
    """The groups a connection asked for (`?tools=core,profile`), or the default ones."""
    names = asked_groups(value) or list(default)
    unknown = [g for g in names if g not in GROUPS]
    if unknown:
        raise invalid(
            f"unknown tool group {', '.join(unknown)}; the groups are {', '.join(GROUPS)}",
            groups=list(GROUPS),
        )
    return names


CallerOf = Callable[[HttpRequest], Caller]

_moved: ContextVar[tuple[HttpRequest, Caller] | None] = ContextVar("moved_caller", default=None)
"""A caller `register` moved to a new session, for the rest of the request it arrived on."""


class RequestCaller:
    """The caller of the request in hand: whoever its key says."""

    def __init__(self, caller_of: CallerOf) -> None:
        self._caller_of = caller_of

    @property
    def caller(self) -> Caller:
        request = current_http_request()
        if request is None:
            raise AgentpostError(ErrorCode.UNAUTHENTICATED, "no HTTP request in hand")
        moved = _moved.get()
        if moved is not None and moved[0] is request:
            return moved[1]
        return self._caller_of(request)

    async def admitted(self) -> Caller:
        """The request's key was checked as it came in (a disabled agent's is refused)."""
        return self.caller

    def rename(self, caller: Caller) -> None:
        """The rest of this request speaks for `caller` (a session `register` just minted);
        later requests learn it from their key and connection."""
        request = current_http_request()
        if request is not None:
            _moved.set((request, caller))


class HttpDesk(LocalDesk):
    """The local desk over HTTP, where `register` mints a session handle, as DESIGN.md has it,
    wherever a connection can carry it: each Claude Code window on one key then shows up with
    its own objective, presence and seat, instead of all sharing the key's own session."""

    async def register(
        self,
        *,
        name: str | None = None,
        description: str | None = None,
        objective: str | None = None,
    ) -> None:
        caller = self.caller
        if name is not None and name != caller.agent:
            raise forbidden(f"this connection speaks for {caller.agent!r}, the agent of its key")
        presence = self.office.presence
        request = current_http_request()
        connection = None if request is None else request.connection
        on_own = caller.key_id is not None and caller.session_id == default_session_id(
            caller.key_id
        )
        if request is None or connection is None or not on_own:
            # A session minted already (bound, or named in the header), or a 2026-era request,
            # which has no connection to carry a new handle: the session in use takes it.
            await presence.update_profile(caller, description=description, objective=objective)
            return
        if not self.office.keys.may_bind(connection, caller):
            raise forbidden("this connection is bound to another agent's session")
        host = request.client_ip or "unknown"
        session = await presence.open_http_session(
            caller, host=host, objective=objective, description=description
        )
        caller = replace(caller, session_id=session.id)
        try:
            replaced = self.office.keys.bind_connection(connection, caller)
        except AgentpostError:  # another agent bound the connection while we minted
            await presence.end_session(session.id)
            raise
        if replaced is not None:  # a register of the same connection that ran alongside
            await presence.end_session(replaced)
        self.callers.rename(caller)
        await self.office.leadership.claim_if_eligible(caller)


def build_http_server(office: PostOffice, caller_of: CallerOf) -> MailboxServer:
    desk = HttpDesk(office, RequestCaller(caller_of))
    default_groups = office.settings.tool_groups

    def audience() -> str | None:
        request = current_http_request()
        return None if request is None else caller_of(request).agent

    @functools.lru_cache(maxsize=64)  # bounded: the query string is the client's to vary
    def tools_for(admin: bool, asked: str | None) -> frozenset[str]:
        # Asked on every call and listing: worked out once per (admin, query).
        try:
            groups = parse_groups(asked, default_groups)
        except AgentpostError:
            groups = list(default_groups)  # the service answered 400 before we got here
        if admin and not asked_groups(asked):
            groups.append("admin")  # an admin key's connection lists them unless it chose
        elif not admin:
            groups = [g for g in groups if g != "admin"]
        return frozenset(tool for group in groups for tool in GROUPS[group])

    def offered_tools() -> Collection[str] | None:
        request = current_http_request()
        if request is None:
            return None
        return tools_for(caller_of(request).admin, request.query.get("tools"))

    async def withheld_call(name: str) -> None:
        """An agent key calling an admin tool (never offered to it) tried an admin act."""
        request = current_http_request()
        if request is None or name not in GROUPS["admin"]:
            return
        try:
            await office.admin.check_admin(caller_of(request), name.removeprefix("admin_"))
        except AgentpostError as err:
            if err.code is not ErrorCode.FORBIDDEN:  # unkept, the call is still unknown to it
                log.warning("a refused admin tool call could not be audited: %s", err)

    async def read_resource(uri: str) -> str:
        return await inbox_resource(desk)

    def while_listening() -> AbstractAsyncContextManager[None]:
        """An open `subscriptions/listen` stream is a heartbeat of its caller's session, and
        one of the waits its agent may hold open."""
        request = current_http_request()
        if request is None:
            return nullcontext()
        return office.presence.held_open(caller_of(request), counted=True)

    # The same for every agent this server speaks to, and for as long as it runs: who works
    # beside them changes, and `who` tells.
    instructions = instructions_for_a_key(office.settings.instructions)
    server = MailboxServer(
        "agentpost",
        __version__,
        instructions,
        read_resource,
        (INBOX_URI,),
        audience=audience,
        offered_tools=offered_tools,
        while_listening=while_listening,
        withheld_call=withheld_call,
    )
    register_tools(server, desk)
    register_leader_tools(server, desk)
    register_task_tools(server, desk)
    register_reservation_tools(server, desk)
    register_profile_tools(server, desk)
    register_admin_tools(server, desk)
    return server


async def push_news(office: PostOffice, server: MailboxServer) -> None:
    """Tell each agent's subscribed connections when its inbox changed; runs until cancelled.

    Woken only by commits that wrote events (and by other processes' commits). Each agent is
    told on its own task, so a client that stopped reading holds up its own agent's news (for
    up to the adapter's push timeout), never another agent's. News that comes while an agent
    is being told is told once more afterwards: "your inbox changed" said twice says no more.
    """
    pending: set[str] = set()  # has news not yet told
    telling: set[str] = set()  # has a task telling it

    async def tell(agent: str) -> None:
        try:
            while agent in pending:
                pending.discard(agent)
                await server.notify_resource_updated(INBOX_URI, audience=agent)
        finally:
            telling.discard(agent)

    async with anyio.create_task_group() as tg:
        async for touched in office.events.touches():
            for agent in touched - telling:
                if server.may_hear(agent):  # news for nobody connected is told to nobody
                    pending.add(agent)
                    telling.add(agent)
                    tg.start_soon(tell, agent)
            pending.update(touched & telling)
