"""DNS-rebinding protection in front of the MCP endpoint: the `Host` and `Origin` a request
names must be ones the server answers to.

Loopback names (`127.0.0.1`, `localhost`, `[::1]`) always pass, on any port or none; others
only when listed: `name:port`, `name:*` (any port, or none), or `name` (none). Origins the
same way, with their scheme (`https://name:port`, `https://name:*`, `https://name`, `http://`
likewise). Names compare in any case, as DNS has them. (The SDK's own check took
`LOCALHOST:8470` for a stranger, `localhost` without a port too, and
`127.0.0.1:8470.evil.example` for loopback, and its refusals were bare text that named no
setting.)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from agentpost.domain.errors import invalid
from agentpost.mcp.adapter.streamable_http import jsonrpc_refusal

T = TypeVar("T")

LOOPBACK: Final = ("127.0.0.1", "localhost", "[::1]")
ANY_PORT: Final = "*"
PASSED_KEPT: Final = 64
"""`Host` and `Origin` values that passed, kept so that each request need not read its own
again (every request of a connection names the same); a value not kept is read afresh."""
NAME: Final = re.compile(r"[a-z0-9._~%!$&'()*+,;=-]+|\[[0-9a-f:.]+\]")
"""A host as a `Host` header can carry it (RFC 3986's reg-name, or an IPv6 literal): no `/`,
`@`, `?` or space, so `agents.example/mcp` is no name a request could ever send."""


@dataclass(frozen=True)
class _Place:
    """A host (`name`, `[v6]`) with its port ("" for none, `*` in a pattern for any)."""

    name: str
    port: str

    def matches(self, pattern: _Place) -> bool:
        if self.name != pattern.name:
            return False
        return pattern.port == ANY_PORT or pattern.port == self.port


def _place(value: str, *, pattern: bool = False) -> _Place | None:
    """`name[:port]` read, in lower case; None when it is no such thing."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[: end + 1], value[end + 1 :]
        if rest and not rest.startswith(":"):
            return None
        port = rest[1:]
    else:
        name, _, port = value.partition(":")
        if ":" in port:
            return None
    if not NAME.fullmatch(name) or (port == "" and value.endswith(":")):
        return None
    if not (port.isdigit() and port.isascii()) and port != "" and not (pattern and port == "*"):
        return None
    return _Place(name, port)


def _origin(value: str, *, pattern: bool = False) -> tuple[str, _Place] | None:
    """`scheme://name[:port]` read; None when it is no such thing (a path, `null`)."""
    scheme, sep, rest = value.strip().lower().partition("://")
    if not sep or scheme not in ("http", "https") or "/" in rest:
        return None
    place = _place(rest, pattern=pattern)
    return None if place is None else (scheme, place)


def _listed(read: T | None, entry: str, setting: str, form: str) -> T:
    """An entry of a setting as read; one that reads as nothing is refused when the server
    starts, naming it: dropped, it would leave a refusal pointing at the setting it is in."""
    if read is None:
        raise invalid(f"{setting} holds {entry!r}, which is not of the form {form}")
    return read


def allowed_places(
    allowed_hosts: Sequence[str], allowed_origins: Sequence[str]
) -> tuple[list[_Place], list[tuple[str, _Place]]]:
    """The hosts and origins a server answers to: loopback's, and those listed; an entry of
    no usable form is `invalid_argument`, naming it (call it at start: Starlette builds
    middleware at the first request)."""
    loopback = [_Place(name, ANY_PORT) for name in LOOPBACK]
    hosts = loopback + [
        _listed(_place(h, pattern=True), h, "allowed_hosts", "name:port, name:* or name")
        for h in allowed_hosts
    ]
    origins = [("http", p) for p in loopback] + [
        _listed(
            _origin(v, pattern=True),
            v,
            "allowed_origins",
            "https://name:port, https://name:* or https://name (or http://), no path",
        )
        for v in allowed_origins
    ]
    return hosts, origins


class RebindingCheck:
    """Refuses a request whose `Host` (421) or `Origin` (403) the server does not answer to,
    saying which setting would list it."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        allowed_hosts: Sequence[str] = (),
        allowed_origins: Sequence[str] = (),
    ) -> None:
        self._app = app
        self._hosts, self._origins = allowed_places(allowed_hosts, allowed_origins)
        self._passed: set[tuple[str, str]] = set()
        """(`host` or `origin`, value) that passed: the settings do not change while serving."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        host = origin = None
        for name, value in scope["headers"]:  # ASGI header names come lower-cased
            if name == b"host":
                host = value.decode("latin-1")
            elif name == b"origin":
                origin = value.decode("latin-1")
        if not self._host_passes(host):
            refusal = _refusal(
                421, f"this server does not answer to the Host {host!r}", "allowed_hosts"
            )
            await refusal(scope, receive, send)
            return
        if origin is not None and not self._origin_passes(origin):
            refusal = _refusal(
                403, f"requests from the Origin {origin!r} are refused", "allowed_origins"
            )
            await refusal(scope, receive, send)
            return
        await self._app(scope, receive, send)

    def _host_passes(self, host: str | None) -> bool:
        if host is None:
            return False
        if ("host", host) in self._passed:
            return True
        place = _place(host)
        passes = place is not None and any(place.matches(p) for p in self._hosts)
        return self._kept("host", host, passes)

    def _origin_passes(self, origin: str) -> bool:
        if ("origin", origin) in self._passed:
            return True
        found = _origin(origin)
        if found is None:
            return False
        scheme, place = found
        passes = any(scheme == s and place.matches(p) for s, p in self._origins)
        return self._kept("origin", origin, passes)

    def _kept(self, header: str, value: str, passes: bool) -> bool:
        if passes and len(self._passed) < PASSED_KEPT:
            self._passed.add((header, value))
        return passes


def _refusal(status: int, why: str, setting: str) -> JSONResponse:
    message = (
        f"forbidden: {why} (DNS-rebinding protection); "
        f"a server reached by another name lists it in its {setting} setting"
    )
    return jsonrpc_refusal(message, status)
