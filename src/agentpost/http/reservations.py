"""Advisory file reservations: reserve, list, renew and release claims on a project's paths."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query

from agentpost.http.deps import Me, Office
from agentpost.http.routing import api_router
from agentpost.http.schemas import (
    ReleaseReservationsBody,
    RenewReservationsBody,
    ReserveBody,
    may_be_left_out,
)

router = api_router(prefix="/v1/reservations", tags=["reservations"])


@router.post("", operation_id="reserve")
async def reserve(body: ReserveBody, office: Office, me: Me) -> dict[str, Any]:
    """Claim paths or globs of your session's project; per path granted, or listed in
    `conflicts` with the holder and expiry of what it overlaps."""
    result = await office.reservations.reserve(
        me, body.paths, exclusive=body.exclusive, ttl_s=body.ttl_s, reason=body.reason
    )
    return result.to_dict()


@router.get("", operation_id="reservations")
async def reservations(
    office: Office,
    me: Me,
    project: str | None = None,
    path: Annotated[str | None, Query(max_length=1024)] = None,
) -> dict[str, Any]:
    """The live reservations of your project (or `project`), named in `project`; with `path`,
    those overlapping it."""
    found = await office.reservations.reservations(me, project, path)
    return {"project": found.project, "reservations": [r.to_dict() for r in found]}


@router.post("/renew", operation_id="renew_reservations")
async def renew_reservations(
    body: Annotated[RenewReservationsBody, may_be_left_out(RenewReservationsBody)],
    office: Office,
    me: Me,
) -> dict[str, Any]:
    """Extend your live reservations (those of `ids`, else all in your project) to `ttl_s`."""
    changed = await office.reservations.renew_reservations(me, body.ids, ttl_s=body.ttl_s)
    return changed.to_dict()


@router.post("/release", operation_id="release_reservations")
async def release_reservations(
    body: Annotated[ReleaseReservationsBody, may_be_left_out(ReleaseReservationsBody)],
    office: Office,
    me: Me,
) -> dict[str, Any]:
    """Give up your reservations by path or id (neither: all yours in your project); another
    agent's come back in `not_found`."""
    changed = await office.reservations.release_reservations(me, paths=body.paths, ids=body.ids)
    return changed.to_dict()
