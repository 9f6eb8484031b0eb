"""A message on its way: the send's arguments checked (`draft`), and the message stored
(`store_message`).

Split from the mailbox so that every way a message is made (an agent's send, a send inside
another use case's transaction, the post office's own notice) checks and stores it the same way.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentpost.config import Settings
from agentpost.domain import limits as rules
from agentpost.domain.errors import invalid
from agentpost.domain.ids import message_id as new_message_id
from agentpost.domain.models import Caller, Kind, Priority, SendResult, check_priority
from agentpost.domain.names import check_channel, check_name
from agentpost.services import outbox
from agentpost.store import expiry, mail, withheld
from agentpost.store.database import Connection

MAX_THREAD_ID = 64


def targets(to: str | Sequence[str]) -> tuple[list[str], str | None]:
    """(names, None) for direct mail, ([], channel) for a broadcast."""
    if isinstance(to, str):
        if to.startswith("#"):
            return [], check_channel(to)
        return [check_name(to, "recipient")], None
    if not isinstance(to, Sequence) or not to:
        raise invalid("to must be a name, a list of names or '#channel'")
    if len(to) == 1 and isinstance(to[0], str) and to[0].startswith("#"):
        return [], check_channel(to[0])  # a list of one channel names it as well as its name
    names = []
    for name in to:
        if not isinstance(name, str):
            raise invalid("to must be a name, a list of names or '#channel'")
        if name.startswith("#"):
            raise invalid("a channel is sent to alone: to='#channel'")
        names.append(check_name(name, "recipient"))
    names = list(dict.fromkeys(names))
    if len(names) > rules.MAX_RECIPIENTS:
        raise invalid(f"at most {rules.MAX_RECIPIENTS} recipients per message")
    return names, None


def check_thread_id(value: str | None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_THREAD_ID:
        raise invalid(f"thread_id must be a non-empty string of at most {MAX_THREAD_ID} chars")
    return rules.check_text(value, "thread_id")


@dataclass(frozen=True, slots=True)
class Draft:
    """A send's arguments, checked: what is stored, and `request`, what the audit row and the
    idempotency fingerprint see."""

    names: list[str]
    channel: str | None
    thread: str | None
    level: Priority
    ttl: float | None
    request: dict[str, Any]

    @property
    def lifetime(self) -> float | None:
        """How long it may wait unread before it expires: must_read mail never does, so it
        carries no expiry to mislead a reader."""
        return None if self.request["must_read"] or not self.ttl else self.ttl

    @property
    def reply_to(self) -> str | None:
        reply_to: str | None = self.request["reply_to"]
        return reply_to


def draft(
    settings: Settings,
    to: str | Sequence[str],
    body: str,
    *,
    subject: str | None = None,
    data: Any = None,
    thread_id: str | None = None,
    reply_to: str | None = None,
    priority: str = "normal",
    ttl_s: float | None = None,
    must_read: bool = False,
    kind: Kind = Kind.MESSAGE,
    envelope: bool = False,
) -> Draft:
    """The arguments checked, before any transaction: bad input changes nothing. An
    `envelope`'s body and data wrap values its caller checked (see `rules.encode_data`)."""
    limits = settings.limits
    if not isinstance(body, str) or not body.strip():
        raise invalid("body must be non-empty text")
    rules.check_body(body, limits, envelope=envelope)
    subject = rules.check_subject(subject or "", limits)
    data_json = rules.encode_data(data, limits, envelope=envelope)
    level = check_priority(priority)
    asked_ttl = rules.check_ttl(ttl_s)
    names, channel = targets(to)
    thread = check_thread_id(thread_id)
    if reply_to is not None:
        rules.check_id(reply_to, "reply_to")
    request = {
        "to": names,
        "channel": channel,
        "body": body,
        "subject": subject,
        "data": data_json,
        "thread_id": thread,
        "reply_to": reply_to,
        "priority": level.value,
        "ttl_s": asked_ttl,
        "must_read": must_read,
        "kind": kind.value,
    }
    ttl = settings.default_ttl_s if asked_ttl is None else asked_ttl
    return Draft(names, channel, thread, level, ttl, request)


@dataclass(frozen=True, slots=True)
class Addressing:
    """Who a message is shown as addressed to, who gets it, and who is left out and why."""

    display: list[str]
    """`to` as stored: the names, or `#channel`."""
    to: list[str]
    """The recipients the sender is told of (those who blocked it included, silently)."""
    deliver: list[str]
    full: list[str]
    """Channel members whose inbox was full."""
    dropped: list[str]
    """Recipients who blocked the sender: only the audit row knows."""


def store_message(
    conn: Connection,
    settings: Settings,
    sender: Caller,
    message: Draft,
    now: float,
    addressing: Addressing,
    thread_of: str | None,
) -> SendResult:
    """Insert the message, deliver it, and write the send's audit row."""
    request = message.request
    mid = new_message_id(now)
    lifetime = message.lifetime
    expires_at = None if lifetime is None else now + lifetime
    seq = mail.insert_message(
        conn,
        id=mid,
        sender=sender.agent,
        recipients=json.dumps(addressing.display),
        channel=message.channel,
        kind=request["kind"],
        subject=request["subject"],
        body=request["body"],
        data=request["data"],
        thread_id=thread_of or mid,
        reply_to=request["reply_to"],
        priority=message.level.value,
        must_read=request["must_read"],
        created_at=now,
        expires_at=expires_at,
        trust=sender.trust.value,
    )
    if addressing.deliver:
        mail.insert_deliveries(
            conn,
            seq,
            addressing.deliver,
            urgent=message.level is Priority.URGENT,
            expires_at=expires_at,
        )
    if addressing.dropped:
        # As the receipts tell it (outbox.with_silent_receipts): unread, then expired.
        withheld.record(conn, seq, addressing.dropped)
        if expires_at is not None:
            expiry.withhold(conn, seq, addressing.dropped, expires_at)
    result = SendResult(mid, thread_of or mid, addressing.to, message.channel, addressing.full)
    outbox.record_send(
        conn,
        now=now,
        sender=sender.agent,
        result=result,
        dropped=addressing.dropped,
        request=request,
        bodies=settings.audit_bodies,
        ip=sender.ip,
    )
    return result
