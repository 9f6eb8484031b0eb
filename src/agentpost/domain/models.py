"""The post office's records as plain values, the shapes every face returns as JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class Kind(StrEnum):
    MESSAGE = "message"
    REQUEST = "request"
    RESPONSE = "response"
    TASK = "task"
    SYSTEM = "system"
    EMAIL = "email"


class Priority(StrEnum):
    NORMAL = "normal"
    URGENT = "urgent"


class Trust(StrEnum):
    VERIFIED = "verified"
    EXTERNAL = "external"
    UNTRUSTED = "untrusted"


class DeliveryState(StrEnum):
    QUEUED = "queued"
    READ = "read"
    ACKED = "acked"
    EXPIRED = "expired"


class Status(StrEnum):
    ACTIVE = "active"
    IDLE = "idle"
    BLOCKED = "blocked"
    DONE = "done"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is asking: stamped on everything they send, checked on everything they read."""

    agent: str
    session_id: str | None = None
    trust: Trust = Trust.VERIFIED


@dataclass(frozen=True, slots=True)
class Message:
    id: str
    sender: str
    to: list[str]
    channel: str | None
    kind: Kind
    subject: str
    body: str
    data: Any
    thread_id: str
    reply_to: str | None
    priority: Priority
    must_read: bool
    created_at: float
    expires_at: float | None
    trust: Trust
    state: DeliveryState | None = None
    """The reader's delivery state; None when the reader is no recipient (sender, channel)."""
    seq: int = 0

    def to_dict(self) -> dict[str, Any]:
        # By hand: `asdict` deep-copies every field, and an inbox page renders hundreds.
        return {
            "id": self.id,
            "from": self.sender,
            "to": list(self.to),
            "channel": f"#{self.channel}" if self.channel else None,
            "kind": self.kind.value,
            "subject": self.subject,
            "body": self.body,
            "data": self.data,
            "thread_id": self.thread_id,
            "reply_to": self.reply_to,
            "priority": self.priority.value,
            "must_read": self.must_read,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "trust": self.trust.value,
            "state": None if self.state is None else self.state.value,
        }


@dataclass(frozen=True, slots=True)
class Receipt:
    to: str
    state: DeliveryState
    read_at: float | None
    acked_at: float | None
    expired_at: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class SentMessage:
    message: Message
    receipts: list[Receipt]

    def to_dict(self) -> dict[str, Any]:
        out = self.message.to_dict()
        out.pop("state")
        out["receipts"] = [r.to_dict() for r in self.receipts]
        return out


@dataclass(frozen=True, slots=True)
class SendResult:
    id: str
    thread_id: str
    to: list[str]
    channel: str | None = None
    skipped_full: list[str] = field(default_factory=list)
    """Channel members whose inbox was full and who did not get this broadcast."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "thread_id": self.thread_id, "to": self.to}
        if self.channel:
            out["channel"] = f"#{self.channel}"
        if self.skipped_full:
            out["skipped_full"] = self.skipped_full
        return out


@dataclass(frozen=True, slots=True)
class SessionInfo:
    id: str
    agent: str
    transport: str
    host: str
    pid: int | None
    project: str | None
    worktree: str | None
    branch: str | None
    objective: str
    status: Status
    started_at: float
    heartbeat_at: float
    ended_at: float | None


@dataclass(frozen=True, slots=True)
class Presence:
    """One agent as `who` shows it: the freshest session speaks for the agent."""

    name: str
    description: str
    project: str | None
    branch: str | None
    worktree: str | None
    objective: str
    status: Status
    online: bool
    last_seen_s: float | None
    sessions: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ChannelInfo:
    name: str
    members: int
    joined: bool
    implicit: bool

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["name"] = f"#{self.name}"
        return out


@dataclass(frozen=True, slots=True)
class AckResult:
    acked: list[str]
    not_found: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
