"""The routers of the REST face, whose JSON bodies hold Unicode text only.

JSON can spell half of a surrogate pair (`"\\ud800"`); Python decodes it into a string that no
database, encoder or answer can hold, so a single such field once made a send, a profile or a
registration fail half-way with a 500. Such a body is refused here, once for every route and
before any field reaches a service, as `invalid_argument`. (The MCP SDK's parser refuses it on
its own; the domain's text rules stand behind both.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

_HALF_PAIR_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
"""Where a surrogate can come from: raw bytes are decoded strictly as UTF-8 by `json.loads`."""

NOT_UNICODE = "the body holds an unpaired surrogate (such as \\ud800): text must be Unicode"


def _is_unicode(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class UnicodeJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            value = json.loads(body)
            if _HALF_PAIR_ESCAPE.search(body) and not _is_unicode(value):
                raise HTTPException(400, NOT_UNICODE)
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
