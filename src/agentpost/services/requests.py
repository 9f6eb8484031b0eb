"""Blocking questions: `request` sends a message of kind `request` and waits for its one
response; `respond` gives it; `check_request` fetches an answer that came after the asker stopped
waiting.

The wait is woken by the store when mail reaches the asker, as `Mailbox.wait` is: nothing
polls. The response is a message to the asker like any other (it is in their inbox and the
request's thread); the call that hands the answer over marks it read.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import anyio

from agentpost.config import Settings
from agentpost.domain import limits as rules
from agentpost.domain.errors import forbidden, invalid, not_found
from agentpost.domain.models import Caller, DeliveryState, Kind, SendResult
from agentpost.domain.names import check_name
from agentpost.domain.requests import RequestAnswer
from agentpost.services import outbox
from agentpost.services.heartbeats import Heartbeat, check_standing
from agentpost.services.mailbox import Mailbox
from agentpost.services.waiting import held_watch
from agentpost.store import mail
from agentpost.store import requests as request_rows
from agentpost.store.database import Connection, Row, Store
from agentpost.store.wakeups import Watch


def _request_row(conn: Connection, request_id: str, caller: Caller) -> Row[Any]:
    """The request; one the caller neither asked nor was asked does not exist for them, the
    same answer as for an id no request has (ids made in one millisecond follow one another,
    so a neighbour of one's own is a guess that lands)."""
    row = mail.message_row(conn, request_id) if isinstance(request_id, str) else None
    if (
        row is None
        or row.kind != Kind.REQUEST.value
        or caller.agent not in (row.sender, *json.loads(row.recipients))
    ):
        raise not_found(
            f"no request {rules.quoted(request_id)!r}", request_id=rules.quoted(request_id)
        )
    return row


def _words(text: str, what: str, settings: Settings) -> None:
    """A question or an answer, checked as the body it becomes, a refusal naming it."""
    if not isinstance(text, str) or not text.strip():
        raise invalid(f"{what} must be non-empty text")
    rules.check_body(text, settings.limits, what=what)


class Requests:
    def __init__(self, store: Store, settings: Settings, mailbox: Mailbox) -> None:
        self.store = store
        self.settings = settings
        self.mailbox = mailbox

    async def request(
        self,
        caller: Caller,
        to: str,
        question: str,
        data: Any = None,
        timeout_s: float = 60,
        idempotency_key: str | None = None,
    ) -> RequestAnswer:
        """Ask one agent and wait (at most `max_wait_s`) for the answer; `timed_out` if none
        came in time, never an error: `check_request` fetches a later answer.

        A retry under the same `idempotency_key` (a dropped connection while waiting) asks
        nothing again: it waits for, or hands over, the first question's answer."""
        timeout = rules.check_timeout(timeout_s, self.settings.limits)
        _words(question, "question", self.settings)
        if isinstance(to, str) and to.startswith("#"):
            raise invalid("a request goes to one agent, not to a channel")
        addressee = check_name(to, "recipient")

        def asked() -> dict[str, Any]:
            data_json = rules.encode_data(data, self.settings.limits)
            return {
                "to": addressee,
                "question": question,
                "data": outbox.by_value(data_json),
            }

        retry = outbox.Retry.of(idempotency_key, "request", asked)

        def tx(conn: Connection) -> str:
            first = None if retry is None else retry.first(conn, caller.agent, self.store.clock())
            if first is not None:
                return str(first["request_id"])
            sent = self.mailbox.send_in(
                conn, caller, addressee, question, data=data, kind=Kind.REQUEST
            )
            if retry is not None:
                retry.remember(conn, self.store, caller.agent, {"request_id": sent.id})
            return sent.id

        # Room to wait is taken before asking: a question refused for want of it, and asked
        # anyway, would be asked again by every retry the refusal invites.
        with held_watch(self.store, caller, self.settings.max_open_waits) as news:
            request_id = await self.store.write(tx)
            return await self._await_answer(caller, request_id, timeout, news)

    async def respond(
        self, caller: Caller, request_id: str, answer: str, data: Any = None
    ) -> SendResult:
        """Answer a request addressed to you, once: the response is a message to the asker
        in the request's thread (`reply_to` = the request)."""
        rules.check_id(request_id, "request_id", "request")
        _words(answer, "answer", self.settings)

        def tx(conn: Connection) -> SendResult:
            row = _request_row(conn, request_id, caller)
            if caller.agent not in json.loads(row.recipients):
                raise forbidden("only the agent a request was sent to may answer it")
            if request_rows.response_row(conn, row.id) is not None:
                raise request_rows.already_answered(row.id)
            with request_rows.answered_once(row.id):
                return self.mailbox.send_in(
                    conn,
                    caller,
                    row.sender,
                    answer,
                    data=data,
                    reply_to=row.id,
                    kind=Kind.RESPONSE,
                    awaited=True,  # the asker may be blocked waiting on it: a full inbox or not
                )

        return await self.store.write(tx)

    async def check_request(self, caller: Caller, request_id: str) -> RequestAnswer:
        """Where your request stands: its answer, if one came."""
        rules.check_id(request_id, "request_id", "request")

        def tx(conn: Connection) -> RequestAnswer:
            row = _request_row(conn, request_id, caller)
            if row.sender != caller.agent:
                raise forbidden("only the agent who asked may check a request")
            return self._answer(conn, caller, row.id)

        return await self.store.write(tx)

    # -- waiting ------------------------------------------------------------------------------

    async def _await_answer(
        self, caller: Caller, request_id: str, timeout: float, news: Watch
    ) -> RequestAnswer:
        """The answer, or `timed_out`; `news` is the asker's watch: the response is mail to the
        asker, and its delivery wakes the watch, made before looking."""
        # A monotonic deadline, as `Mailbox.wait` keeps: the store's clock may be injected.
        deadline = anyio.current_time() + timeout
        heartbeat = Heartbeat(self.store, caller, self.settings.heartbeat_s)
        while True:
            await heartbeat.beat()
            found = await self.store.glance(
                lambda c: request_rows.response_row(c, request_id, caller.agent)
            )
            if found is not None:
                await check_standing(self.store, caller)
                answered = partial(self._answer, caller=caller, request_id=request_id)
                return await self.store.write(answered)
            remaining = deadline - anyio.current_time()
            if remaining <= 0 or news.closing:
                return RequestAnswer(request_id, answered=False, timed_out=True)
            await news.wait(heartbeat.timeout(remaining))

    def _answer(self, conn: Connection, caller: Caller, request_id: str) -> RequestAnswer:
        """The answer as the asker gets it; the response, now handed over, is marked read
        (unless it expired unread, as the inbox would have it)."""
        now = self.store.clock()
        self.mailbox.expire_due_in(conn, now, caller.agent)
        found = request_rows.response_row(conn, request_id, caller.agent)
        if found is None:
            return RequestAnswer(request_id, answered=False)
        state = found.delivery_state
        if state == DeliveryState.QUEUED.value:
            mail.mark_read(conn, caller.agent, [found.seq], now)
            state = DeliveryState.READ.value
        return RequestAnswer(
            request_id, answered=True, response=mail.message_from_row(found, state)
        )
