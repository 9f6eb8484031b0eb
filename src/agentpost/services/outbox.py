"""What a send passes through besides delivery: idempotency keys, blocks, the audit row.

Kept apart from the mailbox so each rule reads on its own; every function runs inside the
send's transaction, so a refused send leaves none of them behind.

- Idempotency: a client that retries a send (a timeout, a dropped connection) names the same
  key, and gets the first answer back instead of a second message. The key is the agent's own
  and lives for a day; the same key with a different request is a `conflict`, never a quiet
  replay of something else. A task handed out or a question asked is a send too, and takes a
  key the same way (`Retry`): one agent's keys are one set, so a key that sent a message is a
  `conflict` for a task.
- Blocks: a blocked sender's mail is dropped for that recipient, and nothing tells the sender:
  its answer names the recipient as usual, and its receipt shows the mail as unread.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentpost.domain.errors import AgentpostError, ErrorCode, invalid
from agentpost.domain.limits import IDEMPOTENCY_S
from agentpost.domain.models import DeliveryState, Message, Receipt, SendResult
from agentpost.store import audit, idempotency
from agentpost.store.database import Connection, Store

MAX_IDEMPOTENCY_KEY = 200
_IDEMPOTENCY_KEY = re.compile(rf"[\x21-\x7e]{{1,{MAX_IDEMPOTENCY_KEY}}}")


def check_idempotency_key(key: str | None) -> str | None:
    """Visible ASCII (it arrives as an HTTP header), 1 to 200 characters."""
    if key is None:
        return None
    if not isinstance(key, str) or not _IDEMPOTENCY_KEY.fullmatch(key):
        raise invalid(
            f"idempotency_key must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters"
        )
    return key


def request_hash(request: dict[str, Any]) -> str:
    """A fingerprint of everything a send was asked to do (after its checks). `data` counts
    by its value: a retry that serialised the same object with its keys in another order, or
    a whole number as `7.0` where the first try wrote `7` (client libraries of other
    languages, say), asks the same."""
    data = request.get("data")
    return _hash(request if data is None else {**request, "data": by_value(data)})


def by_value(data_json: str | None) -> Any:
    """`data` (as encoded) as a retry's fingerprint counts it: by value, not by its spelling
    (see `request_hash`)."""
    return None if data_json is None else json.loads(data_json, parse_float=_number)


def _number(text: str) -> float | int:
    """A JSON number by its value: a whole one as an integer, as JavaScript writes it."""
    value = float(text)
    return int(value) if value.is_integer() and abs(value) <= _EXACT else value


_EXACT = 2.0**53  # whole numbers a float holds exactly


def _hash(request: dict[str, Any]) -> str:
    text = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def replay(
    conn: Connection, agent: str, key: str, request: dict[str, Any], now: float
) -> SendResult | None:
    """The first answer under `key`, if there is one; `conflict` if it answered another request.

    A key remembered before `data` counted by value holds the hash of `data` as sent: a retry
    sent alike matches that too, for the day such a key lives (a rolling upgrade's retries)."""
    first = _first(conn, agent, key, (request_hash(request), _hash(request)), now)
    if first is None:
        return None
    return SendResult(
        id=first["id"],
        thread_id=first["thread_id"],
        to=first["to"],
        channel=first["channel"],
        skipped_full=first["skipped_full"],
    )


def remember(
    conn: Connection, store: Store, agent: str, key: str, fingerprint: str, result: SendResult
) -> None:
    answer = {
        "id": result.id,
        "thread_id": result.thread_id,
        "to": result.to,
        "channel": result.channel,
        "skipped_full": result.skipped_full,
    }
    remember_answer(conn, store, agent, key, fingerprint, answer)


@dataclass(frozen=True, slots=True)
class Retry:
    """An operation other than a plain send (a task handed out, a question asked) under an
    idempotency key: what it answered the first time, and the keeping of that. Its name
    counts in the fingerprint, so one key cannot answer for two kinds of request."""

    key: str
    fingerprint: str

    @classmethod
    def of(
        cls, key: str | None, operation: str, request: Callable[[], dict[str, Any]]
    ) -> Retry | None:
        """None without a key; `request` (what was asked, after its checks) is built only
        with one."""
        checked = check_idempotency_key(key)
        if checked is None:
            return None
        return cls(checked, _hash({"operation": operation, **request()}))

    def first(self, conn: Connection, agent: str, now: float) -> dict[str, Any] | None:
        """What `remember` kept for this request; `conflict` if another request used the key."""
        return _first(conn, agent, self.key, (self.fingerprint,), now)

    def remember(self, conn: Connection, store: Store, agent: str, answer: dict[str, Any]) -> None:
        remember_answer(conn, store, agent, self.key, self.fingerprint, answer)


def remember_answer(
    conn: Connection, store: Store, agent: str, key: str, fingerprint: str, answer: dict[str, Any]
) -> None:
    idempotency.save(
        conn,
        store.dialect,
        agent=agent,
        key=key,
        request_hash=fingerprint,
        response=json.dumps(answer),
        now=store.clock(),
    )


def _first(
    conn: Connection, agent: str, key: str, fingerprints: Sequence[str], now: float
) -> dict[str, Any] | None:
    row = idempotency.find(conn, agent, key, newer_than=now - IDEMPOTENCY_S)
    if row is None:
        return None
    if row.request_hash not in fingerprints:
        raise AgentpostError(
            ErrorCode.CONFLICT,
            "this idempotency key was used for a different request in the last 24 hours",
            details={"idempotency_key": key},
        )
    answer: dict[str, Any] = json.loads(row.response)
    return answer


def record_send(
    conn: Connection,
    *,
    now: float,
    sender: str,
    result: SendResult,
    dropped: list[str],
    request: dict[str, Any],
    bodies: bool,
    ip: str | None = None,
) -> None:
    """The audit row of a send: who, to whom, how big; what was said only with `bodies`."""
    detail: dict[str, Any] = {
        "to": result.to,
        "channel": None if result.channel is None else f"#{result.channel}",
        "kind": request["kind"],
        "priority": request["priority"],
        "thread_id": result.thread_id,
        "body_bytes": len(request["body"].encode("utf-8")),
        "data_bytes": 0 if request["data"] is None else len(request["data"].encode("utf-8")),
    }
    if dropped:
        detail["dropped"] = dropped  # the owner may know what the sender is not told
    if bodies:
        data = None if request["data"] is None else json.loads(request["data"])
        detail.update(subject=request["subject"], body=request["body"], data=data)
    audit.record(
        conn, at=now, actor=sender, action="message.sent", target=result.id, ip=ip, detail=detail
    )


def with_silent_receipts(
    message: Message, receipts: list[Receipt], withheld: Sequence[str], now: float
) -> list[Receipt]:
    """A message's receipts, with an unread one for each recipient that blocked the sender
    (it expires with the message's TTL, as unread mail does): the sender cannot tell a block
    from a recipient who never reads. A direct message names its recipients; a broadcast's
    blockers are `withheld` (see `store.withheld`)."""
    have = {r.to for r in receipts}
    named = withheld if message.channel is not None else message.to
    missing = [name for name in named if name not in have]
    if not missing:
        return receipts
    expired = not message.must_read and message.expires_at is not None and message.expires_at <= now
    state = DeliveryState.EXPIRED if expired else DeliveryState.QUEUED
    quiet = [
        Receipt(name, state, None, None, message.expires_at if expired else None)
        for name in missing
    ]
    return sorted([*receipts, *quiet], key=lambda r: r.to)
