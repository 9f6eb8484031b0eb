"""The MCP server of agentpost on the SDK's low-level server: tools, the inbox resource, and
push in both protocol revisions, over stdio and Streamable HTTP (see the package's docstring
for what was found in the SDK on the way)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Final, cast

import anyio
import mcp.types as types
from mcp.server import NotificationOptions, Server
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver.tools import Tool as _FunctionTool
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import x_mcp_header_map
from mcp.types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.applications import Starlette

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.limits import holds_half_pair, not_unicode
from agentpost.mcp.adapter.arguments import invalid_arguments, unknown_arguments, validated
from agentpost.mcp.adapter.rebinding import RebindingCheck, allowed_places
from agentpost.mcp.adapter.streamable_http import (
    ConnectionClosed,
    ConnectionGate,
    NoReplay,
    PrincipalOf,
    StreamHeld,
    http_request_of,
    request_in_hand,
)
from agentpost.mcp.pipes import StdinLines, StdoutLines

logger = logging.getLogger(__name__)

_JSON_MIME: Final = "application/json"
# A client that stopped reading must not stall a push to everyone else.
_PUSH_TIMEOUT_S: Final = 5.0

_Ctx = ServerRequestContext[dict[str, Any], Any]


@dataclass(frozen=True)
class ToolOutput:
    """A tool's answer in both shapes MCP carries: prose for the model, JSON for programs."""

    text: str
    structured: dict[str, Any]


def _connection_of(ctx: _Ctx) -> Connection:
    # No public accessor in 2.3.0; see the module docstring.
    connection = getattr(ctx.session, "_connection", None)
    if not isinstance(connection, Connection):
        raise RuntimeError("mcp SDK changed: ServerSession no longer carries its Connection")
    return connection


_ToolResult = dict[str, Any]
"""A `tools/call` result in its wire form (`CallToolResult` by its aliases). The SDK takes a
handler's dict as it stands (`mcp.server.context.HandlerResult`), where a `CallToolResult` is
first dumped field by field, every value of the structured content inspected: for an inbox of
200 messages that was a quarter of the server's time."""


def _tool_result(
    text: str, structured: dict[str, Any] | None = None, *, error: bool = False
) -> _ToolResult:
    """What `CallToolResult(...).model_dump(by_alias=True, mode="json", exclude_none=True)`
    gives; the SDK leaves out what a protocol revision does not know (`resultType` before
    2026-07-28)."""
    result: _ToolResult = {"content": [{"type": "text", "text": text}]}
    if structured is not None:
        result["structuredContent"] = structured
    result["isError"] = error
    result["resultType"] = "complete"
    return result


def _error_result(err: AgentpostError) -> _ToolResult:
    return _tool_result(f"{err.code.value}: {err.message}", {"error": err.to_dict()}, error=True)


def _rpc_code(err: AgentpostError) -> int:
    if err.code in (ErrorCode.NOT_FOUND, ErrorCode.INVALID_ARGUMENT):
        return types.INVALID_PARAMS
    return types.INTERNAL_ERROR


def _resource_name(uri: str) -> str:
    return uri.split("://", 1)[-1].strip("/") or uri


class _LowLevelServer(Server[dict[str, Any]]):
    """Advertises experimental capabilities on every path (initialize and server/discover)."""

    experimental_capabilities: dict[str, dict[str, Any]] | None = None

    def get_capabilities(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
        *,
        protocol_version: str | None = None,
    ) -> types.ServerCapabilities:
        return super().get_capabilities(
            notification_options,
            experimental_capabilities or self.experimental_capabilities,
            extensions,
            protocol_version=protocol_version,
        )


class _LegacyPeers:
    """2025-era connections that can take server-initiated messages, each with its subscribed URIs
    and its audience (whose mail it may be told of; None over stdio, where there is one).

    Keyed by the SDK `Connection` (one per client connection on that revision), so a repeated
    subscribe is idempotent and unsubscribe finds the entry a different request created.
    """

    def __init__(self) -> None:
        self._uris: dict[Connection, set[str]] = {}
        self._audience: dict[Connection, str | None] = {}
        self._per_audience: Counter[str | None] = Counter()
        self._joined: anyio.Event | None = None  # made on first use: it needs the event loop

    def track(self, connection: Connection, audience: str | None) -> set[str]:
        uris = self._uris.get(connection)
        if uris is None:
            uris = self._uris[connection] = set()
            connection.exit_stack.callback(self._forget, connection)
            self.joined().set()
        if connection not in self._audience or self._audience[connection] != audience:
            self._count_out(connection)
            self._audience[connection] = audience
            self._per_audience[audience] += 1
        return uris

    def _count_out(self, connection: Connection) -> None:
        if connection in self._audience:
            was = self._audience[connection]
            self._per_audience[was] -= 1
            if self._per_audience[was] <= 0:
                del self._per_audience[was]

    def holds(self, audience: str) -> bool:
        """Whether any connection of `audience` is tracked (a look that costs no scan)."""
        return audience in self._per_audience

    def joined(self) -> anyio.Event:
        """Set once the first connection is tracked (and stays set)."""
        if self._joined is None:
            self._joined = anyio.Event()
        return self._joined

    def _forget(self, connection: Connection) -> None:
        self._uris.pop(connection, None)
        self._count_out(connection)
        self._audience.pop(connection, None)

    def count(self, audience: str) -> int:
        return sum(1 for a in self._audience.values() if a == audience)

    def closed(self, connection: str) -> None:
        """The SDK closed the connection of that `Mcp-Session-Id`; its teardown forgets it
        again later, which is then a no-op."""
        for closed in [c for c in self._uris if c.session_id == connection]:
            self._forget(closed)

    def all(self, audience: str | None = None) -> list[Connection]:
        return [c for c in self._uris if audience is None or self._audience.get(c) == audience]

    def subscribed_to(self, uri: str, audience: str | None = None) -> list[Connection]:
        return [
            connection for connection in self.all(audience) if uri in self._uris.get(connection, ())
        ]


class _AudienceListen:
    """`subscriptions/listen` with one bus per audience, so a listener hears only its own news.

    Over stdio there is one audience (None); over HTTP each agent is one.
    """

    def __init__(
        self,
        audience: Callable[[], str | None],
        while_listening: Callable[[], AbstractAsyncContextManager[None]],
    ) -> None:
        self._audience = audience
        self._while_listening = while_listening
        self._handlers: dict[str | None, ListenHandler] = {}
        self._buses: dict[str | None, InMemorySubscriptionBus] = {}

    def _handler(self, audience: str | None) -> ListenHandler:
        handler = self._handlers.get(audience)
        if handler is None:
            bus = self._buses[audience] = InMemorySubscriptionBus()
            handler = self._handlers[audience] = ListenHandler(bus)
        return handler

    async def __call__(
        self, ctx: _Ctx, params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        handler = self._handler(self._audience())
        try:
            async with self._while_listening():  # the stream stays open inside
                return await handler(ctx, params)
        except AgentpostError as err:  # its key was revoked, say: the stream ends, saying why
            raise MCPError(
                _rpc_code(err), f"{err.code.value}: {err.message}", err.to_dict()
            ) from err

    def may_hear(self, audience: str) -> bool:
        """Whether `audience` ever listened here (its bus is made then, and kept)."""
        return audience in self._buses

    async def publish(self, uri: str, audience: str | None) -> None:
        targets = self._buses.values() if audience is None else [self._buses.get(audience)]
        for bus in targets:
            if bus is not None:
                await bus.publish(ResourceUpdated(uri=uri))


async def _push_all(
    connections: Sequence[Connection], method: str, params: Mapping[str, Any]
) -> None:
    async def push(connection: Connection) -> None:
        with anyio.move_on_after(_PUSH_TIMEOUT_S) as scope:
            await connection.notify(method, params)  # best-effort: never raises
        if scope.cancelled_caught:
            logger.warning(
                "dropped %s: a client did not take it within %ss", method, _PUSH_TIMEOUT_S
            )

    if not connections:  # the common case: a task group costs more than the news
        return
    async with anyio.create_task_group() as tg:
        for connection in connections:
            tg.start_soon(push, connection)


async def _nothing(name: str) -> None:
    """No one to tell of a call to a tool that is not offered."""


class MailboxServer:
    """An MCP server offering async tools and JSON resources, and pushing resource changes.

    One instance serves any number of connections, over stdio or Streamable HTTP, in both
    protocol revisions at once.
    """

    def __init__(
        self,
        name: str,
        version: str,
        instructions: str,
        read_resource: Callable[[str], Awaitable[str]],
        resource_uris: Sequence[str] = ("agentpost://inbox",),
        *,
        experimental_capabilities: Mapping[str, Mapping[str, Any]] | None = None,
        audience: Callable[[], str | None] = lambda: None,
        offered_tools: Callable[[], Collection[str] | None] = lambda: None,
        while_listening: Callable[[], AbstractAsyncContextManager[None]] = nullcontext,
        withheld_call: Callable[[str], Awaitable[None]] = _nothing,
    ) -> None:
        """`audience` says, inside a request, whose news the requesting connection may hear;
        `offered_tools`, which tools it may list and call (None: all of them);
        `while_listening` is entered for as long as a `subscriptions/listen` stream stays
        open (an open subscription counts as the agent's heartbeat); `withheld_call` is told
        of a call to a tool that exists but is not offered (an agent key calling an admin
        tool: the owner's audit log keeps such attempts). All are asked in the request's
        context, where `current_http_request()` answers."""
        self._read = read_resource
        self._resource_uris = tuple(resource_uris)
        self._tools: dict[str, _FunctionTool] = {}
        self._header_schemas: dict[str, dict[str, Any]] = {}
        self._peers = _LegacyPeers()
        self._audience = audience
        self._offered = offered_tools
        self._withheld_call = withheld_call
        self._listen = _AudienceListen(audience, while_listening)
        self._server = _LowLevelServer(
            name,
            version=version,
            instructions=instructions,
            get_tool_input_schema=self._input_schema,
            on_list_tools=self._list_tools,
            # Declared to answer a `CallToolResult`; a dict is as good (see `_ToolResult`).
            on_call_tool=cast("Callable[..., Awaitable[types.CallToolResult]]", self._call_tool),
            on_list_resources=self._list_resources,
            on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe,
            on_unsubscribe_resource=self._unsubscribe,
            on_subscriptions_listen=self._listen,
        )
        if experimental_capabilities:
            self._server.experimental_capabilities = {
                key: dict(value) for key, value in experimental_capabilities.items()
            }
        self._server.middleware.append(self._remember_connection)

    # -- registration -------------------------------------------------------------------------

    def add_tool(
        self,
        fn: Callable[..., Awaitable[ToolOutput]],
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> None:
        """Register `fn`; its signature becomes the input schema, its docstring the default text.

        Refused at registration rather than at call time: sync functions (they would run on a
        worker thread, outside the store's transaction rules), SDK `Context` parameters (that
        would leak the SDK into callers) and duplicate names.
        """
        tool = _FunctionTool.from_function(
            fn, name=name, description=description, structured_output=False
        )
        if not tool.is_async:
            raise TypeError(f"tool {tool.name!r} must be an async function")
        if tool.context_kwarg is not None or tool.resolved_params:
            raise TypeError(f"tool {tool.name!r} takes SDK-injected parameters; pass plain ones")
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is already registered")
        tool.parameters["additionalProperties"] = False  # as `_call_tool` holds to
        self._tools[tool.name] = tool
        if x_mcp_header_map(tool.parameters):
            self._header_schemas[tool.name] = tool.parameters

    # -- push ---------------------------------------------------------------------------------

    async def notify_resource_updated(self, uri: str, audience: str | None = None) -> None:
        """Tell every client subscribed to `uri` that it changed, in both protocol revisions;
        with `audience`, only that audience's clients.

        Safe to call from a background task with no request in flight; a client that has gone
        away or stopped reading is skipped rather than awaited.
        """
        await self._listen.publish(uri, audience)
        await _push_all(
            self._peers.subscribed_to(uri, audience),
            "notifications/resources/updated",
            {"uri": uri},
        )

    def may_hear(self, audience: str) -> bool:
        """Whether any connection of `audience` may hear a push: one that listens, or a
        2025-era one that can take server-initiated messages. False is sure; True may still
        find nobody subscribed. A push loop skips the others at no cost (the bus, the
        connections and a task of their own would cost each send's news about 40 µs)."""
        return self._listen.may_hear(audience) or self._peers.holds(audience)

    async def send_custom_notification(
        self, method: str, params: Mapping[str, Any], audience: str | None = None
    ) -> int:
        """Send an off-spec notification (e.g. `notifications/claude/channel`) to 2025-era clients.

        Returns how many connections it was offered to. Clients that do not know the method drop
        it; 2026-era clients are never sent one (see the module docstring).
        """
        connections = self._peers.all(audience)
        await _push_all(connections, method, params)
        return len(connections)

    async def first_legacy_peer(self) -> None:
        """Return once a 2025-era client that takes server-initiated messages has connected (at
        once if one did): a push loop waits here, so nothing is pushed into a void before the
        client's `initialize`, and a 2026-era client costs such a loop nothing."""
        await self._peers.joined().wait()

    # -- transports ---------------------------------------------------------------------------

    async def run_stdio(self) -> None:
        """Serve one client over stdin/stdout; returns once stdin closes or the client stops
        reading stdout (it is gone either way), or when cancelled."""
        stdin = StdinLines.for_pipe()
        stdout = StdoutLines.for_pipe()
        try:
            # The SDK only iterates its stdin and writes its stdout; see the two classes above.
            async with stdio_server(
                stdin=cast("anyio.AsyncFile[str] | None", stdin),
                stdout=cast("anyio.AsyncFile[str] | None", stdout),
            ) as (read_stream, write_stream):
                await self._server.run(
                    read_stream, write_stream, self._server.create_initialization_options()
                )
        except* BrokenPipeError:
            logger.info("the client closed its end of stdout; the session ends")
        finally:
            if stdin is not None:
                stdin.close()
            if stdout is not None:
                stdout.close()

    def streamable_http_app(
        self,
        *,
        path: str = "/mcp",
        stateless: bool = False,
        json_response: bool = False,
        allowed_hosts: Sequence[str] = (),
        allowed_origins: Sequence[str] = (),
        max_request_bytes: int | None = None,
        principal_of: PrincipalOf | None = None,
        connections_per_principal: int = 32,
        on_connection_closed: ConnectionClosed | None = None,
        while_streaming: StreamHeld | None = None,
    ) -> Starlette:
        """A Starlette app serving Streamable HTTP at `path`.

        When mounted inside another app, that app must run this one's lifespan (it owns the
        session manager). Host and Origin headers are checked (DNS-rebinding protection):
        loopback names always pass, others only when listed. With `principal_of`, each
        2025-era connection belongs to the principal that opened it, who may hold at most
        `connections_per_principal` open at once, `on_connection_closed` hears when it
        closes one, and its own stream is held open inside `while_streaming` (see
        `ConnectionGate`).
        """
        # Host and Origin are checked in front, by `RebindingCheck`; the SDK checks the rest.
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        extra: dict[str, Any] = {}
        if max_request_bytes is not None:
            extra["max_request_body_size"] = max_request_bytes
        app = self._server.streamable_http_app(
            streamable_http_path=path,
            stateless_http=stateless,
            json_response=json_response,
            transport_security=security,
            **extra,
        )
        app.add_middleware(NoReplay)
        if principal_of is not None:
            app.add_middleware(
                ConnectionGate,
                principal_of=principal_of,
                connections=self._peers,
                per_principal=connections_per_principal,
                on_closed=on_connection_closed,
                while_streaming=while_streaming,
            )
        allowed_places(allowed_hosts, allowed_origins)  # refused now, not at a first request
        app.add_middleware(
            RebindingCheck, allowed_hosts=allowed_hosts, allowed_origins=allowed_origins
        )
        return app

    # -- SDK handlers -------------------------------------------------------------------------

    async def _remember_connection(self, ctx: _Ctx, call_next: CallNext) -> HandlerResult:
        token = request_in_hand.set(http_request_of(ctx))
        try:
            connection = _connection_of(ctx)
            if (
                connection.protocol_version not in MODERN_PROTOCOL_VERSIONS
                and connection.has_standalone_channel
            ):
                self._peers.track(connection, self._audience())
            return await call_next(ctx)
        finally:
            request_in_hand.reset(token)

    def _is_offered(self, name: str) -> bool:
        offered = self._offered()
        return offered is None or name in offered

    def _input_schema(self, name: str) -> dict[str, Any] | None:
        """The schema the SDK checks a call's `Mcp-Param-*` headers against: only a tool's
        that declares such headers. The check walks the whole schema twice on every call over
        HTTP, and finds nothing to compare in a schema without declarations."""
        return self._header_schemas.get(name)

    async def _list_tools(
        self, ctx: _Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(name=t.name, description=t.description, input_schema=t.parameters)
                for t in self._tools.values()
                if self._is_offered(t.name)
            ]
        )

    async def _call_tool(self, ctx: _Ctx, params: types.CallToolRequestParams) -> _ToolResult:
        tool = self._tools.get(params.name)
        if tool is not None and not self._is_offered(params.name):
            await self._withheld_call(params.name)
            tool = None
        if tool is None:
            # A tool this connection is not offered is as unknown to it as one that is not.
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
        # The 2026-07-28 transport parses requests with `json.loads`, which lets both the
        # escape and the encoded bytes of a half pair through (the other transports refuse).
        if holds_half_pair(params.arguments):
            return _error_result(not_unicode("the arguments"))
        given = params.arguments or {}
        taken = tool.parameters.get("properties", {})
        unknown = sorted(name for name in given if name not in taken)
        if unknown:
            return _error_result(unknown_arguments(tool.name, unknown, list(taken)))
        try:
            arguments = validated(tool, given)
        except ValidationError as exc:
            return _error_result(invalid_arguments(exc))
        try:
            output = await tool.fn_metadata.call_fn(tool.fn, True, arguments)
            if not isinstance(output, ToolOutput):
                raise TypeError(f"returned {type(output).__name__}, not ToolOutput")
        except AgentpostError as err:
            return _error_result(err)
        except MCPError:
            raise
        except Exception:
            # A bug, not a refusal: the text stays on the server.
            logger.exception("tool %r raised an unexpected exception", tool.name)
            return _tool_result(f"Error executing tool {tool.name}", error=True)
        return _tool_result(output.text, output.structured)

    async def _list_resources(
        self, ctx: _Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(uri=uri, name=_resource_name(uri), mime_type=_JSON_MIME)
                for uri in self._resource_uris
            ]
        )

    async def _read_resource(
        self, ctx: _Ctx, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        try:
            if str(params.uri) not in self._resource_uris:  # never the inbox under any URI
                raise AgentpostError(ErrorCode.NOT_FOUND, f"no resource {params.uri}")
            text = await self._read(params.uri)
        except AgentpostError as err:
            raise MCPError(
                _rpc_code(err), f"{err.code.value}: {err.message}", err.to_dict()
            ) from err
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=params.uri, text=text, mime_type=_JSON_MIME)]
        )

    async def _subscribe(
        self, ctx: _Ctx, params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        # Only a URI served: each is kept while the connection lives, and any URI at all let
        # a client fill the server's memory (on the listen path they last one request).
        if params.uri not in self._resource_uris:
            err = AgentpostError(ErrorCode.NOT_FOUND, "no such resource to subscribe to")
            raise MCPError(_rpc_code(err), f"{err.code.value}: {err.message}", err.to_dict())
        self._peers.track(_connection_of(ctx), self._audience()).add(params.uri)
        return types.EmptyResult()

    async def _unsubscribe(
        self, ctx: _Ctx, params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        self._peers.track(_connection_of(ctx), self._audience()).discard(params.uri)
        return types.EmptyResult()
