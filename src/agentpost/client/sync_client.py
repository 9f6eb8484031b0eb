"""`Client`: the REST API of an agentpost service as blocking methods, for scripts.

The same operations as `AsyncClient` (both inherit them, see `operation.py`), performed with a
blocking httpx client: no event loop, no thread. `events()` is a blocking iterator.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Generator
from types import TracebackType
from typing import TypeVar

import httpx

from agentpost.client.admin import AdminOperations
from agentpost.client.leadership import LeadershipOperations
from agentpost.client.mail import MailOperations
from agentpost.client.operation import Request, SyncBase
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


class Client(
    SyncBase,
    MailOperations,
    LeadershipOperations,
    TaskOperations,
    ReservationOperations,
    AdminOperations,
):
    """The blocking twin of `AsyncClient`: the same constructor, methods and errors."""

    def __init__(
        self,
        url: str | None = None,
        key: str | None = None,
        *,
        session: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        network_retries: int = NETWORK_RETRIES,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._target = Target.resolve(url, key, session)
        self.timeout = check_timeout(timeout)
        self.network_retries = check_network_retries(network_retries)
        self._http = httpx.Client(base_url=self._target.url, timeout=timeout, transport=transport)

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

    def _perform(self, method: str, path: str, request: Request[T]) -> T:
        out = outgoing(self._target, self.timeout, path, request)
        tries = Resends(
            self.url, method, out.headers, self.network_retries, hands_over=request.hands_over
        )
        while True:
            if self._http.is_closed:
                raise closed()
            with tries.failures():
                response = self._http.request(
                    method,
                    out.url,
                    params=out.params,
                    content=out.content,
                    headers=out.headers,
                    timeout=out.timeout,
                )
                return read_answer(response, request)
            time.sleep(tries.pause)  # the network failed it, and it may go again

    def events(
        self,
        after: int | None = None,
        *,
        on_open: Callable[[], object] | None = None,
        on_cursor: Callable[[int], object] | None = None,
    ) -> Generator[Event, None, None]:
        """Your events as they happen, as `AsyncClient.events` yields them: resumed after the
        last one on a dropped stream, from `after` (else from now) at first; `on_open` is
        called each time the service accepted the stream, `on_cursor` with each new cursor
        (the stream's opening one too)."""
        cursor, delay = after, RECONNECT_S
        while True:
            if self._http.is_closed:
                raise closed()
            reader = EventReader(cursor=cursor)
            try:
                with self._http.stream(
                    "GET",
                    "/v1/events",
                    headers=events_headers(self._target, cursor),
                    timeout=STREAM_TIMEOUT,
                ) as response:
                    if response.status_code >= 300:
                        content = response.read()
                        raise refusal(response.status_code, response.headers, content)
                    check_stream(response)
                    delay = RECONNECT_S
                    if on_open is not None:
                        on_open()
                    for line in response.iter_lines():
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
            time.sleep(reader.retry_s or delay)
            delay = min(delay * 2, MAX_RECONNECT_S)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
