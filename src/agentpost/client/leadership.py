"""The leadership operations: who leads, claiming and releasing the seat."""

from __future__ import annotations

from typing import Any

from agentpost.client.operation import Operation, Request, fields
from agentpost.domain.leadership import Leader


def leader(project: str | None = None) -> Request[Leader]:
    """Who leads `project` (default: your session's), under which term."""
    return Request(Leader.from_dict, params={"project": project})


def _leaders(answer: Any) -> list[Leader]:
    return [Leader.from_dict(seat) for seat in answer["leaders"]]


def leaders() -> Request[list[Leader]]:
    """Every project's seat that was ever taken."""
    return Request(_leaders)


def claim_leadership(project: str | None = None, *, force: bool = False) -> Request[Leader]:
    """Take your project's seat (`conflict` while another live session holds it)."""
    return Request(Leader.from_dict, json=fields(project=project, force=force))


def release_leadership(project: str | None = None) -> Request[Leader]:
    """Step down."""
    return Request(Leader.from_dict, json=fields(project=project))


class LeadershipOperations:
    """Listed under their OpenAPI operation ids; both clients inherit them."""

    leader = Operation("GET", "/v1/leadership", leader)
    leaders = Operation("GET", "/v1/leadership/all", leaders)
    claim_leadership = Operation("POST", "/v1/leadership/claim", claim_leadership)
    release_leadership = Operation("POST", "/v1/leadership/release", release_leadership)
