"""Request bodies of the REST API, as pydantic models: they are the OpenAPI's input schemas.

Unknown fields are refused (`extra="forbid"`), so a `from` in a send is an `invalid_argument`
rather than something silently ignored: the sender is always the key's agent. Values are taken
as their JSON types only (`strict`): `"yes"` is no boolean and `true` or `"7"` no number, so a
program's mistake is refused rather than read as something it did not mean (an admin key, a
rate of 1). Limits that
depend on configuration (body size, subject length) are checked by the services, in one place
for every face.
"""

from __future__ import annotations

from typing import Any, Literal

import fastapi
from pydantic import BaseModel, ConfigDict, Field

JSONValue = Any


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def may_be_left_out(model: type[Body]) -> Any:
    """For a body whose fields all have defaults: a request with no body means `{}`, as a bare
    `curl -X POST` sends, rather than a refusal that a body is required."""
    return fastapi.Body(default_factory=model)


class SendBody(Body):
    to: str | list[str] = Field(description="A name, a list of names, or '#channel'.")
    body: str
    subject: str | None = None
    data: JSONValue = None
    thread_id: str | None = None
    reply_to: str | None = None
    priority: Literal["normal", "urgent"] = "normal"
    ttl_s: float | None = None
    must_read: bool = False


class AckBody(Body):
    ids: list[str]


class ProfileBody(Body):
    description: str | None = None
    project: str | None = None
    capabilities: list[str] | None = None
    status: Literal["active", "idle", "blocked", "done"] | None = None
    objective: str | None = None


class SessionBody(Body):
    project: str | None = None
    worktree: str | None = None
    branch: str | None = None
    objective: str | None = None
    auto_lead: bool = Field(
        True,
        description="False: the session takes no free seat by itself (as one that stepped "
        "down), neither as it opens nor as its heartbeat moves it, until it claims one.",
    )


class HeartbeatBody(Body):
    branch: str | None = Field(
        None, description="The branch the session's worktree has checked out now, if it moved."
    )


class RegisterBody(Body):
    name: str
    description: str = ""
    project: str | None = None


class WebhookBody(Body):
    url: str
    events: list[str]


class CreateAgentBody(Body):
    name: str
    description: str = ""
    project: str | None = None
    capabilities: list[str] | None = None


class IssueKeyBody(Body):
    label: str = ""
    admin: bool = False


class LimitsBody(Body):
    send_rate_per_minute: int | None = None
    max_unacked: int | None = None
    max_channels_per_agent: int | None = None
    max_open_tasks_per_agent: int | None = None


class ReserveBody(Body):
    paths: list[str] = Field(description="Paths or git-style globs, relative to the project root.")
    exclusive: bool = True
    ttl_s: float = 3600
    reason: str | None = None


class RenewReservationsBody(Body):
    ids: list[str] | None = Field(None, description="Omitted: all of yours in your project.")
    ttl_s: float | None = Field(
        None, description="Omitted: each reservation's own, the ttl it was last given."
    )


class ReleaseReservationsBody(Body):
    paths: list[str] | None = None
    ids: list[str] | None = None
