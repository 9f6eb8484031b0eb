"""`AsyncClient`: the REST API of an agentpost service as coroutine methods.

One method per REST operation, named by its OpenAPI operation id (inherited from
`MailOperations` and `AdminOperations`), plus `events()`, the server-sent event stream as an
async iterator that reconnects by itself and resumes after the last event it yielded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator, Callable
from types import TracebackType
from typing import TypeVar

import anyio
import httpx

from agentpost.client.admin import AdminOperations
from agentpost.client.leadership import LeadershipOperations
from agentpost.client.mail import MailOperations
from agentpost.client.operation import AsyncBase, Request
from agentpost.client.reservations import ReservationOperations
from agentpost.client.tasks import TaskOperations
from agentpost.client.wire import (
    DEFAULT_TIMEOUT_S,
    MAX_RECONNECT_S,
    NETWORK_RETRIES,
    RECONNECT_S,
    STREAM_TIMEOUT,
    EventReader,
    Resends,
    Target,
    check_network_retries,
    check_stream,
    check_timeout,
    closed,
    events_headers,
    outgoing,
    read_answer,
    refusal,
    retry_stream,
)
from agentpost.domain.errors import AgentpostError
from agentpost.domain.events import Event

T = TypeVar("T")


class AsyncClient(
    AsyncBase,
    MailOperations,
    LeadershipOperations,
    TaskOperations,
    ReservationOperations,
    AdminOperations,
):
    """An agent (or the owner) speaking to a remote post office with its key.

    `url` and `key` default to the settings (`AGENTPOST_URL`, `AGENTPOST_KEY`); `session` names
    a session minted by `open_session` to speak for it (else the key's own session). Every
    refusal raises `AgentpostError` with the service's stable code; a service that cannot be
    reached is `unavailable`. Use it as an async context manager, or call `aclose()`.

    A request the network failed is sent again (`network_retries` times, after 0.25 s, then
    1 s) where that cannot do twice what it asks: one that never reached the service, a read
    (but for `inbox` and `wait`, whose lost answer held mail they marked read), or a send,
    task or question, which carry an `Idempotency-Key` (yours, else the client's own), so
    the service makes each once and the retry answers as the first would have.
    """

    def __init__(
        self,
        url: str | None = None,
        key: str | None = None,
        *,
        session: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        network_retries: int = NETWORK_RETRIES,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._target = Target.resolve(url, key, session)
        self.timeout = check_timeout(timeout)
        self.network_retries = check_network_retries(network_retries)
        self._http = httpx.AsyncClient(
            base_url=self._target.url, timeout=timeout, transport=transport
        )

    @property
    def url(self) -> str:
        return self._target.url

    @property
    def session(self) -> str | None:
        """The session this client speaks for (`Agentpost-Session`); None: the key's own."""
        return self._target.session

    @session.setter
    def session(self, session_id: str | None) -> None:
        self._target = dataclasses.replace(self._target, session=session_id)

    async def _perform(self, method: str, path: str, request: Request[T]) -> T:
        out = outgoing(self._target, self.timeout, path, request)
        tries = Resends(
            self.url, method, out.headers, self.network_retries, hands_over=request.hands_over
        )
        while True:
            if self._http.is_closed:
                raise closed()
            with tries.failures():
                response = await self._http.request(
                    method,
                    out.url,
                    params=out.params,
                    content=out.content,
                    headers=out.headers,
                    timeout=out.timeout,
                )
                return read_answer(response, request)
            await anyio.sleep(tries.pause)  # the network failed it, and it may go again

    async def events(
        self,
        after: int | None = None,
        *,
        on_open: Callable[[], object] | None = None,
        on_cursor: Callable[[int], object] | None = None,
    ) -> AsyncGenerator[Event, None]:
        """Your events as they happen: `message.created` (new mail for you), and
        `message.read|acked|expired` (receipts of what you sent). From event `after` on (a
        `seq` you saw), else from now. A dropped stream is reopened after the last event
        yielded (`Last-Event-ID`), so nothing is missed; a refusal (a revoked key) raises.
        Close it with `contextlib.aclosing` when you stop early.

        `on_open` is called each time the service accepted the stream: from then on nothing is
        missed, so a caller that must not miss what happens next waits for it. `on_cursor` is
        called with each new cursor, the one a stream opens at (before any event: "now", as
        the service says it) and each event's: a caller that opens the stream again itself,
        after a refusal this raised, passes the last as `after` and misses nothing between."""
        cursor, delay = after, RECONNECT_S
        while True:
            if self._http.is_closed:
                raise closed()
            reader = EventReader(cursor=cursor)
            try:
                async with self._http.stream(
                    "GET",
                    "/v1/events",
                    headers=events_headers(self._target, cursor),
                    timeout=STREAM_TIMEOUT,
                ) as response:
                    if response.status_code >= 300:
                        content = await response.aread()
                        raise refusal(response.status_code, response.headers, content)
                    check_stream(response)
                    delay = RECONNECT_S
                    if on_open is not None:
                        on_open()
                    async for line in response.aiter_lines():
                        told = reader.cursor
                        event = reader.feed(line)
                        if on_cursor is not None and reader.cursor not in (None, told):
                            on_cursor(reader.cursor)
                        if event is not None:
                            cursor = reader.cursor
                            yield event
            except (httpx.TransportError, httpx.DecodingError):
                pass  # dropped, garbled, or silent past STREAM_IDLE_S: reopen after the cursor
            except AgentpostError as err:
                if not retry_stream(err):
                    raise
            # The stream's opening id said where it starts ("now", or the newest event for a
            # cursor past every event): resume there.
            cursor = reader.cursor
            await anyio.sleep(reader.retry_s or delay)
            delay = min(delay * 2, MAX_RECONNECT_S)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()
