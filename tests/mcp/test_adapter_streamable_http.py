"""`ConnectionGate`, the door in front of the SDK's 2025-era connections, called as ASGI in
process: here a test decides when a handler's task comes back, which a real server under load
decides by chance (the end to end cases are in test_http_service.py)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from typing import Any

import anyio
import pytest
from starlette.types import Message, Receive, Scope, Send

from agentpost.mcp.adapter import streamable_http
from agentpost.mcp.adapter.streamable_http import ConnectionClosed, ConnectionGate

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def opening(principal: str) -> Scope:
    """A 2025-era `initialize`: a POST without a connection id, by `principal`."""
    return {"type": "http", "method": "POST", "headers": [], "state": {"who": principal}}


def closing(principal: str, connection: str) -> Scope:
    """`DELETE /mcp` of a connection, by `principal`."""
    headers = [(b"mcp-session-id", connection.encode())]
    return {"type": "http", "method": "DELETE", "headers": headers, "state": {"who": principal}}


async def nothing_sent() -> Message:
    return {"type": "http.disconnect"}


class SlowToReturn:
    """Stands in for the SDK: opens a connection for each `initialize` and closes one on each
    `DELETE`, answers at once, and has the handler's task come back (tearing a closed
    connection down) only once `release` is set. Its table of open connections is the gate's."""

    def __init__(self) -> None:
        self.open: dict[str, str] = {}
        """Connection id: its principal."""
        self.release = anyio.Event()
        self._ids = (f"c{n}" for n in itertools.count())

    def count(self, principal: str) -> int:
        return sum(1 for who in self.open.values() if who == principal)

    def closed(self, connection: str) -> None:
        self.open.pop(connection, None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] == "DELETE":
            connection = dict(scope["headers"])[b"mcp-session-id"].decode()
            await self._answer(send, connection)
            await self.release.wait()
            self.closed(connection)  # the teardown, late
        else:
            connection = next(self._ids)
            self.open[connection] = scope["state"]["who"]
            await self._answer(send, connection)
            await self.release.wait()

    @staticmethod
    async def _answer(send: Send, connection: str) -> None:
        headers = [(b"mcp-session-id", connection.encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"{}", "more_body": False})


def gate_over(
    app: SlowToReturn, most: int, on_closed: ConnectionClosed | None = None
) -> ConnectionGate:
    return ConnectionGate(
        app,
        principal_of=lambda state: state.get("who"),
        connections=app,
        per_principal=most,
        on_closed=on_closed,
    )


def recorder() -> tuple[list[Message], Send]:
    """Where an answer goes: the messages sent, as they are sent."""
    sent: list[Message] = []

    async def record(message: Message) -> None:
        sent.append(message)

    return sent, record


async def test_an_answered_opening_counts_once_though_its_handler_comes_back_late() -> None:
    """Its client may read the answer and open the next connection before the handler's task
    resumes: the first connection is open by then, and must not count as opening too."""
    app = SlowToReturn()
    gate = gate_over(app, most=2)
    first, second, third = recorder(), recorder(), recorder()
    async with anyio.create_task_group() as tg:
        tg.start_soon(gate, opening("alice"), nothing_sent, first[1])
        await anyio.wait_all_tasks_blocked()  # answered; its handler waits for `release`
        assert first[0][-1]["more_body"] is False
        tg.start_soon(gate, opening("alice"), nothing_sent, second[1])
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(gate, opening("alice"), nothing_sent, third[1])
        await anyio.wait_all_tasks_blocked()
        app.release.set()
    assert second[0][0]["status"] == 200
    assert third[0][0]["status"] == 429  # two open: the bound
    assert app.count("alice") == 2


async def test_a_closed_connection_counts_no_more_once_its_close_is_answered() -> None:
    """The SDK tears a closed connection down after answering the `DELETE`: its client may
    open the next one before that, and must not be refused for the one it closed. Whoever
    asked to hear of closes hears of it before the client does."""
    app = SlowToReturn()
    app.release.set()
    told: list[tuple[object, str, int]] = []
    closed, reopened = recorder(), recorder()

    async def on_closed(state: Mapping[str, Any], connection: str) -> None:
        told.append((state.get("who"), connection, len(closed[0])))

    gate = gate_over(app, most=1, on_closed=on_closed)
    await gate(opening("alice"), nothing_sent, recorder()[1])
    app.release = anyio.Event()  # from now on, handlers come back late
    async with anyio.create_task_group() as tg:
        tg.start_soon(gate, closing("alice", "c0"), nothing_sent, closed[1])
        await anyio.wait_all_tasks_blocked()  # answered; the teardown waits for `release`
        assert closed[0][0]["status"] == 200
        assert told == [("alice", "c0", 0)]  # told before the answer went out
        tg.start_soon(gate, opening("alice"), nothing_sent, reopened[1])
        await anyio.wait_all_tasks_blocked()
        app.release.set()
    assert reopened[0][0]["status"] == 200
    assert app.open == {"c1": "alice"}


async def test_a_close_the_sdk_refuses_closes_nothing() -> None:
    """Another principal's `DELETE` of a connection: the SDK answers 404, the connection still
    counts for its owner, and nobody is told it closed."""

    async def not_yours(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    app = SlowToReturn()
    app.release.set()
    await gate_over(app, most=1)(opening("alice"), nothing_sent, recorder()[1])
    told: list[str] = []

    async def on_closed(state: Mapping[str, Any], connection: str) -> None:
        told.append(connection)

    refusing = ConnectionGate(
        not_yours,
        principal_of=lambda state: state.get("who"),
        connections=app,
        per_principal=1,
        on_closed=on_closed,
    )
    await refusing(closing("bob", "c0"), nothing_sent, recorder()[1])
    assert app.open == {"c0": "alice"}
    assert told == []


async def test_an_opening_still_in_flight_counts_against_the_bound() -> None:
    """Before the SDK has taken it, an opening request is counted by the gate alone."""
    held = anyio.Event()

    async def unanswered(scope: Scope, receive: Receive, send: Send) -> None:
        await held.wait()

    gate = ConnectionGate(
        unanswered,
        principal_of=lambda state: state.get("who"),
        connections=SlowToReturn(),  # holds nothing open
        per_principal=1,
    )
    held_answer, refused, bobs = recorder(), recorder(), recorder()
    async with anyio.create_task_group() as tg:
        tg.start_soon(gate, opening("alice"), nothing_sent, held_answer[1])
        await anyio.wait_all_tasks_blocked()
        await gate(opening("alice"), nothing_sent, refused[1])
        tg.start_soon(gate, opening("bob"), nothing_sent, bobs[1])  # each principal its own
        await anyio.wait_all_tasks_blocked()
        held.set()
    assert refused[0][0]["status"] == 429
    assert held_answer[0] == bobs[0] == []  # both went through to the SDK, still unanswered


def on_connection(principal: str, body: bytes) -> tuple[Scope, Receive]:
    """A 2025-era message POSTed on a connection that is open, by `principal`."""
    headers = [(b"mcp-session-id", b"c0"), (b"mcp-protocol-version", b"2025-11-25")]
    scope = {"type": "http", "method": "POST", "headers": headers, "state": {"who": principal}}
    chunks = [body[:10], body[10:]]

    async def receive() -> Message:
        if chunks:
            chunk = chunks.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}
        return {"type": "http.disconnect"}

    return scope, receive


class Reader:
    """Stands in for the SDK: reads each request's body whole, answers it or not, and keeps
    the bodies it was given."""

    def __init__(self, *, answers: bool) -> None:
        self.answers = answers
        self.bodies: list[bytes] = []

    def count(self, principal: str) -> int:
        return 1

    def closed(self, connection: str) -> None:
        pass

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        self.bodies.append(body)
        if self.answers:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"{}", "more_body": False})


def call(request_id: int, padding: int = 0) -> bytes:
    params = {"name": "wait", "arguments": {"note": "x" * padding}}
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    ).encode()


@pytest.mark.parametrize("padding", [0, 40_000])
async def test_a_request_whose_client_hung_up_is_cancelled_by_its_id(padding: int) -> None:
    app = Reader(answers=False)
    gate = ConnectionGate(
        app, principal_of=lambda s: s.get("who"), connections=app, per_principal=4
    )
    scope, receive = on_connection("alice", call(7, padding))
    await gate(scope, receive, recorder()[1])
    assert len(app.bodies) == 2
    cancelled = json.loads(app.bodies[1])
    assert cancelled["method"] == "notifications/cancelled"
    assert cancelled["params"]["requestId"] == 7


async def test_an_answered_request_is_not_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    read_again: list[bytes] = []
    monkeypatch.setattr(streamable_http, "_request_id", read_again.append)
    app = Reader(answers=True)
    gate = ConnectionGate(
        app, principal_of=lambda s: s.get("who"), connections=app, per_principal=4
    )
    scope, receive = on_connection("alice", call(8))
    sent, record = recorder()
    await gate(scope, receive, record)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert len(app.bodies) == 1  # nothing cancelled
    assert read_again == []  # its body was parsed once, by the SDK


@pytest.mark.parametrize("nesting", [b"[", b'{"a":'])
async def test_a_large_request_nested_too_deep_to_parse_goes_to_the_sdk_whole(
    nesting: bytes,
) -> None:
    """Its id was looked for as it arrived (it is too large to keep), and the parse's
    RecursionError left the gate: the client got a 500, where the SDK refuses it as a parse
    error."""
    app = Reader(answers=True)
    gate = ConnectionGate(
        app, principal_of=lambda s: s.get("who"), connections=app, per_principal=4
    )
    deep = nesting * 20_000
    scope, receive = on_connection("alice", deep)
    sent, record = recorder()
    await gate(scope, receive, record)
    assert app.bodies == [deep]
    assert sent[0]["status"] == 200


class TakesItForANotification(Reader):
    """Stands in for the SDK, which takes a message with a `method` and an `id` that is no
    string or integer for a notification: answered 202, never run, never answered."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await super().__call__(scope, receive, send)
        await send({"type": "http.response.start", "status": 202, "headers": []})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def with_id(request_id: object, padding: int = 0) -> bytes:
    params = {"name": "send", "arguments": {"to": "bob", "body": "x" * padding}}
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    return json.dumps(message).encode()


@pytest.mark.parametrize("padding", [0, 40_000])
@pytest.mark.parametrize("request_id", [1.5, None, True, {"n": 1}, [1]])
async def test_a_request_whose_id_is_no_string_or_integer_is_refused_not_left_unanswered(
    request_id: object, padding: int
) -> None:
    """The SDK answered it 202, as a notification, so its client waited out its timeout for an
    answer that never came; a 2026-era request so made is refused -32600, as this is now."""
    app = TakesItForANotification(answers=False)
    gate = ConnectionGate(
        app, principal_of=lambda s: s.get("who"), connections=app, per_principal=4
    )
    scope, receive = on_connection("alice", with_id(request_id, padding))
    sent, record = recorder()
    await gate(scope, receive, record)
    assert sent[0]["status"] == 400
    body = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
    assert body["id"] is None
    assert body["error"]["code"] == -32600
    assert "id" in body["error"]["message"]


async def test_a_notification_is_still_accepted_with_202() -> None:
    app = TakesItForANotification(answers=False)
    gate = ConnectionGate(
        app, principal_of=lambda s: s.get("who"), connections=app, per_principal=4
    )
    note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
    scope, receive = on_connection("alice", note)
    sent, record = recorder()
    await gate(scope, receive, record)
    assert [m.get("status") for m in sent] == [202, None]


class RefusesWithoutASession(Reader):
    """Stands in for the SDK, which takes an opening `initialize` whose id is no string or
    integer for a notification sent without a connection, and refuses it for that."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await super().__call__(scope, receive, send)
        error = {"code": -32600, "message": "Bad Request: Missing session ID"}
        missing = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
        await send({"type": "http.response.start", "status": 400, "headers": []})
        await send({"type": "http.response.body", "body": missing, "more_body": False})


@pytest.mark.parametrize("request_id", [1.5, None, {"n": 1}])
async def test_an_opening_whose_id_no_answer_could_name_is_refused_for_its_id(
    request_id: object,
) -> None:
    """It was refused as a request that names no connection, which is what opening one is."""
    app = RefusesWithoutASession(answers=False)  # counts one connection open already
    gate = ConnectionGate(
        app, principal_of=lambda s: s.get("who"), connections=app, per_principal=2
    )
    hello = {"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": {}}
    body = json.dumps(hello).encode()

    async def receive() -> Message:
        return {"type": "http.request", "body": body, "more_body": False}

    for _ in range(2):  # the refused opening counts no more: the next one is let through
        sent, record = recorder()
        await gate(opening("alice"), receive, record)
        assert sent[0]["status"] == 400
        refusal = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
        assert refusal["error"]["code"] == -32600
        assert "session" not in refusal["error"]["message"]
        assert "id" in refusal["error"]["message"]
