"""The routers of the REST face, whose JSON bodies hold Unicode text only, and whose query
strings name only parameters their route takes, each once.

JSON can spell half of a surrogate pair (`"\\ud800"`); Python decodes it into a string that no
database, encoder or answer can hold, so a single such field once made a send, a profile or a
registration fail half-way with a 500. Such a body is refused here, once for every route and
before any field reaches a service, as `invalid_argument`, and so is a body that is no UTF-8
or comes compressed (`Content-Encoding`), which the service does not take. So is a body that
gives a key twice in one object, at any depth: JSON decoders disagree on which of its values
counts (Python's takes the last, others the first), so a proxy or a log could read
`{"to": "bob", "to": "eve"}` as mail to bob while the service sent it to eve.
(The MCP adapter refuses it in any tool's arguments; the domain's text rules and the store,
which refuses any text it cannot bind, stand behind both.)

A route that takes no body (`PUT /v1/blocks/bob`, `DELETE /v1/channels/dev/members/me`, any
`GET`) refuses one but `{}`, as a body's unknown field is refused: ignored, `{"peek": true}`
on `GET /v1/inbox` would read the mail it meant to peek at. No body and `{}` both mean none.

A query parameter a route does not take is refused too, as a body's unknown field is and as
an MCP tool refuses an argument it does not declare: dropped, `GET /v1/inbox?peak=true` read
(and marked read) the mail it meant to peek at. So is a parameter given twice, of which
FastAPI would quietly take the last.

A path holding a line feed (`%0A`) is routed as any other path: Starlette's patterns match no
line feed with `.` and end at one with `$`, so `/v1/channels/%23dev%0A/messages` found no
route, and `PUT /v1/blocks/bob%0A` blocked `bob`. The router sees a stand-in for each line feed
and the route its own path and parameters back, line feeds and all, so a name holding one is
refused by the name's rules, as one holding a tab or a carriage return is, and a thread whose id
holds one is read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.limits import holds_half_pair, not_unicode

_HALF_PAIR_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
"""Where a surrogate can come from once the bytes are decoded strictly: an escape."""

NOT_UTF8 = "the body is not UTF-8"


def _check_not_compressed(request: Request) -> None:
    """A body is taken as sent: a compressed one would otherwise be refused as no UTF-8, as
    if its text were broken."""
    encodings = [
        coding.strip().lower()
        for coding in request.headers.getlist("content-encoding")
        for coding in coding.split(",")
    ]
    sent = [coding for coding in encodings if coding not in ("", "identity")]
    if sent:
        raise HTTPException(
            400,
            f"the body is sent with Content-Encoding: {', '.join(sent)}, which the service "
            "does not take: send it uncompressed",
        )


def _keys_given_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object of the body, refused if it gives a key twice. Costs about a plain decode
    again, for which every reader of the body then reads the same request."""
    value = dict(pairs)
    if len(value) == len(pairs):
        return value
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise HTTPException(
                400, f"the body gives the key {key!r} more than once in one object: give it once"
            )
        seen.add(key)
    raise AssertionError("a key fewer, and none given twice")


class UnicodeJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            _check_not_compressed(self)
            body = await self.body()
            try:
                # Strict: `json.loads` takes bytes with `surrogatepass`, so the bytes of an
                # encoded half pair (ED A0 80) would decode into one.
                text = body.decode("utf-8")
            except UnicodeDecodeError:
                raise HTTPException(400, NOT_UTF8) from None
            value = json.loads(text, object_pairs_hook=_keys_given_once)
            if _HALF_PAIR_ESCAPE.search(body) and holds_half_pair(value):
                raise HTTPException(400, not_unicode("the body").message)
            self._json = value
        return self._json


async def check_no_body(request: UnicodeJsonRequest) -> None:
    """A route that takes no body is sent none, or `{}` (what a client that always sends JSON
    sends when it has no fields)."""
    if not (await request.body()).strip():
        return
    try:
        value = await request.json()
    except json.JSONDecodeError:
        value = None
    if value != {}:
        raise AgentpostError(
            ErrorCode.INVALID_ARGUMENT,
            f"{request.method} {request.url.path} takes no body: send none (or {{}})",
            details={"fields": [{"field": "body", "problem": "this operation takes no body"}]},
        )


def _query_names(dependant: Dependant) -> set[str]:
    """The query parameters a route takes, its dependencies' (the caller's session…) too."""
    names = {param.alias for param in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


def check_query_string(request: Request, taken: set[str]) -> None:
    given = [name for name, _ in request.query_params.multi_items()]
    unknown = sorted({name for name in given if name not in taken})
    if unknown:
        raise AgentpostError(
            ErrorCode.INVALID_ARGUMENT,
            f"{request.url.path} takes no query parameter "
            + ", ".join(repr(name) for name in unknown)
            + (f" (it takes {', '.join(sorted(taken))})" if taken else ""),
            details={"fields": [{"field": n, "problem": "no such parameter"} for n in unknown]},
        )
    twice = sorted({name for name in given if given.count(name) > 1})
    if twice:
        raise AgentpostError(
            ErrorCode.INVALID_ARGUMENT,
            "each query parameter is given once: " + ", ".join(repr(name) for name in twice),
            details={"fields": [{"field": n, "problem": "given twice"} for n in twice]},
        )


_STAND_IN = "agentpost.line_feed"
"""The scope's key for the character that stands for a line feed while a path is routed."""


class LineFeedsRouted:
    """ASGI, before the router: each line feed of a path is a character the path does not
    hold (of the private use area) while it is routed; `restore_line_feeds` undoes it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and "\n" in path:
            stand_in = next((c for c in map(chr, range(0xE000, 0xF900)) if c not in path), None)
            if stand_in is None:  # a path that holds them all: its line feeds stay refused,
                scope = {**scope, "path": path.replace("\n", "\x7f")}  # by a control character
            else:
                scope = {**scope, "path": path.replace("\n", stand_in), _STAND_IN: stand_in}
        await self.app(scope, receive, send)


def restore_line_feeds(scope: Scope) -> None:
    """The request's own path and path parameters back, once it is routed."""
    stand_in = scope.pop(_STAND_IN, None)
    if stand_in is None:
        return
    scope["path"] = scope["path"].replace(stand_in, "\n")
    scope["path_params"] = {
        name: value.replace(stand_in, "\n") if isinstance(value, str) else value
        for name, value in scope.get("path_params", {}).items()
    }


Gate = Callable[[Request], Awaitable[None]]
"""Asked of a request its route refuses as malformed (its query string, its body), before the
refusal goes out: raising, it answers in the refusal's stead."""


class UnicodeJsonRoute(APIRoute):
    gate: Gate | None = None

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        # The API's operations only: probes (`/health`, `/ready`) and the docs' pages take
        # what a monitor or a browser adds.
        api = self.include_in_schema and self.path.startswith("/v1/")
        taken = _query_names(self.dependant) if api else None
        bodyless = api and self.body_field is None
        gate = self.gate

        async def with_unicode_json(request: Request) -> Response:
            restore_line_feeds(request.scope)
            unicode_json = UnicodeJsonRequest(request.scope, request.receive)
            try:
                if taken is not None:
                    check_query_string(request, taken)
                if bodyless:
                    await check_no_body(unicode_json)
                return await handler(unicode_json)
            except (RequestValidationError, HTTPException, AgentpostError) as refused:
                malformed = not isinstance(refused, AgentpostError) or (
                    refused.code is ErrorCode.INVALID_ARGUMENT
                )
                if gate is not None and malformed:
                    await gate(request)
                raise

        return with_unicode_json


def api_router(*, prefix: str, tags: list[str], gate: Gate | None = None) -> APIRouter:
    """A router of the REST face: every route refuses a body that is not Unicode text. `gate`
    is asked first of a request a route refuses as malformed (see `Gate`)."""
    if gate is None:
        return APIRouter(prefix=prefix, tags=list(tags), route_class=UnicodeJsonRoute)
    gated = type("GatedUnicodeJsonRoute", (UnicodeJsonRoute,), {"gate": staticmethod(gate)})
    return APIRouter(prefix=prefix, tags=list(tags), route_class=gated)
