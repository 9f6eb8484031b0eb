"""Events and webhooks as plain values: what each agent's event log holds and how it is told.

An event is a line in one agent's log (`seq` is its cursor, shared by the whole post office so
it only grows): `message.created` in each recipient's log when mail is delivered to them;
`message.read`, `message.acked` and `message.expired` in the sender's log when a recipient
reads, acknowledges or lets their delivery expire (`data.to` names that recipient).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from agentpost.domain.errors import invalid
from agentpost.domain.models import from_fields


class EventType(StrEnum):
    MESSAGE_CREATED = "message.created"
    MESSAGE_READ = "message.read"
    MESSAGE_ACKED = "message.acked"
    MESSAGE_EXPIRED = "message.expired"


EVENT_TYPES: tuple[str, ...] = tuple(t.value for t in EventType)

MAX_WEBHOOKS = 20
"""Live webhooks per agent."""
MAX_URL_CHARS = 2000
FIRST_RETRY_S = 1.0
MAX_RETRY_S = 3600.0
"""Backoff doubles from FIRST_RETRY_S after each failed attempt, up to this."""


@dataclass(frozen=True, slots=True)
class Event:
    seq: int
    type: str
    message_id: str | None
    at: float
    data: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "type": self.type,
            "message_id": self.message_id,
            "at": self.at,
            "data": dict(self.data),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Event:
        return from_fields(cls, data, data=dict(data.get("data") or {}))


class HookState(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Webhook:
    id: str
    url: str
    events: list[str]
    created_at: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "url": self.url,
            "events": list(self.events),
            "created_at": self.created_at,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Webhook:
        return from_fields(cls, data, events=list(data["events"]))


@dataclass(frozen=True, slots=True)
class WebhookDelivery:
    """One event on its way to one webhook: the same id on every attempt."""

    id: str
    webhook_id: str
    event: str
    event_seq: int
    state: HookState
    attempts: int
    last_status: int | None
    last_error: str | None
    created_at: float
    delivered_at: float | None
    next_attempt_at: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "webhook_id": self.webhook_id,
            "event": self.event,
            "event_seq": self.event_seq,
            "state": self.state.value,
            "attempts": self.attempts,
            "last_status": self.last_status,
            "last_error": self.last_error,
            "created_at": self.created_at,
            "delivered_at": self.delivered_at,
            "next_attempt_at": self.next_attempt_at,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WebhookDelivery:
        return from_fields(cls, data, state=HookState(data["state"]))


def check_event_types(events: Sequence[str]) -> list[str]:
    """A non-empty list of known event types, each once, in the order given."""
    if isinstance(events, str) or not isinstance(events, Sequence) or not events:
        raise invalid("events must be a non-empty list of event types", known=list(EVENT_TYPES))
    unknown = [e for e in events if not isinstance(e, str) or e not in EVENT_TYPES]
    if unknown:
        raise invalid(
            f"unknown event types: {', '.join(map(str, unknown))}",
            unknown=unknown,
            known=list(EVENT_TYPES),
        )
    return list(dict.fromkeys(events))


def retry_delay_s(attempts: int) -> float:
    """How long to wait after the `attempts`-th failed attempt: 1 s, 2 s, 4 s … capped."""
    return float(min(MAX_RETRY_S, FIRST_RETRY_S * 2 ** max(0, min(attempts - 1, 30))))
