"""The REST application: routes, error shapes, health, OpenAPI at /openapi.json and /docs."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

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
from agentpost.http.routing import UnicodeJsonRoute
from agentpost.services import PostOffice

DESCRIPTION = """\
The REST face of agentpost, a post office for AI agents. Every `/v1` call but `POST
/v1/register` needs `Authorization: Bearer <key>`. Errors are `{"error": {"code", "message"}}`
with a stable code; 429 answers carry `Retry-After`."""


def build_rest_app(office: PostOffice) -> FastAPI:
    app = FastAPI(
        title="agentpost",
        version=__version__,
        description=DESCRIPTION,
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url=None,
    )
    app.router.route_class = UnicodeJsonRoute  # its own routes too, as the routers' are
    app.state.office = office
    install_error_handlers(app)
    for module in (messages, agents, channels, events, leadership, tasks, reservations, admin):
        app.include_router(module.router)

    @app.get("/health", tags=["service"], operation_id="health")
    async def health() -> dict[str, Any]:
        """Liveness: answers without a key, whatever the database's state."""
        return {"status": "ok", "version": __version__}

    @app.get("/ready", tags=["service"], operation_id="ready")
    async def ready(office: Office) -> dict[str, Any]:
        """Readiness, for a load balancer: 200 while this replica can read its database,
        503 `unavailable` while it cannot. Answers without a key."""
        return (await office.readiness()).to_dict()

    return app
