"""What both clients share on the wire: settings, headers, answers and refusals, server-sent events.

Every failure reaches the caller as an `AgentpostError` with a stable code, as the services
raise it: a refusal keeps the service's code, message, details and `Retry-After`; a service that
cannot be reached, or answers something that is not agentpost, is `unavailable`. So a caller
handles one exception type, whether the post office is local or remote.
"""

from __future__ import annotations

import contextlib
import datetime
import email.utils
import json
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from agentpost import __version__
from agentpost.client.operation import Request
from agentpost.config import load_settings
from agentpost.domain.errors import AgentpostError, ErrorCode, invalid
from agentpost.domain.events import Event
from agentpost.domain.limits import is_decimal, not_unicode, utf8_size

T = TypeVar("T")

SESSION_HEADER = "Agentpost-Session"
DEFAULT_TIMEOUT_S = 30.0
RECONNECT_S = 1.0
MAX_RECONNECT_S = 30.0
"""An event stream that dropped is reopened after RECONNECT_S, doubling up to this."""
STREAM_IDLE_S = 60.0
"""The service sends a keep-alive comment every 15 s: a stream silent for this long is dead."""
NETWORK_RETRIES = 2
RESEND_S = (0.25, 1.0)
"""The pause before each resend of a request the network failed (the last one repeats)."""
_NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
_NETWORK = (httpx.NetworkError, httpx.TimeoutException, httpx.RemoteProtocolError)
"""What the network did; not a proxy's refusal or a request httpx would not send (sent again,
those would fail the same way)."""

_BY_STATUS: dict[int, ErrorCode] = {
    400: ErrorCode.INVALID_ARGUMENT,
    401: ErrorCode.UNAUTHENTICATED,
    403: ErrorCode.FORBIDDEN,
    404: ErrorCode.NOT_FOUND,
    409: ErrorCode.CONFLICT,
    410: ErrorCode.GONE,
    413: ErrorCode.TOO_LARGE,
    429: ErrorCode.RATE_LIMITED,
}


@dataclass(frozen=True)
class Target:
    """Where the client speaks and as whom: the service's URL, the key, the session."""

    url: str
    key: str | None
    session: str | None

    @classmethod
    def resolve(cls, url: str | None, key: str | None, session: str | None) -> Target:
        """The given URL and key, else the settings' (`AGENTPOST_URL`, `AGENTPOST_KEY`). The
        configured key goes only to the configured service: a client made for another URL
        without a key sends none, rather than hand that service the key of this one. A mistake
        in the settings is `invalid_argument`, as the command line says it."""
        if url is None or key is None:
            settings = load_settings()
            if key is None:
                key = settings.key_for(url)
            url = url or settings.url
        if not url:
            raise AgentpostError(
                ErrorCode.INVALID_ARGUMENT,
                "no service URL: pass one, or set AGENTPOST_URL (or `url` in the config file)",
            )
        check_service_url(url)
        if key:
            header_value("the key", key)
        if session:
            header_value("the session", session)
        return cls(url.rstrip("/"), key or None, session)

    def headers(self) -> dict[str, str]:
        headers = {"User-Agent": f"agentpost-client/{__version__}"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        if self.session:
            headers[SESSION_HEADER] = self.session
        return headers


def check_service_url(url: str) -> None:
    """A typo in the URL is the caller's mistake to fix, not a service that is away: refused
    here as `invalid_argument`, before anything is sent (or the key is handed anywhere)."""
    try:
        parsed = httpx.URL(url)
        port = parsed.port
        host = parsed.host  # decodes an IDNA name: a malformed `xn--` label raises here
    except (httpx.InvalidURL, ValueError) as exc:
        raise invalid(f"the service URL {url!r} is no URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not host:
        raise invalid(f"the service URL must be http(s)://host[:port], not {url!r}")
    if parsed.path not in ("", "/") or parsed.query or parsed.fragment:
        # The routes are the client's to add: `…:8470/v1`, as `serve` prints the REST root,
        # would answer every call 404 `not_found` as if what was asked for did not exist.
        raise invalid(
            f"the service URL is http(s)://host[:port] alone, without a path: not {url!r}"
        )
    if port is not None and not 0 < port < 65536:
        raise invalid(f"the service URL's port must be from 1 to 65535, not {port}")


def check_timeout(timeout: float) -> float:
    """The client's timeout in seconds: httpx takes a NaN, a negative or an infinite one, and
    fails with it on every call instead (0 would time out every call before it is sent)."""
    if not (isinstance(timeout, int | float) and math.isfinite(timeout) and timeout > 0):
        raise invalid(f"timeout must be a positive, finite number of seconds, not {timeout!r}")
    return float(timeout)


def header_value(what: str, value: str) -> str:
    """A value for an HTTP header: printable ASCII, which is all a key, a session id or an
    idempotency key holds. Anything else (a line break read from a file with the key, say) is
    refused without repeating the value, which may be a secret. So is a space at either end
    (pasted with the key, say): httpx would refuse that header only as it sends it, as if the
    service could not be reached, with the value, the key too, in its message."""
    if not (value.isascii() and value.isprintable()) or value != value.strip():
        raise invalid(
            f"{what} holds characters an HTTP header cannot carry"
            " (printable ASCII only, no space at either end)"
        )
    return value


@dataclass(frozen=True)
class Outgoing:
    """One request as it goes on the wire."""

    url: str
    params: dict[str, Any]
    content: bytes | None
    headers: dict[str, str]
    timeout: httpx.Timeout


def outgoing(
    target: Target, default_timeout_s: float, path: str, request: Request[Any]
) -> Outgoing:
    """The request as both clients send it, or the refusal of what cannot be sent: text that
    is not Unicode (a byte of another encoding on a command line), a body that is not JSON
    (NaN, a set). Refused here as the services would refuse it, not a Python error."""
    for name, value in [*request.path_args.items(), *request.params.items()]:
        if isinstance(value, str) and not value.isascii():
            utf8_size(value, name)  # refused when it is not Unicode text
    headers = target.headers()
    if not request.for_session:
        headers.pop(SESSION_HEADER, None)
    for name, value in request.headers.items():
        headers[name] = header_value(name, value)
    content = None
    if request.json is not None:
        try:
            text = json.dumps(
                request.json, ensure_ascii=False, allow_nan=False, separators=(",", ":")
            )
            content = text.encode("utf-8")
        except UnicodeEncodeError:
            raise not_unicode("the request's body") from None
        except (TypeError, ValueError, RecursionError) as exc:
            raise invalid(f"cannot send this request: its body is not JSON ({exc})") from None
        headers["Content-Type"] = "application/json"
    return Outgoing(
        request.url(path), request.query(), content, headers, _timeout(default_timeout_s, request)
    )


MAX_HELD_S = 86_400.0
"""The longest a client waits on a held-open request (a service's max_wait_s is 300 s by
default): an infinite read timeout is one the operating system refuses."""


def _timeout(default_s: float, request: Request[Any]) -> httpx.Timeout:
    """The client's timeout, stretched on reads by the time a long-poll may be held open."""
    return httpx.Timeout(default_s, read=default_s + min(request.wait_s, MAX_HELD_S))


def closed() -> AgentpostError:
    return invalid("this client is closed: open a new one")


def unreachable(url: str, exc: httpx.TransportError) -> AgentpostError:
    return AgentpostError(
        ErrorCode.UNAVAILABLE, f"cannot reach the post office at {url}: {exc or type(exc).__name__}"
    )


def check_network_retries(retries: int) -> int:
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise invalid("network_retries must be a whole number, 0 or more", network_retries=retries)
    return retries


def may_resend(
    method: str, headers: Mapping[str, str], exc: httpx.TransportError, *, hands_over: bool
) -> bool:
    """Whether a request the network failed may go again without doing twice what it asked.

    One that never left (no connection) may, whatever it asks; one whose answer was lost may
    have been carried out, so only a read (not one that `hands_over` mail, marking it read),
    or a write the service de-duplicates by its `Idempotency-Key`, is sent again: the retry
    then answers as the first would have."""
    if not isinstance(exc, _NETWORK):
        return False
    if isinstance(exc, _NEVER_SENT):
        return True
    return (method == "GET" and not hands_over) or "Idempotency-Key" in headers


class Resends:
    """The tries of one request, for either client: `failures()` wraps each, and httpx's
    errors come out as ours; one the network failed and that may go again is swallowed, and
    `pause` then says how long to wait before the next try."""

    def __init__(
        self,
        url: str,
        method: str,
        headers: Mapping[str, str],
        allowed: int,
        *,
        hands_over: bool = False,
    ) -> None:
        self.url = url
        self.method = method
        self.headers = headers
        self.allowed = allowed
        self.hands_over = hands_over
        self.resent = 0
        self.pause = 0.0

    @contextlib.contextmanager
    def failures(self) -> Iterator[None]:
        try:
            yield
        except httpx.TransportError as exc:
            if self.resent >= self.allowed or not may_resend(
                self.method, self.headers, exc, hands_over=self.hands_over
            ):
                raise unreachable(self.url, exc) from None
            self.pause = RESEND_S[min(self.resent, len(RESEND_S) - 1)]
            self.resent += 1
        except httpx.DecodingError as exc:
            raise undecodable(self.url, exc) from None
        except httpx.InvalidURL as exc:
            raise unsendable(exc) from None


def undecodable(url: str, exc: httpx.DecodingError) -> AgentpostError:
    """An answer whose bytes are not what its headers say (a proxy's gzip that is not)."""
    return AgentpostError(ErrorCode.UNAVAILABLE, f"the answer from {url} is not agentpost's: {exc}")


def unsendable(exc: httpx.InvalidURL) -> AgentpostError:
    """A request httpx cannot even put on the wire: a value too long for a URL, say."""
    return AgentpostError(ErrorCode.INVALID_ARGUMENT, f"cannot send this request: {exc}")


def _retry_after(headers: Mapping[str, str], body: Mapping[str, Any]) -> float | None:
    value = headers.get("retry-after")
    if value is not None:
        if is_decimal(value.strip()):
            return _seconds(float(value.strip()))
        when = _http_date(value)
        if when is not None:
            return max(0.0, when.timestamp() - time.time())
    found = body.get("retry_after_s")
    return _seconds(float(found)) if isinstance(found, int | float) else None


def _seconds(value: float) -> float | None:
    """A wait a caller can act on: a finite number of seconds, none below zero. A NaN (which
    Python's JSON reads) or an infinity (past any float) is left out: no JSON carries the one,
    no clock waits the other."""
    return max(0.0, value) if math.isfinite(value) else None


def _http_date(value: str) -> datetime.datetime | None:
    """An HTTP date, or None for anything else, blank included (a proxy may send what it
    likes)."""
    try:
        return email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None


def refusal(status: int, headers: Mapping[str, str], content: bytes) -> AgentpostError:
    """The service's refusal as the exception the services raise: `{"error": {...}}`, its
    stable code (else one read from the status) and `Retry-After`. A redirect is no answer of
    the service, which never redirects: the URL given is not the service's own (http:// to a
    proxy that sends it to https://, say), and the client does not follow it with the key."""
    if 300 <= status < 400:
        where = headers.get("location") or "another address"
        return AgentpostError(
            ErrorCode.UNAVAILABLE,
            f"the post office's URL redirects to {where} (HTTP {status}): give the URL the"
            " service answers at",
        )
    try:
        body = json.loads(content).get("error")
    except (ValueError, AttributeError):
        body = None
    if not isinstance(body, dict):
        code = _BY_STATUS.get(status, ErrorCode.UNAVAILABLE)
        text = content[:200].decode("utf-8", errors="replace")
        return AgentpostError(code, f"HTTP {status} from the post office: {text}")
    try:
        code = ErrorCode(str(body.get("code")))
    except ValueError:  # a code this client does not know yet: the status says what kind
        code = _BY_STATUS.get(status, ErrorCode.UNAVAILABLE)
    details = body.get("details")
    return AgentpostError(
        code,
        str(body.get("message", code.value)),
        details=details if isinstance(details, dict) else None,
        retry_after_s=_retry_after(headers, body),
    )


def read_answer(response: httpx.Response, request: Request[T]) -> T:
    if response.status_code >= 300:
        raise refusal(response.status_code, response.headers, response.content)
    try:
        return request.parse(response.json())
    except (ValueError, KeyError, TypeError) as exc:
        raise AgentpostError(
            ErrorCode.UNAVAILABLE,
            f"the answer from {response.request.url} is not agentpost's ({exc!r})",
        ) from None


def check_stream(response: httpx.Response) -> None:
    """An answer to `/v1/events` that is no event stream (a proxy's page, another server) is
    not the stream opened: `unavailable`, to be opened again later."""
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "text/event-stream":
        raise AgentpostError(
            ErrorCode.UNAVAILABLE,
            f"the answer from {response.request.url} is no event stream ({kind or 'no type'})",
        )


def events_headers(target: Target, cursor: int | None) -> dict[str, str]:
    headers = {**target.headers(), "Accept": "text/event-stream"}
    if cursor is not None:
        headers["Last-Event-ID"] = str(cursor)
    return headers


STREAM_TIMEOUT = httpx.Timeout(DEFAULT_TIMEOUT_S, read=STREAM_IDLE_S)


def retry_stream(err: AgentpostError) -> bool:
    """Whether an event stream refused with `err` is worth reopening: only when the service is
    away for a while, never when the key is wrong."""
    return err.code is ErrorCode.UNAVAILABLE


@dataclass
class EventReader:
    """Server-sent events (the WHATWG format) read line by line into agentpost events.

    Remembers the id of the last event, so a reopened stream resumes after it
    (`Last-Event-ID`), and the `retry` the server asked for.
    """

    cursor: int | None = None
    retry_s: float | None = None
    _data: list[str] = field(default_factory=list)
    _id: int | None = None
    _name: str = ""

    def feed(self, line: str) -> Event | None:
        """One line of the stream (without its line break); the event it completes, if any."""
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment: the service's keep-alive
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "id" and is_decimal(value):
            self._id = int(value)
        elif name == "retry" and is_decimal(value):
            self.retry_s = min(int(value) / 1000, MAX_RECONNECT_S)
        elif name == "event":
            self._name = value  # the type, which an agentpost event's data carries too
        return None

    def _dispatch(self) -> Event | None:
        if self._id is not None:  # as browsers do: an id alone moves the cursor
            self.cursor = self._id
        if not self._data:
            self._name = ""
            return None
        data, self._data = "\n".join(self._data), []
        if self._name == "error":  # the service ends the stream, saying why
            raise refusal(0, {}, data.encode())
        self._name = ""
        try:
            event = Event.from_dict(json.loads(data))
        except (ValueError, KeyError, TypeError) as exc:
            raise AgentpostError(
                ErrorCode.UNAVAILABLE, f"an event from the post office is not agentpost's ({exc!r})"
            ) from None
        self.cursor = event.seq if self._id is None else self._id
        return event
