"""Leadership: one leader per project, as the lease `leader:<project>` with a fencing term.

The term grows with every new holder and is shown to everyone, so work a leader hands out can
carry the term it was decided under, and a deposed leader's late orders can be recognised as
such (a smaller term) by whoever receives them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from agentpost.domain.errors import forbidden
from agentpost.domain.models import Caller, Trust

LEASE_PREFIX = "leader:"
FALLBACK_DEFAULT_BRANCHES = ("main", "master")
"""The default branch when origin's HEAD cannot be read (no remote, or another machine)."""


def lease_name(project: str) -> str:
    return f"{LEASE_PREFIX}{project}"


def may_lead(
    branch: str | None, *, origin_head: str | None, leader_branches: Sequence[str] | None
) -> bool:
    """Whether a session on `branch` may lead: one of `leader_branches` when configured, else
    the project's default branch (origin's HEAD, else `main` or `master`)."""
    if branch is None:
        return False
    if leader_branches is not None:
        return branch in leader_branches
    if origin_head is not None:
        return branch == origin_head
    return branch in FALLBACK_DEFAULT_BRANCHES


def check_vouched(caller: Caller) -> None:
    """`forbidden` unless the owner vouches for the caller. A leader hands out work its
    colleagues take as the project's: a self-registered agent's word that its session is on
    the default branch is no reason for them to."""
    if caller.trust is not Trust.VERIFIED:
        raise forbidden(
            f"{caller.agent} is {caller.trust.value}: only an agent the owner vouched for "
            "may lead; the owner must vouch for it first (admin_vouch_agent)",
            trust=caller.trust.value,
        )


@dataclass(frozen=True, slots=True)
class Leader:
    """A project's seat: who holds it (None when free), under which term, since when."""

    project: str
    leader: str | None
    term: int
    """The term of the current holder, or of the last one while the seat is free (0: never)."""
    since: float | None
    session_id: str | None
    branch: str | None
    expires_at: float | None
    """When the lease lapses unless the holder's session heartbeats again."""
    released: bool | None = None
    """Only in a release's answer: whether it stepped down (false: the caller did not lead,
    as a release sent again finds, and nothing changed)."""

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.released is None:
            del out["released"]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Leader:
        return cls(
            project=data["project"],
            leader=data.get("leader"),
            term=int(data["term"]),
            since=data.get("since"),
            session_id=data.get("session_id"),
            branch=data.get("branch"),
            expires_at=data.get("expires_at"),
            released=data.get("released"),
        )
