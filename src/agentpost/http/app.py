"""The REST application: routes, error shapes, health, OpenAPI at /openapi.json and /docs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from agentpost import __version__
from agentpost.http import (
    admin,
    agents,
    channels,
    events,
    leadership,
    messages,
    reservations,
    tasks,
)
from agentpost.http.deps import Office
from agentpost.http.errors import install_error_handlers
from agentpost.http.routing import LineFeedsRouted, UnicodeJsonRoute
from agentpost.services import PostOffice

DESCRIPTION = """\
The REST face of agentpost, a post office for AI agents. Every `/v1` call but `POST
/v1/register` needs `Authorization: Bearer <key>`. Errors are `{"error": {"code", "message"}}`
with a stable code; 429 answers carry `Retry-After`."""


DOCS_ASSETS = "/docs/static"
"""Swagger UI's script, style sheet and icon, served from the installed package: the docs
page works where the service cannot reach a CDN, and loads nothing from elsewhere."""


def build_rest_app(office: PostOffice) -> FastAPI:
    app = FastAPIOffline(
        title="agentpost",
        version=__version__,
        description=DESCRIPTION,
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url=None,
        static_url=DOCS_ASSETS,
    )
    app.router.route_class = UnicodeJsonRoute  # its own routes too, as the routers' are
    app.add_middleware(LineFeedsRouted)
    app.state.office = office
    install_error_handlers(app)
    for module in (messages, agents, channels, events, leadership, tasks, reservations, admin):
        app.include_router(module.router)

    app.openapi = _documenting_errors(app.openapi)  # type: ignore[method-assign]

    @app.get("/health", tags=["service"], operation_id="health")
    async def health() -> dict[str, Any]:
        """Liveness: answers without a key, whatever the database's state."""
        return {"status": "ok", "version": __version__}

    @app.get("/ready", tags=["service"], operation_id="ready")
    async def ready(office: Office) -> dict[str, Any]:
        """Readiness, for a load balancer: 200 while this replica can read its database and
        the database takes writes, 503 `unavailable` (saying why) while not. Answers without a
        key."""
        return (await office.readiness()).to_dict()

    # A load balancer may check with HEAD (HAProxy's `option httpchk HEAD /ready`): the same
    # status, no body. Left out of the OpenAPI document, which names each operation once.
    app.head("/health", include_in_schema=False)(health)
    app.head("/ready", include_in_schema=False)(ready)

    return app


ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string", "description": "Stable: see the README's table."},
                "message": {"type": "string"},
                "details": {"type": "object"},
                "retry_after_s": {"type": "number"},
            },
        }
    },
}
_BAD_INPUT = {
    "description": "Bad input: `invalid_argument` (as are refusals the route itself makes).",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}


def _documenting_errors(build: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    """FastAPI's OpenAPI, with bad input documented as the service answers it (400, its own
    error shape; see agentpost.http.errors), not as FastAPI's 422 `HTTPValidationError`."""

    def openapi() -> dict[str, Any]:
        schema = build()  # made once and kept by FastAPI: this changes the kept one
        for item in schema.get("paths", {}).values():
            for operation in item.values():
                responses = operation.get("responses", {})
                if responses.pop("422", None) is not None:
                    responses.setdefault("400", _BAD_INPUT)
        schemas = schema.setdefault("components", {}).setdefault("schemas", {})
        schemas.pop("HTTPValidationError", None)
        schemas.pop("ValidationError", None)
        schemas["Error"] = ERROR_SCHEMA
        return schema

    return openapi
