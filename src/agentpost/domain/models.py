"""The post office's records as plain values, the shapes every face returns as JSON.

Each record also reads itself back from that JSON (`from_dict`), so the Python client hands its
callers the same types the services return.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any, TypeVar

from agentpost.domain.errors import invalid

R = TypeVar("R")


def from_fields(cls: type[R], source: Mapping[str, Any], /, **converted: Any) -> R:
    """A record of `cls` from its JSON shape: each field's value by name, `converted` ones
    replacing theirs. Keys the record does not know (a newer server's) are ignored, and a field
    with a default may be missing, so an older client still reads a newer answer."""
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    values = {k: v for k, v in source.items() if k in known}
    values.update(converted)
    return cls(**values)


def _channel_name(value: str | None) -> str | None:
    """`#name` as JSON shows it, `name` as the records keep it."""
    return value.removeprefix("#") if value else None


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


def check_priority(value: str) -> Priority:
    try:
        return Priority(value)
    except ValueError:
        raise invalid("priority must be 'normal' or 'urgent'", priority=value) from None


class Trust(StrEnum):
    VERIFIED = "verified"
    EXTERNAL = "external"
    UNTRUSTED = "untrusted"


def trust_read(data: Mapping[str, Any], key: str = "trust") -> Trust:
    """The trust an answer gives, as a client may take it. One it does not give (an older
    service's) or this client does not know (a newer one's) vouches for nobody: it reads as
    `untrusted`, so the words it goes with are framed as a stranger's, not a colleague's;
    and the answer is read all the same, not refused for it."""
    try:
        return Trust(data[key])
    except (KeyError, ValueError):
        return Trust.UNTRUSTED


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


def check_session_status(value: str) -> Status:
    try:
        return Status(value)
    except ValueError:
        raise invalid(
            f"status must be one of {', '.join(s.value for s in Status)}", status=value
        ) from None


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is asking: stamped on everything they send, checked on everything they read."""

    agent: str
    session_id: str | None = None
    trust: Trust = Trust.VERIFIED
    admin: bool = False
    """An admin key's holder (the owner): may administer, and may act as `owner`."""
    key_id: str | None = None
    """The key the request was authenticated with; None for a local session."""
    ip: str | None = None
    """The client address the request came from (service only): the audit keeps it."""


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

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        state = data.get("state")
        return cls(
            id=data["id"],
            sender=data["from"],
            to=list(data["to"]),
            channel=_channel_name(data.get("channel")),
            kind=Kind(data["kind"]),
            subject=data["subject"],
            body=data["body"],
            data=data.get("data"),
            thread_id=data["thread_id"],
            reply_to=data.get("reply_to"),
            priority=Priority(data["priority"]),
            must_read=bool(data["must_read"]),
            created_at=data["created_at"],
            expires_at=data.get("expires_at"),
            trust=trust_read(data),
            state=None if state is None else DeliveryState(state),
        )


@dataclass(frozen=True, slots=True)
class Receipt:
    to: str
    state: DeliveryState
    read_at: float | None
    acked_at: float | None
    expired_at: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Receipt:
        return from_fields(cls, data, state=DeliveryState(data["state"]))


@dataclass(frozen=True, slots=True)
class SentMessage:
    message: Message
    receipts: list[Receipt]

    def to_dict(self) -> dict[str, Any]:
        out = self.message.to_dict()
        out.pop("state")
        out["receipts"] = [r.to_dict() for r in self.receipts]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SentMessage:
        return cls(
            Message.from_dict({**data, "state": None}),
            [Receipt.from_dict(r) for r in data.get("receipts", [])],
        )


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

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SendResult:
        return cls(
            id=data["id"],
            thread_id=data["thread_id"],
            to=list(data["to"]),
            channel=_channel_name(data.get("channel")),
            skipped_full=list(data.get("skipped_full", [])),
        )


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
    """One agent as `who` shows it: of its live sessions, the one that last said what it is
    doing (opened, or set its status or objective) speaks for the agent; with none live, the
    one seen last. `sessions` counts the live ones."""

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
    trust: Trust = Trust.VERIFIED
    """The agent's: whether its objective is a colleague's words or a stranger's."""

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["trust"] = self.trust.value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Presence:
        return from_fields(cls, data, status=Status(data["status"]), trust=trust_read(data))


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

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChannelInfo:
        return from_fields(cls, data, name=_channel_name(data["name"]))


@dataclass(frozen=True, slots=True)
class AckResult:
    acked: list[str]
    not_found: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AckResult:
        return cls(list(data["acked"]), list(data["not_found"]))


@dataclass(frozen=True, slots=True)
class Inbox:
    """A page of the caller's mail, and how much of it is unread (`wait` may time out)."""

    messages: list[Message]
    unread: int
    timed_out: bool = False

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Inbox:
        return cls(
            [Message.from_dict(m) for m in data["messages"]],
            int(data["unread"]),
            bool(data.get("timed_out", False)),
        )


@dataclass(frozen=True, slots=True)
class Notices:
    """What rides along on every answer: the unread count and urgent mail not yet announced."""

    unread: int
    urgent: list[Message]
