"""`agentpost serve`: the REST face and the MCP face as one ASGI application over one post office.

This is the composition root, the one module above the faces: it opens the post office when the
server starts, mounts `/mcp` (the MCP face) beside `/v1` (the HTTP face) behind one guard that
authenticates every request, and runs what the service does in the background: push to MCP
connections, webhook deliveries, and the sweeper (mail expires on time, old mail is purged).
On a SQLite file the store also watches the file's change signal, so local stdio agents on the
same file share this post office.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import secrets
import socket
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs

import anyio
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

from agentpost.config import Settings
from agentpost.domain.accounts import SECRET_MAX, SECRET_MIN, is_well_formed_secret
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.models import Caller
from agentpost.heap import settle
from agentpost.http.app import build_rest_app
from agentpost.http.errors import error_response
from agentpost.http.events import defer_stream_drain, drain_streams
from agentpost.http.guard import Guard, caller_of
from agentpost.mcp.adapter.rebinding import allowed_places
from agentpost.mcp.http import asked_groups, build_http_server, parse_groups, push_news
from agentpost.services import PostOffice
from agentpost.services.client_address import counted, spelt

log = logging.getLogger(__name__)
access_log = logging.getLogger("uvicorn.access")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_HEAD_BYTES = 64 * 1024
"""The most a request line and its headers may take: a key and a few headers need a few
hundred bytes; uvicorn's httptools parser takes any amount, before any key is checked."""
MAX_ARRIVING_PER_ADDRESS = 256
"""Requests one client address (an IPv6 client's /64) may have arriving at once (connections
open whose request has not come whole): its next connection closes as it opens, so one client
cannot take the server's files (often 1,024 in all) with requests it never finishes, each held
up to `request_timeout_s`. A request arrives in moments: a proxy, or a load test opening 100
connections at once, has few arriving at any time."""
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
ADMIN_KEY_FILE = "admin.key"


def admin_key_path(settings: Settings) -> Path:
    return settings.home / ADMIN_KEY_FILE


def revoked_admin_key_advice(settings: Settings, key_id: str) -> str:
    """What the owner does when the admin key this service starts with was revoked: the
    way out depends on where the key came from, and a file is replaced by removing it."""
    if settings.admin_key:
        where, way = "AGENTPOST_ADMIN_KEY", "set another there"
    else:
        where = str(admin_key_path(settings))
        way = "remove that file and restart to have a new one made (or set AGENTPOST_ADMIN_KEY)"
    return f"the admin key in {where} ({key_id}) was revoked; {way}"


def load_or_create_admin_key(settings: Settings) -> tuple[str, bool]:
    """The owner's key: configured, else the one in `$AGENTPOST_HOME/admin.key`, else a new one
    written there (0600). Returns it and whether it was just created."""
    if settings.admin_key:
        return settings.admin_key, False
    path = admin_key_path(settings)
    if path.exists():
        key = path.read_text(errors="replace").strip()
        if not is_well_formed_secret(key):
            raise AgentpostError(
                ErrorCode.INVALID_ARGUMENT,
                f"{path} holds no admin key ({SECRET_MIN} to {SECRET_MAX} visible ASCII "
                "characters): put the key back, or remove the file to have a new one made",
            )
        return key, False
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = "ap_" + secrets.token_urlsafe(32)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(key + "\n")
    return key, True


def first_start_note(
    settings: Settings, key: str, host: str, port: int, cli: str = "agentpost"
) -> str:
    """`cli` is how this installation's command is started: the bare name only where PATH
    finds it, as it does not after README's install, which leaves it in `.venv/bin`."""
    # An IPv6 address goes in brackets in a URL (`http://[::1]:8470`), as uvicorn prints it.
    base = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    return f"""\
agentpost: created the admin key, stored in {admin_key_path(settings)} (0600):

    {key}

Create an agent and its key (the command prints the key alone):

    {cli} admin create-agent alice --url {base} --key {key}

or over REST (the key is in the answer):

    curl -s -X POST {base}/v1/admin/agents -H "Authorization: Bearer {key}" \\
         -H "Content-Type: application/json" -d '{{"name": "alice"}}'

Connect Claude Code as that agent, with its key:

    claude mcp add --transport http agentpost {base}/mcp --header "Authorization: Bearer ap_…"
"""


SHUTDOWN_GRACE_S = 10
"""How long a stopping `serve` waits for requests still open before it cuts them."""
ANSWER_GRACE_S = 1.0
"""How long the long-polls a stop wakes have to answer before the event streams still open
are ended (a 2025-era MCP tool call answers on one)."""


class Service:
    """The ASGI application of `agentpost serve`."""

    def __init__(self, settings: Settings, *, on_admin_key: Callable[[str, bool], None]) -> None:
        self.settings = settings
        self._on_admin_key = on_admin_key
        self.office: PostOffice | None = None
        self.refused_to_start: AgentpostError | None = None
        """Why the post office would not open (a database that is not there, say)."""
        self.failed: BaseException | None = None
        """What stopped the post office while it served (a background task that died)."""
        self.on_failure: Callable[[], None] = lambda: None
        """Told when the post office stopped while serving: the server should exit too, so
        that whoever supervises it starts another, rather than keep a door to a closed office."""
        self._rest: ASGIApp | None = None
        self._mcp: ASGIApp | None = None
        self._guard = Guard(
            self._dispatch,
            authenticate=self._authenticate,
            max_body_bytes=settings.max_request_bytes,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        else:
            await self._guard(scope, receive, send)

    async def _authenticate(
        self,
        secret: str | None,
        ip: str | None,
        session: str | None,
        connection: str | None,
        own_session: bool,
    ) -> Caller:
        assert self.office is not None
        return await self.office.keys.authenticate(
            secret, ip=ip, session=session, connection=connection, own_session=own_session
        )

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self._rest is not None
        assert self._mcp is not None
        path: str = scope["path"]
        if path == "/mcp" or path.startswith("/mcp/"):
            try:
                await self._check_groups(scope, _query_value(scope, "tools"))
            except AgentpostError as err:
                await error_response(err)(scope, receive, send)
                return
            await self._mcp(scope, receive, send)
        else:
            await self._rest(scope, receive, send)

    async def _check_groups(self, scope: Scope, asked: str | None) -> None:
        """Refuse a connection's groups before MCP: an unknown one, or `admin` asked for by a
        key that cannot use it (offered none of its tools, the connection would look broken
        rather than refused; the attempt is audited as an admin act's is). Nearly every
        request asks for none: the default groups were checked when the settings were read."""
        if asked is None:
            return
        parse_groups(asked, self.settings.tool_groups)
        caller = caller_of(scope.get("state", {}))
        if "admin" in asked_groups(asked) and not caller.admin:
            assert self.office is not None
            await self.office.admin.check_admin(caller, "mcp_admin_tools")

    async def _connection_closed(self, state: Mapping[str, Any], connection: str) -> None:
        """A 2025-era client ended its MCP connection (`DELETE /mcp`): the session `register`
        bound to it ends too, so it shows offline at once rather than after
        `offline_after_s`. (A connection that just drops goes offline that way.)"""
        assert self.office is not None
        caller = caller_of(dict(state))  # the guard let this DELETE in with a key
        session = self.office.keys.release_connection(connection, caller)
        if session is None:
            return
        try:
            await self.office.presence.end_session(session)
        except Exception:  # the connection is closed all the same; so is the session, later
            log.warning("could not end session %s of a closed connection", session, exc_info=True)

    def _stream_held(
        self, state: Mapping[str, Any], connection: str
    ) -> AbstractAsyncContextManager[None]:
        """A 2025-era connection's own stream heartbeats the session the connection speaks
        for: opened right after `initialize`, that is the key's own, until `register` binds
        the connection to a session of its own."""
        assert self.office is not None
        keys, caller = self.office.keys, caller_of(dict(state))
        return self.office.presence.held_open(
            caller, lambda: keys.bound_session(connection, caller)
        )

    def stop_waiting(self) -> None:
        """Shutting down: uvicorn waits for every open request before the lifespan ends, so
        the long-polls answer now rather than at their deadlines (up to `max_wait_s`)."""
        if self.office is not None:
            self.office.stop_waiting()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        started = stopping = False
        try:
            async with self._running():
                await send({"type": "lifespan.startup.complete"})
                started = True
                await receive()  # lifespan.shutdown
                stopping = True
        except Exception as exc:
            if started and not stopping:
                cause = _sole(exc)
                log.critical("agentpost stopped serving: %s", cause, exc_info=exc)
                self.failed = cause
                self.on_failure()
                return
            doing = "stop cleanly" if started else "start"
            if isinstance(exc, AgentpostError):  # a refusal, said in its words: no traceback
                log.error("agentpost could not %s: %s", doing, exc)
                if not started:
                    self.refused_to_start = exc
            else:
                log.exception("agentpost could not %s", doing)
                if not started:  # not the port, which the last line would blame otherwise
                    self.refused_to_start = AgentpostError(
                        ErrorCode.UNAVAILABLE,
                        f"could not start ({type(exc).__name__}: the log above says why)",
                    )
            failed = "lifespan.shutdown.failed" if started else "lifespan.startup.failed"
            await send({"type": failed, "message": str(exc)})
            return
        await send({"type": "lifespan.shutdown.complete"})

    @contextlib.asynccontextmanager
    async def _running(self) -> AsyncIterator[None]:
        office = await PostOffice.open(self.settings)
        try:
            rest = build_rest_app(office)
            server = build_http_server(office, lambda request: caller_of(dict(request.state)))
            mcp_app = server.streamable_http_app(
                allowed_hosts=self.settings.allowed_hosts,
                allowed_origins=self.settings.allowed_origins,
                max_request_bytes=self.settings.max_request_bytes,
                principal_of=lambda state: caller_of(dict(state)).agent,
                connections_per_principal=self.settings.max_mcp_connections,
                on_connection_closed=self._connection_closed,
                # A connection's own stream is its subscription: a heartbeat, for as long as
                # its key stands, of the session the connection speaks for now.
                while_streaming=self._stream_held,
            )
            # Made once the rest stands: a start refused above leaves no key (nor its banner).
            key, created = load_or_create_admin_key(self.settings)
            installed = await office.keys.install_admin_key(key)
            if installed.revoked_at is not None:  # revoked stays revoked, even when configured
                log.warning("%s", revoked_admin_key_advice(self.settings, installed.id))
            self._on_admin_key(key, created)
            self.office, self._rest, self._mcp = office, rest, mcp_app
            async with mcp_app.router.lifespan_context(mcp_app), anyio.create_task_group() as tg:
                tg.start_soon(push_news, office, server)
                tg.start_soon(office.webhooks.run_dispatcher)
                tg.start_soon(office.sweeper.run)
                try:
                    yield
                finally:
                    tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await office.aclose()


def _sole(exc: BaseException) -> BaseException:
    """The one failure inside task groups' wrappings, when there is one."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _query_value(scope: Scope, name: str) -> str | None:
    """The one value of `name`: given twice (`?tools=core&tools=coord`), the MCP app would
    read the last alone, and a connection would quietly lack the groups named first."""
    query: bytes = scope.get("query_string", b"")
    if not query:  # nearly every request
        return None
    values = parse_qs(query.decode("latin-1")).get(name)
    if values and len(values) > 1:
        raise AgentpostError(
            ErrorCode.INVALID_ARGUMENT,
            f"{name} is given {len(values)} times; name each once, separated by commas",
        )
    return values[0] if values else None


def check_bind(host: str, allow_remote: bool) -> None:
    """Beyond loopback only when asked: a post office is private until its owner says so."""
    if host not in LOOPBACK and not allow_remote:
        raise AgentpostError(
            ErrorCode.INVALID_ARGUMENT,
            f"refusing to listen on {host}: only loopback without --allow-remote",
        )


class _LoggedWhenAnswered:
    """uvicorn's access log line, written once the answer has gone out, not as it starts: the
    line's formatting and writing (some 30 µs) held up every answer, an MCP `send`'s too. The
    same logger and arguments, so its handlers and format are uvicorn's (the protocol's own
    line is off); an event stream is logged when it ends, as nginx logs it."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not access_log.isEnabledFor(logging.INFO):
            await self._app(scope, receive, send)
            return
        status = 0  # none yet: a client that left before any answer is not logged

        async def answering(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self._app(scope, receive, answering)
        except Exception:
            status = status or 500  # what uvicorn answers for it
            raise
        finally:
            if status:
                asked: Any = scope  # an HTTP scope, as uvicorn's helpers take it
                where, path = get_client_addr(asked), get_path_with_query_string(asked)
                version = scope["http_version"]
                access_log.info(
                    '%s - "%s %s HTTP/%s" %d', where, scope["method"], path, version, status
                )


class _BoundedHeadProtocol(HttpToolsProtocol):
    """uvicorn's HTTP protocol, answering 431 and closing the connection once a request's
    head outgrows MAX_HEAD_BYTES, so a client without a key cannot fill the memory with it;
    and 408 once a request has not arrived whole within `request_timeout_s` of its first byte
    (of the connection's opening, for the first), so it cannot hold connections without end
    either: uvicorn times out only a connection idle between requests, and a thousand silent
    or trickling ones (the usual limit of open files) shut everyone out.

    Two counts, as a head arrives in two ways: the bytes read while the head is still open
    (a head trickling in, or one huge header the parser buffers whole), and the request line
    and headers the parser hands over, counted when the head is complete (a head read in one
    go ends within the read that takes it over, so the first count never sees it open).

    One timer a connection, not one a request: each request sets its deadline, and the timer,
    once due, sleeps again until the deadline of the request arriving then, if any."""

    request_timeout_s: float = 30.0
    arriving_from: ClassVar[Counter[str]] = Counter()
    """Requests still arriving, by client address (an IPv6 client's /64): each server's own
    (see `serve`)."""
    _in_head = True
    _head_bytes = 0
    _head_refused = False
    _deadline: float | None = None
    """When the request arriving now is too slow (None: none is arriving)."""
    _timer: asyncio.TimerHandle | None = None
    _arriving_as: str | None = None
    _address = ""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.access_log = False  # `_LoggedWhenAnswered` writes the line, after the answer
        # Spelt once a connection: a kept-alive one's next requests come from the same place.
        self._address = counted(spelt(self.client[0] if self.client else None))
        if not self._arrival_starts():
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._arrived()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        if self._deadline is None and not self._arrival_starts():  # kept alive, then again
            self._head_refused = True  # nothing more of it is read
            self.transport.close()
            return
        super().on_message_begin()

    def _arrival_starts(self) -> bool:
        """Time the request now arriving; False when its address has too many arriving."""
        address = self._address
        if self.arriving_from[address] >= MAX_ARRIVING_PER_ADDRESS:
            return False
        self.arriving_from[address] += 1
        self._arriving_as = address
        self._deadline = self.loop.time() + self.request_timeout_s
        if self._timer is None:
            self._timer = self.loop.call_at(self._deadline, self._deadline_due)
        return True

    def _arrived(self) -> None:
        self._deadline = None  # the timer, when due, finds nothing arriving
        if self._arriving_as is not None:
            self.arriving_from[self._arriving_as] -= 1
            if not self.arriving_from[self._arriving_as]:
                del self.arriving_from[self._arriving_as]
            self._arriving_as = None

    def _deadline_due(self) -> None:
        self._timer = None
        if self._deadline is None:
            return  # what was arriving arrived; the next request arms it again
        if self.loop.time() < self._deadline:  # a later request's: sleep until then
            self._timer = self.loop.call_at(self._deadline, self._deadline_due)
            return
        self._too_slow()

    def _too_slow(self) -> None:
        self._arrived()
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:  # no answer under way
            self.transport.write(
                b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            )
        self.transport.close()  # a request under way sees its client gone

    def data_received(self, data: bytes) -> None:
        if self._head_refused:
            return
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        # Still in the head after taking all of that: every byte of it was head.
        if self._in_head and self._head_bytes > MAX_HEAD_BYTES:
            self._refuse_head()

    def _refuse_head(self) -> None:
        self._head_refused = True
        if not self.transport.is_closing():
            self.transport.write(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                b"content-length: 0\r\nconnection: close\r\n\r\n"
            )
            self.transport.close()

    def on_headers_complete(self) -> None:
        self._in_head = False
        if self._head_refused or _head_size(self.url, self.headers) > MAX_HEAD_BYTES:
            self._refuse_head()  # before the app sees the request: no cycle is made for it
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._head_refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._head_refused:
            return
        self._arrived()
        self._in_head, self._head_bytes = True, 0
        super().on_message_complete()


def _head_size(target: bytes, headers: list[tuple[bytes, bytes]]) -> int:
    """A head's size as the parser handed it over: the target, and each header with ": " and
    its line's end."""
    return len(target) + 4 * len(headers) + sum(map(len, itertools.chain.from_iterable(headers)))


class _Server(uvicorn.Server):
    """Says how to connect once it listens, when the port (maybe chosen by the kernel) is known;
    lets waiting requests answer when it shuts down."""

    note: Callable[[int], None] | None = None
    noted = False
    on_shutdown: Callable[[], None] | None = None

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.on_shutdown is not None:
            self.on_shutdown()
        asyncio.get_running_loop().call_later(ANSWER_GRACE_S, drain_streams)
        await super().shutdown(sockets)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.note is not None and self.servers and self.servers[0].sockets:
            self.note(self.servers[0].sockets[0].getsockname()[1])
            self.noted = True
        settle()  # the app and its post office are made: what they hold lives as long


def serve(
    settings: Settings,
    *,
    host: str,
    port: int,
    allow_remote: bool = False,
    cli: str = "agentpost",
) -> None:
    """Run the service until interrupted. Settings only the server reads are looked at
    first, so a bad one is refused before anything is made (a first start's admin key, and
    its banner, which names the command as `cli`) or logged."""
    check_bind(host, allow_remote)
    allowed_places(settings.allowed_hosts, settings.allowed_origins)
    defer_stream_drain()  # until the long-polls have answered (`_Server.shutdown`)
    server: _Server

    def announce(key: str, created: bool) -> None:
        if created:
            server.note = lambda bound: print(
                first_start_note(settings, key, host, bound, cli), file=sys.stderr, flush=True
            )

    app = Service(settings, on_admin_key=announce)
    proxies = settings.trusted_proxies
    config = uvicorn.Config(
        _LoggedWhenAnswered(app),
        host=host,
        port=port,
        lifespan="on",
        log_level="info",
        http=type(
            "BoundedHeadProtocol",
            (_BoundedHeadProtocol,),
            {"request_timeout_s": settings.request_timeout_s, "arriving_from": Counter()},
        ),
        # uvicorn believes X-Forwarded-For from loopback by default: any local client could
        # then speak from any address it names, and never be locked out.
        proxy_headers=bool(proxies),
        forwarded_allow_ips=list(proxies) or None,
        # Long-polls answer at once on shutdown (`stop_waiting`) and event streams end; this
        # bounds whatever else a client holds open.
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
    server = _Server(config)
    server.on_shutdown = app.stop_waiting

    def stop() -> None:
        server.should_exit = True

    app.on_failure = stop
    try:
        server.run()
        if app.failed is not None:
            raise AgentpostError(
                ErrorCode.UNAVAILABLE, f"the post office stopped while serving: {app.failed}"
            )
    except SystemExit:
        if server.started:
            raise
        if server.note is not None and not server.noted:
            # The key was created (and stored) before the port turned out taken: say it now,
            # as no later start will (the file is there then).
            server.note(port)
        # uvicorn exits 3 on a failed start, which the command line's statuses reserve for
        # refused keys: say instead why, with the status of the reason's code.
        raise app.refused_to_start or AgentpostError(
            ErrorCode.UNAVAILABLE, f"cannot listen on {host}:{port} (the log above says why)"
        ) from None
