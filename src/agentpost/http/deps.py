"""What a route is handed: the post office and the caller the guard let in."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from agentpost.domain.models import Caller
from agentpost.http.guard import caller_of
from agentpost.services import PostOffice


def _office(request: Request) -> PostOffice:
    office: PostOffice = request.app.state.office
    return office


def _caller(request: Request) -> Caller:
    return caller_of(request.scope.setdefault("state", {}))


def client_ip(request: Request) -> str | None:
    return request.client.host if request.client else None


Office = Annotated[PostOffice, Depends(_office)]
Me = Annotated[Caller, Depends(_caller)]

IdempotencyKey = Annotated[
    str | None,
    Header(
        max_length=200,
        description="A retry under the same key (24 h, per agent) answers as the first "
        "request did and does nothing again; another request under it is a `conflict`.",
    ),
]
