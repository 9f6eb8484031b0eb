"""The routers of the REST face, whose JSON bodies hold Unicode text only.

JSON can spell half of a surrogate pair (`"\\ud800"`); Python decodes it into a string that no
database, encoder or answer can hold, so a single such field once made a send, a profile or a
registration fail half-way with a 500. Such a body is refused here, once for every route and
before any field reaches a service, as `invalid_argument`, and so is a body that is no UTF-8.
(The MCP adapter refuses it in any tool's arguments; the domain's text rules and the store,
which refuses any text it cannot bind, stand behind both.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from agentpost.domain.limits import holds_half_pair, not_unicode

_HALF_PAIR_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
"""Where a surrogate can come from once the bytes are decoded strictly: an escape."""

NOT_UTF8 = "the body is not UTF-8"


class UnicodeJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                # Strict: `json.loads` takes bytes with `surrogatepass`, so the bytes of an
                # encoded half pair (ED A0 80) would decode into one.
                text = body.decode("utf-8")
            except UnicodeDecodeError:
                raise HTTPException(400, NOT_UTF8) from None
            value = json.loads(text)
            if _HALF_PAIR_ESCAPE.search(body) and holds_half_pair(value):
                raise HTTPException(400, not_unicode("the body").message)
            self._json = value
        return self._json


class UnicodeJsonRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def with_unicode_json(request: Request) -> Response:
            return await handler(UnicodeJsonRequest(request.scope, request.receive))

        return with_unicode_json


def api_router(*, prefix: str, tags: list[str]) -> APIRouter:
    """A router of the REST face: every route refuses a body that is not Unicode text."""
    return APIRouter(prefix=prefix, tags=list(tags), route_class=UnicodeJsonRoute)
