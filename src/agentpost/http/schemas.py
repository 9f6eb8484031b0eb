"""Request bodies of the REST API, as pydantic models: they are the OpenAPI's input schemas.

Unknown fields are refused (`extra="forbid"`), so a `from` in a send is an `invalid_argument`
rather than something silently ignored: the sender is always the key's agent. Limits that
depend on configuration (body size, subject length) are checked by the services, in one place
for every face.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

JSONValue = Any


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SendBody(_Body):
    to: str | list[str] = Field(description="A name, a list of names, or '#channel'.")
    body: str
    subject: str | None = None
    data: JSONValue = None
    thread_id: str | None = None
    reply_to: str | None = None
    priority: Literal["normal", "urgent"] = "normal"
    ttl_s: float | None = None
    must_read: bool = False


class AckBody(_Body):
    ids: list[str]


class ProfileBody(_Body):
    description: str | None = None
    project: str | None = None
    capabilities: list[str] | None = None
    status: Literal["active", "idle", "blocked", "done"] | None = None
    objective: str | None = None


class SessionBody(_Body):
    project: str | None = None
    worktree: str | None = None
    branch: str | None = None
    objective: str | None = None


class RegisterBody(_Body):
    name: str
    description: str = ""
    project: str | None = None


class WebhookBody(_Body):
    url: str
    events: list[str]


class CreateAgentBody(_Body):
    name: str
    description: str = ""
    project: str | None = None
    capabilities: list[str] | None = None


class IssueKeyBody(_Body):
    label: str = ""
    admin: bool = False


class LimitsBody(_Body):
    send_rate_per_minute: int | None = None
    max_unacked: int | None = None


class ReserveBody(_Body):
    paths: list[str] = Field(description="Paths or git-style globs, relative to the project root.")
    exclusive: bool = True
    ttl_s: float = 3600
    reason: str | None = None


class RenewReservationsBody(_Body):
    ids: list[str] | None = Field(None, description="Omitted: all of yours in your project.")
    ttl_s: float = 3600


class ReleaseReservationsBody(_Body):
    paths: list[str] | None = None
    ids: list[str] | None = None
