"""The operations of file reservations. Each answer is read into the domain type the services
return."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentpost.client.operation import Operation, Request, fields, listed
from agentpost.domain.reservations import (
    Listed,
    Reservation,
    ReservationsChanged,
    ReserveResult,
    check_ttl,
)


def reserve(
    paths: str | Sequence[str],
    *,
    exclusive: bool = True,
    ttl_s: float = 3600,
    reason: str | None = None,
) -> Request[ReserveResult]:
    """Claim paths or git-style globs of your project, relative to its root, for `ttl_s`. Each
    path is granted unless it overlaps another agent's reservation where either is exclusive;
    those come back in `conflicts` with their holder and expiry."""
    check_ttl(ttl_s)  # a NaN or an infinity, which no JSON carries, named as the services do
    json = fields(paths=listed(paths), exclusive=exclusive, ttl_s=ttl_s, reason=reason)
    return Request(ReserveResult.from_dict, json=json)


def renew_reservations(
    ids: str | Sequence[str] | None = None, *, ttl_s: float | None = None
) -> Request[ReservationsChanged]:
    """Extend your live reservations to `ttl_s` from now (without it, each one's own ttl, the
    last it was given): those of `ids`, else every one of yours in your project."""
    if ttl_s is not None:
        check_ttl(ttl_s)
    json = fields(ids=None if ids is None else listed(ids), ttl_s=ttl_s)
    return Request(ReservationsChanged.from_dict, json=json)


def release_reservations(
    *, paths: str | Sequence[str] | None = None, ids: str | Sequence[str] | None = None
) -> Request[ReservationsChanged]:
    """Give up your reservations by path (as reserved) or id; with neither, all of yours in your
    project. Another agent's are never released: they come back in `not_found`."""
    json = fields(
        paths=None if paths is None else listed(paths), ids=None if ids is None else listed(ids)
    )
    return Request(ReservationsChanged.from_dict, json=json)


def _reservations(answer: Any) -> Listed:
    found = (Reservation.from_dict(r) for r in answer["reservations"])
    return Listed(answer.get("project"), found)


def reservations(*, project: str | None = None, path: str | None = None) -> Request[Listed]:
    """The live reservations of your project (or `project`), oldest first, a list that names
    its project in `.project` (your session's, where you reserve, when you name none); with
    `path`, those that overlap it."""
    return Request(_reservations, params={"project": project, "path": path})


class ReservationOperations:
    """Listed under their OpenAPI operation ids; both clients inherit them."""

    reserve = Operation("POST", "/v1/reservations", reserve)
    reservations = Operation("GET", "/v1/reservations", reservations)
    renew_reservations = Operation("POST", "/v1/reservations/renew", renew_reservations)
    release_reservations = Operation("POST", "/v1/reservations/release", release_reservations)
