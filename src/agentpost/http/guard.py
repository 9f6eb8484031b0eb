"""The door of the service: who is asking, and how much they may send.

A pure ASGI middleware (not Starlette's `BaseHTTPMiddleware`, which buffers streaming answers
and would hold server-sent events back). It authenticates every request to /v1 and /mcp by its
bearer key before any route or the MCP SDK sees it, and puts the caller in the ASGI scope's
state; the REST routes and the MCP face read it from there. It also refuses request bodies over
`max_request_bytes`, whether or not they announce their length.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.limits import is_decimal
from agentpost.domain.models import Caller
from agentpost.http.errors import error_response

CALLER = "caller"
"""The key of the authenticated `Caller` in the ASGI scope's state."""
SESSION_HEADER = "agentpost-session"
"""Names a session minted by `POST /v1/sessions`; without it a key speaks for its own session."""

CONNECTION_HEADER = "mcp-session-id"
"""A 2025-era MCP connection's transport session: which session `register` bound it to, never
who is calling."""

OPEN_PATHS = frozenset(
    {"/health", "/ready", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}
)
OPEN_POSTS = frozenset({"/v1/register"})

SESSIONS = "/v1/sessions"

SAID_ONCE = ("authorization", SESSION_HEADER, CONNECTION_HEADER)
"""Headers that say who is asking, for which session or connection: given twice, one part of
the service would take the first and another the last, so such a request is refused."""


def speaks_for_keys_own(method: str, path: str) -> bool:
    """Whether a request that names no session speaks for the key's own. Not one that mints
    a session, nor one that beats or ends a session by its id: each would open (or revive) the
    key's own beside the one it is about, and leave the agent online after that one ends."""
    return not (path.startswith(SESSIONS + "/") or (method, path) == ("POST", SESSIONS))


Authenticate = Callable[[str | None, str | None, str | None, str | None, bool], Awaitable[Caller]]
"""(bearer secret, client address, named session, connection, whether a request that names no
session speaks for the key's own) → the caller."""


def bearer(headers: dict[str, str]) -> str | None:
    value = headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _needs_key(scope: Scope) -> bool:
    path: str = scope["path"]
    if path in OPEN_PATHS or (scope["method"] == "POST" and path in OPEN_POSTS):
        return False
    return _is_mcp(path) or path.startswith("/v1")


def _is_mcp(path: str) -> bool:
    """The MCP endpoint: the only place a request's connection (transport session) means
    something."""
    return path == "/mcp" or path.startswith("/mcp/")


class Guard:
    def __init__(self, app: ASGIApp, *, authenticate: Authenticate, max_body_bytes: int) -> None:
        self.app = app
        self.authenticate = authenticate
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        try:
            announced = self._announced_length(headers)
            if _needs_key(scope):
                _check_said_once(scope, headers)
                client = scope.get("client")
                caller = await self.authenticate(
                    bearer(headers),
                    client[0] if client else None,
                    headers.get(SESSION_HEADER),
                    _connection(scope["path"], headers),
                    speaks_for_keys_own(scope["method"], scope["path"]),
                )
                scope.setdefault("state", {})[CALLER] = caller
        except AgentpostError as err:
            await error_response(err)(scope, receive, send)
            return
        if announced:  # HTTP/1.1 delivers no more body than the length announced
            await self.app(scope, receive, send)
            return
        await self._forward(scope, receive, send)

    def _announced_length(self, headers: dict[str, str]) -> bool:
        """Whether the body's length is announced (and within the limit: else `too_large`);
        a chunked body is not, whatever Content-Length says beside it."""
        length = headers.get("content-length")
        if length is None or not is_decimal(length):
            return False
        if int(length) > self.max_body_bytes:
            raise self._too_large()
        return "transfer-encoding" not in headers

    def _too_large(self) -> AgentpostError:
        return AgentpostError(
            ErrorCode.TOO_LARGE, f"the request body is over {self.max_body_bytes} bytes"
        )

    async def _forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass on a request of no announced length, counting its body; past the limit, answer
        413 at once and let the application see a client that went away."""
        received = 0
        answered = started = False

        async def counted_receive() -> Message:
            nonlocal received, answered
            if answered:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    answered = True
                    if not started:
                        await error_response(self._too_large())(scope, receive, send)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if answered:  # once we answered 413, the application's answer goes nowhere
                return
            started = True
            await send(message)

        await self.app(scope, counted_receive, guarded_send)


def _connection(path: str, headers: dict[str, str]) -> str | None:
    return headers.get(CONNECTION_HEADER) if _is_mcp(path) else None


def _check_said_once(scope: Scope, headers: dict[str, str]) -> None:
    if len(headers) == len(scope["headers"]):  # `_headers` kept every one: none came twice
        return
    names = [k.decode("latin-1").lower() for k, _ in scope["headers"]]
    twice = [name for name in SAID_ONCE if names.count(name) > 1]
    if twice:
        raise AgentpostError(
            ErrorCode.INVALID_ARGUMENT,
            "each of these headers is sent once: " + ", ".join(twice),
            details={"headers": twice},
        )


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def caller_of(state: dict[str, Any]) -> Caller:
    """The caller the guard let in; a route reached without one is a wiring bug."""
    caller = state.get(CALLER)
    if not isinstance(caller, Caller):
        raise AgentpostError(ErrorCode.UNAUTHENTICATED, "no key was presented")
    return caller
