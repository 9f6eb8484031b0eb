"""MCP over Streamable HTTP, where the SDK meets the service's HTTP world: the request a
message arrived on, as plain values, and the door in front of the SDK's sessions of 2025-era
connections (whose each one is, and how many one principal holds open).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Protocol

import anyio
import mcp.types as types
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentpost.domain.errors import AgentpostError

_Ctx = ServerRequestContext[dict[str, Any], Any]


@dataclass(frozen=True)
class HttpRequest:
    """The HTTP request an MCP message arrived on, as plain values (None over stdio).

    `state` is the ASGI scope's state: what the application's own middleware learnt about the
    request (who sent it), handed through untouched.
    """

    headers: Mapping[str, str]
    query: Mapping[str, str]
    client_ip: str | None
    state: Mapping[str, Any]

    @property
    def connection(self) -> str | None:
        """The transport session of a 2025-era connection; 2026-era requests have none."""
        return self.headers.get("mcp-session-id")


_NO_QUERY: Mapping[str, str] = MappingProxyType({})

request_in_hand: ContextVar[HttpRequest | None] = ContextVar("mcp_http_request", default=None)
"""Set by the server around each message (`MailboxServer`), read by `current_http_request`."""


def http_request_of(ctx: _Ctx) -> HttpRequest | None:
    """The HTTP request a message arrived on; None over stdio."""
    request = ctx.request
    scope = getattr(request, "scope", None)
    if not isinstance(scope, dict):
        return None
    client = scope.get("client")
    # Starlette's own mappings, not copies (this runs for every message): its headers already
    # answer in any case, its query parameters give the last value of a repeated name. Most
    # requests have no query: theirs costs no parse.
    query = getattr(request, "query_params", _NO_QUERY) if scope.get("query_string") else _NO_QUERY
    return HttpRequest(
        headers=getattr(request, "headers", {}),
        query=query,
        client_ip=client[0] if client else None,
        state=scope.get("state") or {},
    )


PrincipalOf = Callable[[Mapping[str, Any]], str | None]
"""Who a request over HTTP speaks for, from what the application's own middleware learnt of it
(the ASGI scope's state); None where nobody was authenticated."""


ConnectionClosed = Callable[[Mapping[str, Any], str], Awaitable[None]]
"""Told, before its client hears the answer, that a principal closed a 2025-era connection
(`DELETE /mcp`, taken by the SDK): the request's ASGI state (as `PrincipalOf` reads it) and the
connection's `Mcp-Session-Id`."""


StreamHeld = Callable[[Mapping[str, Any], str], AbstractAsyncContextManager[None]]
"""Entered, with the request's ASGI state and the connection's `Mcp-Session-Id`, for as long as
a 2025-era connection's own stream (`GET /mcp`) stays open; what it raises (a key revoked
meanwhile, say) ends the stream."""


class OpenConnections(Protocol):
    """The 2025-era connections open now, by principal, as the SDK holds them."""

    def count(self, principal: str) -> int:
        """How many `principal` holds open."""
        ...

    def closed(self, connection: str) -> None:
        """The SDK has just closed `connection` (its `Mcp-Session-Id`): count it no more,
        though the SDK tears it down only later."""
        ...


class ConnectionGate:
    """In front of the SDK's session manager, for 2025-era connections (which have a transport
    session, `Mcp-Session-Id`).

    Each connection belongs to the principal that opened it: the SDK answers another
    principal's use of its id as an unknown session (it compares `scope["user"]`, which only an
    authentication middleware of its own would otherwise set), so a connection id that leaks is
    no way into someone else's push or session. And one principal holds at most `per_principal`
    connections open at once, so nobody fills the SDK's table of sessions for everyone else.
    A connection's own stream is held open inside `while_streaming` (a heartbeat, say).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        principal_of: PrincipalOf,
        connections: OpenConnections,
        per_principal: int,
        on_closed: ConnectionClosed | None = None,
        while_streaming: StreamHeld | None = None,
    ) -> None:
        self._app = app
        self._while_streaming = while_streaming
        self._principal_of = principal_of
        self._connections = connections
        self._per_principal = per_principal
        self._on_closed = on_closed
        self._opening: dict[str, int] = {}
        """Opening requests in flight, per principal, until their answer is sent: a connection
        is counted as open only once the SDK has taken its `initialize`, so many sent at once
        must count here."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        principal = (
            self._principal_of(scope.get("state") or {}) if scope["type"] == "http" else None
        )
        if principal is None:
            await self._app(scope, receive, send)
            return
        scope["user"] = _user(principal)
        connection, version = _mcp_headers(scope)
        if scope["method"] == "DELETE" and connection is not None:
            await self._app(scope, receive, self._closing(scope, connection, send))
            return
        if scope["method"] == "GET" and connection is not None:
            await self._stream(scope, receive, send, connection)
            return
        if scope["method"] == "POST" and connection is not None and _legacy(version):
            await self._request(scope, receive, send)
            return
        if not _opens_connection(scope["method"], connection, version):
            await self._app(scope, receive, send)
            return
        await self._open(principal, scope, receive, send)

    async def _request(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A message on a 2025-era connection. Its answer goes only to the request it came on
        (no event store keeps it for a reconnect): once that request's client hangs up before
        the answer, the SDK is told the request is cancelled, as if the client had said so, so a
        `wait` that nobody will read takes no mail (the SDK would run it to the end). Which
        request that was is read from the body only then: an answered request (nearly all)
        costs no second parse of its JSON, unless its body is too large to keep meanwhile. What
        the SDK took for a notification (202) is read again: a request whose id is no string or
        integer is taken so, and its client waits for an answer; it is refused instead."""
        body = bytearray()
        request_id: int | str | None = None
        unanswerable = answered = refused = False

        async def reading() -> Message:
            nonlocal request_id, unanswerable
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
                if not message.get("more_body", False) and len(body) > _KEPT_BODY_BYTES:
                    parsed = _parsed(bytes(body))
                    request_id, unanswerable = _id_of(parsed), _unanswerable(parsed)
                    body.clear()
            return message

        async def watched(message: Message) -> None:
            nonlocal answered, refused
            if refused:
                return  # the SDK's 202, replaced by the refusal
            if (
                message["type"] == "http.response.start"
                and message["status"] == 202
                and (unanswerable or (body and _unanswerable(_parsed(bytes(body)))))
            ):
                # Taken for a notification: its client would wait for an answer never sent.
                refused = answered = True
                await _unanswerable_id()(scope, receive, send)
                return
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                answered = True
            await send(message)

        await self._app(scope, reading, watched)
        if answered:
            return
        if body:
            request_id = _request_id(bytes(body))
        if request_id is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CANCEL_TIMEOUT_S):
                await self._app(*_cancelling(scope, request_id))

    async def _stream(self, scope: Scope, receive: Receive, send: Send, connection: str) -> None:
        """The connection's own stream, inside `while_streaming`; once that ends it (raising
        an `AgentpostError`), the stream's body ends, and the client's next request hears why."""
        if self._while_streaming is None:
            await self._app(scope, receive, send)
            return
        started = finished = False

        async def watched(message: Message) -> None:
            nonlocal started, finished
            if message["type"] == "http.response.start":
                started = True
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                finished = True
            await send(message)

        try:
            async with self._while_streaming(scope.get("state") or {}, connection):
                await self._app(scope, receive, watched)
        except AgentpostError as err:
            if not started:
                await _refusal(err, 401)(scope, receive, send)
            elif not finished:
                await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _closing(self, scope: Scope, connection: str, send: Send) -> Send:
        """The SDK answers a `DELETE` with 2xx once it has closed the connection (a refusal
        changes nothing), and tears it down after: counted until then, it would refuse the
        client's next `initialize`. `on_closed` hears of it before the client does."""

        async def answer(message: Message) -> None:
            if message["type"] == "http.response.start" and 200 <= message["status"] < 300:
                self._connections.closed(connection)
                if self._on_closed is not None:
                    await self._on_closed(scope.get("state") or {}, connection)
            await send(message)

        return answer

    async def _open(self, principal: str, scope: Scope, receive: Receive, send: Send) -> None:
        opening = self._opening.get(principal, 0)
        if self._connections.count(principal) + opening >= self._per_principal:
            await _too_many_connections(principal, self._per_principal)(scope, receive, send)
            return
        self._opening[principal] = opening + 1
        counted = True

        def opened() -> None:
            nonlocal counted
            if counted:
                counted = False
                left = self._opening[principal] - 1
                if left:
                    self._opening[principal] = left
                else:
                    del self._opening[principal]

        body = bytearray()  # an `initialize` is small: kept up to _KEPT_BODY_BYTES
        refused = False

        async def reading() -> Message:
            message = await receive()
            if message["type"] == "http.request" and len(body) <= _KEPT_BODY_BYTES:
                body.extend(message.get("body", b""))
            return message

        async def answer(message: Message) -> None:
            nonlocal refused
            if refused:
                return  # the SDK's refusal, replaced
            if (
                message["type"] == "http.response.start"
                and message["status"] == 400
                and _unanswerable(_parsed(bytes(body)))
            ):
                # The SDK took it for a notification and said a connection id was missing.
                refused = True
                opened()
                await _unanswerable_id()(scope, receive, send)
                return
            # By the answer's last byte the SDK has taken the `initialize` (the connection is
            # open, and counted there) or refused it. The handler's task may come back only
            # after the client has read it and sent more: counted here still, a connection
            # would count twice meanwhile.
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                opened()
            await send(message)

        try:
            await self._app(scope, reading, answer)
        finally:
            opened()


class NoReplay:
    """In front of the SDK: a 2025-era stream reopened with `Last-Event-ID` is a new stream.

    No event store keeps what a stream carried, so there is nothing to replay; the SDK then
    answers such a GET with nothing at all (a 500 from the server). What a stream carries is
    only ever a hint (`inbox updated`), and the log is the truth: the client reads it again.
    """

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            headers = scope["headers"]
            if any(name == b"last-event-id" for name, _ in headers):
                kept = [(name, value) for name, value in headers if name != b"last-event-id"]
                scope = {**scope, "headers": kept}
        await self._app(scope, receive, send)


_RETRY_CONNECTION_S: Final = 60
_CANCEL_TIMEOUT_S: Final = 5
_KEPT_BODY_BYTES: Final = 16_384
"""A 2025-era request's body kept until its answer (a `wait` may take minutes), to learn its
id only if the client hangs up first; a larger one is read at once and let go."""


def _legacy(version: str | None) -> bool:
    return version is None or version in HANDSHAKE_PROTOCOL_VERSIONS


def _parsed(body: bytes) -> dict[str, Any] | None:
    """The JSON-RPC request or notification `body` holds; None for anything else (a response,
    what is not JSON-RPC, what is nested too deep to read: the SDK says so)."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or not isinstance(message.get("method"), str):
        return None
    return message


def _id_of(message: dict[str, Any] | None) -> int | str | None:
    found = None if message is None else message.get("id")
    return found if isinstance(found, int | str) and not isinstance(found, bool) else None


def _request_id(body: bytes) -> int | str | None:
    """The id of the JSON-RPC request `body` holds; None for anything else (a notification,
    a response, what is not JSON-RPC)."""
    return _id_of(_parsed(body))


def _unanswerable(message: dict[str, Any] | None) -> bool:
    """A request (it has an `id`) whose id is no string or integer, where an answer must name
    it: the SDK takes it for a notification, runs nothing and answers nothing."""
    return message is not None and "id" in message and _id_of(message) is None


def _cancelling(scope: Scope, request_id: int | str) -> tuple[Scope, Receive, Send]:
    """A `notifications/cancelled` of `request_id` on the connection `scope` is on, as its
    client would POST it, to be answered nowhere."""
    note = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": request_id, "reason": "the client hung up"},
    }
    body = json.dumps(note).encode()
    headers = [
        (k, v) for k, v in scope["headers"] if k not in (b"content-length", b"transfer-encoding")
    ]
    headers.append((b"content-length", str(len(body)).encode()))
    given = False

    async def receive() -> Message:
        nonlocal given
        if given:
            return {"type": "http.disconnect"}
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def nowhere(message: Message) -> None:
        pass

    return {**scope, "headers": headers}, receive, nowhere


@functools.lru_cache(maxsize=1024)
def _user(principal: str) -> AuthenticatedUser:
    """The SDK's view of a principal, made once: every request over HTTP asks."""
    return AuthenticatedUser(AccessToken(token="", client_id=principal, scopes=[]))


def _mcp_headers(scope: Scope) -> tuple[str | None, str | None]:
    """The request's connection (`Mcp-Session-Id`) and protocol revision, where it names them."""
    connection = version = None
    for name, value in scope["headers"]:  # ASGI header names come lower-cased
        if name == b"mcp-session-id":
            connection = value.decode("latin-1")
        elif name == b"mcp-protocol-version":
            version = value.decode("latin-1")
    return connection, version


def _opens_connection(method: str, connection: str | None, version: str | None) -> bool:
    """A 2025-era opening request: a POST with no session id, in no modern revision."""
    if method != "POST" or connection is not None:
        return False
    return version is None or version in HANDSHAKE_PROTOCOL_VERSIONS


def jsonrpc_refusal(
    message: str, status: int, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """A request refused before the SDK sees it, as a JSON-RPC error an MCP client reads;
    `message` leads with the stable code (`forbidden: …`)."""
    body = {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": types.INVALID_REQUEST, "message": message},
    }
    return JSONResponse(body, status_code=status, headers=headers)


def _unanswerable_id() -> JSONResponse:
    """A request whose id no answer could name, refused as the 2026-era transport refuses it
    (-32600), not taken for a notification (202)."""
    return jsonrpc_refusal(
        "invalid_argument: a request's id is a string or an integer (MCP allows no null): "
        "no answer could name this one",
        400,
    )


def _refusal(err: AgentpostError, status: int) -> JSONResponse:
    return jsonrpc_refusal(f"{err.code.value}: {err.message}", status)


def _too_many_connections(principal: str, most: int) -> JSONResponse:
    message = (
        f"rate_limited: {principal} holds {most} open MCP connections, the most one agent may; "
        "close one (DELETE /mcp) or let one idle out"
    )
    return jsonrpc_refusal(message, 429, {"Retry-After": str(_RETRY_CONNECTION_S)})


def current_http_request() -> HttpRequest | None:
    """The HTTP request being handled, inside a tool, resource or listing; None over stdio."""
    return request_in_hand.get()
