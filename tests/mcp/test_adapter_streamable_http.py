"""`ConnectionGate`, the door in front of the SDK's 2025-era connections, called as ASGI in
process: here a test decides when a handler's task comes back, which a real server under load
decides by chance (the end to end cases are in test_http_service.py)."""

from __future__ import annotations

import anyio
import pytest
from starlette.types import Message, Receive, Scope, Send

from agentpost.mcp.adapter.streamable_http import ConnectionGate

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def opening(principal: str) -> Scope:
    """A 2025-era `initialize`: a POST without a connection id, by `principal`."""
    return {"type": "http", "method": "POST", "headers": [], "state": {"who": principal}}


async def nothing_sent() -> Message:
    return {"type": "http.disconnect"}


class SlowToReturn:
    """Stands in for the SDK: takes each `initialize` (the connection is open from then on),
    answers it, and has its task come back only once `release` is set."""

    def __init__(self) -> None:
        self.open: list[str] = []
        self.release = anyio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.open.append(scope["state"]["who"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}", "more_body": False})
        await self.release.wait()


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
    gate = ConnectionGate(
        app,
        principal_of=lambda state: state.get("who"),
        open_connections=app.open.count,
        per_principal=2,
    )
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
    assert app.open == ["alice", "alice"]


async def test_an_opening_still_in_flight_counts_against_the_bound() -> None:
    """Before the SDK has taken it, an opening request is counted by the gate alone."""
    held = anyio.Event()

    async def unanswered(scope: Scope, receive: Receive, send: Send) -> None:
        await held.wait()

    gate = ConnectionGate(
        unanswered,
        principal_of=lambda state: state.get("who"),
        open_connections=lambda principal: 0,
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
