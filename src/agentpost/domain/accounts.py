"""Agents as accounts of the service: profiles, keys, the audit log, limits and usage.

Plain values the admin and directory services return and every face renders; the rules on
profile fields and on the shape of a key live here too, so each face refuses the same input.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Self, TypeGuard

from agentpost.domain.errors import invalid
from agentpost.domain.limits import check_text, is_one_line, quoted, too_large
from agentpost.domain.models import Trust, from_fields, trust_read

KEY_PREFIX = "ap_"
KEY_BYTES = 32

MAX_DESCRIPTION = 2000
MAX_LABEL = 200
MAX_CAPABILITIES = 50
MAX_CAPABILITY = 64
MAX_LIMIT_VALUE = 1_000_000
"""The largest per-agent limit the owner may set: a bound, not a policy."""

# A key travels in an HTTP header: visible ASCII only, long enough not to be guessed (the
# owner may choose the admin key), and not so long that hashing a garbage header costs
# anything. Issued keys are `ap_` + 43 URL-safe characters.
SECRET_MIN = 16
SECRET_MAX = 512
_SECRET = re.compile(rf"[\x21-\x7e]{{{SECRET_MIN},{SECRET_MAX}}}")


def new_secret() -> str:
    """A fresh agent key: `ap_` + 32 random bytes, URL-safe (shown once, stored as a hash)."""
    return KEY_PREFIX + secrets.token_urlsafe(KEY_BYTES)


def is_well_formed_secret(secret: object) -> TypeGuard[str]:
    """Whether `secret` could be a key at all; anything else is refused before a lookup."""
    return isinstance(secret, str) and _SECRET.fullmatch(secret) is not None


def check_description(value: str) -> str:
    if not isinstance(value, str):
        raise invalid("description must be text")
    if len(value) > MAX_DESCRIPTION:
        raise too_large("description", len(value), MAX_DESCRIPTION, "characters")
    return check_text(value, "description")


def check_label(value: str) -> str:
    if not isinstance(value, str) or not is_one_line(value):
        raise invalid(f"label must be one line of at most {MAX_LABEL} characters")
    if len(value) > MAX_LABEL:
        raise too_large("label", len(value), MAX_LABEL, "characters")
    return check_text(value, "label")


def check_capabilities(values: object) -> list[str]:
    """A short list of short tags (`python`, `review`): trimmed, each kept once, in order."""
    if isinstance(values, str) or not isinstance(values, list | tuple):
        raise invalid("capabilities must be a list of strings")
    if len(values) > MAX_CAPABILITIES:
        raise invalid(f"at most {MAX_CAPABILITIES} capabilities")
    out: list[str] = []
    for value in values:
        tag = value.strip() if isinstance(value, str) else ""
        if len(tag) > MAX_CAPABILITY:
            raise invalid(
                f"a capability is at most {MAX_CAPABILITY} characters: "
                f"{quoted(tag)!r} has {len(tag)}",
                capability=quoted(tag),
                limit=MAX_CAPABILITY,
            )
        if not tag or "\t" in tag or not is_one_line(tag):
            raise invalid(
                f"each capability must be one line of 1 to {MAX_CAPABILITY} characters",
                capability=quoted(value),
            )
        check_text(tag, "capability")
        if tag not in out:
            out.append(tag)
    return out


def check_limit_value(value: int | None, what: str) -> int | None:
    """A per-agent limit: None (the setting's default) or a whole number from 1 up."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT_VALUE:
        raise invalid(f"{what} must be a whole number from 1 to {MAX_LIMIT_VALUE}, or null")
    return value


@dataclass(frozen=True, slots=True)
class AgentInfo:
    """An agent as the directory and the owner see it (never its keys)."""

    name: str
    description: str
    project: str | None
    capabilities: list[str]
    trust: Trust
    created_at: float
    disabled: bool
    online: bool
    last_seen_s: float | None = None
    """Seconds since the freshest heartbeat of any session; None when it never had one."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        return from_fields(
            cls, data, capabilities=list(data["capabilities"]), trust=trust_read(data)
        )


@dataclass(frozen=True, slots=True)
class Myself(AgentInfo):
    """Your own agent as a request sees it: the profile, and the session the request speaks
    for (the key's own unless it named another; None when it speaks for none)."""

    session_id: str | None = None

    @classmethod
    def of(cls, info: AgentInfo, session_id: str | None) -> Myself:
        return cls(**{f.name: getattr(info, f.name) for f in fields(info)}, session_id=session_id)


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """A key without its secret: what listings show and revocation answers."""

    id: str
    agent: str
    label: str
    admin: bool
    created_at: float
    revoked_at: float | None
    last_used_at: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KeyInfo:
        return from_fields(cls, data)


@dataclass(frozen=True, slots=True)
class IssuedKey:
    """A new key with its secret: returned once, at issue; the store keeps only a hash."""

    id: str
    agent: str
    key: str
    admin: bool
    created_at: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> IssuedKey:
        return from_fields(cls, data)


@dataclass(frozen=True, slots=True)
class AuditEntry:
    seq: int
    at: float
    actor: str
    """The agent that acted, or `-` for a caller not (yet) authenticated."""
    action: str
    target: str | None
    ip: str | None
    detail: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AuditEntry:
        return from_fields(cls, data, detail=dict(data.get("detail") or {}))


@dataclass(frozen=True, slots=True)
class AgentLimits:
    """The limits that hold for one agent: its own where the owner set them, else the defaults."""

    agent: str
    send_rate_per_minute: int
    max_unacked: int
    max_channels_per_agent: int | None = None
    """None only from an older service, which caps no channels."""
    max_open_tasks_per_agent: int | None = None
    """None only from an older service, which caps no tasks."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AgentLimits:
        return from_fields(cls, data)


@dataclass(frozen=True, slots=True)
class Usage:
    agent: str
    sent_total: int
    sent_last_day: int
    received_total: int
    unread: int
    unacked: int
    send_rate_per_minute: int
    max_unacked: int
    max_channels_per_agent: int | None = None
    """None only from an older service, which caps no channels."""
    max_open_tasks_per_agent: int | None = None
    """None only from an older service, which caps no tasks."""
    own_limits: list[str] | None = field(default_factory=list)
    """Which of the limits above the owner set for this agent, by name; the others follow the
    settings (so a change of a setting reaches them). None from an older service, which does
    not say: a tool that keeps an agent's limits must then keep their values."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Usage:
        own = data.get("own_limits")
        return from_fields(cls, data, own_limits=None if own is None else list(own))
