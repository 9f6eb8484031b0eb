"""`events()`: the server-sent event stream as an iterator of domain events that resumes after
the last event it yielded, across a dropped connection and a restarted service. Against the real
service, and (last) against httpx's mock transport where a drop must come at an exact moment."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import aclosing, asynccontextmanager

import anyio
import httpx
import pytest
from anyio.abc import ObjectReceiveStream

from agentpost.client import AsyncClient, Client
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.events import Event
from remote_office import Office

pytestmark = pytest.mark.anyio

WAKE_S = 20
"""How long a test waits for what should take milliseconds (a restart takes a few seconds)."""


@asynccontextmanager
async def following(
    client: AsyncClient, after: int | None = None
) -> AsyncIterator[ObjectReceiveStream[Event | AgentpostError]]:
    """The client's events, followed in a task; a refusal that ends the stream comes last."""
    send, receive = anyio.create_memory_object_stream[Event | AgentpostError](100)

    async def follow() -> None:
        async with send:
            try:
                async with aclosing(client.events(after=after)) as events:
                    async for event in events:
                        await send.send(event)
            except AgentpostError as err:
                await send.send(err)

    async with receive, anyio.create_task_group() as group:
        group.start_soon(follow)
        yield receive
        group.cancel_scope.cancel()


async def next_event(events: ObjectReceiveStream[Event | AgentpostError]) -> Event:
    with anyio.fail_after(WAKE_S):
        found = await events.receive()
    assert isinstance(found, Event), found
    return found


async def test_new_mail_and_receipts_arrive_as_events(office: Office) -> None:
    alice, bob = await office.agent("alice"), await office.agent("bob")
    async with following(bob, after=0) as bobs, following(alice, after=0) as alices:
        sent = await alice.send("bob", "hello")
        created = await next_event(bobs)
        assert (created.type, created.message_id) == ("message.created", sent.id)
        await bob.inbox()
        await bob.ack([sent.id])
        receipts = [await next_event(alices), await next_event(alices)]
    assert [(e.type, e.message_id) for e in receipts] == [
        ("message.read", sent.id),
        ("message.acked", sent.id),
    ]
    assert receipts[0].data["to"] == "bob"


async def test_a_stream_without_a_cursor_starts_now(office: Office) -> None:
    alice, bob = await office.agent("alice"), await office.agent("bob")
    before = await alice.send("bob", "before the stream")
    async with following(bob) as bobs:
        sent: list[str] = []
        with anyio.fail_after(WAKE_S):
            while True:  # the stream is open once it tells of mail sent after it
                sent.append((await alice.send("bob", f"ping {len(sent)}")).id)
                with anyio.move_on_after(0.2):
                    first = await next_event(bobs)
                    break
    assert first.message_id in sent
    assert first.message_id != before.id


async def test_a_stream_resumes_after_a_cursor_with_nothing_missed(office: Office) -> None:
    alice, bob = await office.agent("alice"), await office.agent("bob")
    ids = [(await alice.send("bob", f"note {n}")).id for n in range(3)]
    async with following(bob, after=0) as bobs:
        first = await next_event(bobs)
    assert first.message_id == ids[0]
    async with following(bob, after=first.seq) as bobs:
        rest = [await next_event(bobs), await next_event(bobs)]
    assert [e.message_id for e in rest] == ids[1:]
    assert rest[0].seq > first.seq


async def test_a_stream_reconnects_after_a_restart_and_misses_nothing(office: Office) -> None:
    alice, bob = await office.agent("alice"), await office.agent("bob")
    async with following(bob, after=0) as bobs:
        first = await alice.send("bob", "before the restart")
        assert (await next_event(bobs)).message_id == first.id
        await office.service.restart()
        during = await alice.send("bob", "while the stream was away")
        after = await alice.send("bob", "after it came back")
        found = [await next_event(bobs), await next_event(bobs)]
    assert [e.message_id for e in found] == [during.id, after.id]


async def test_a_revoked_key_ends_the_stream_with_its_refusal(office: Office) -> None:
    key = await office.new_key("alice")
    alice = office.client(key)
    [info] = await office.admin.admin_list_keys("alice")
    await office.admin.admin_revoke_key(info.id)
    async with following(alice, after=0) as alices:
        with anyio.fail_after(WAKE_S):
            ended = await alices.receive()
    assert isinstance(ended, AgentpostError)
    assert ended.code is ErrorCode.UNAUTHENTICATED


async def test_the_blocking_client_follows_events_too(office: Office) -> None:
    alice = await office.agent("alice")
    key = await office.new_key("bob")
    sent = await alice.send("bob", "for the script")

    def first_event() -> Event:
        with Client(office.url, key) as bob:
            events = bob.events(after=0)
            try:
                return next(events)
            finally:
                events.close()

    with anyio.fail_after(WAKE_S):
        event = await anyio.to_thread.run_sync(first_event)
    assert (event.type, event.message_id) == ("message.created", sent.id)


# -- through httpx's mock transport: a drop at a chosen moment -----------------------------------

OPENING = b"retry: 1\nid: 41\n\n"
"""What the service sends first on a stream opened without a cursor: where "now" is."""
LATER = b'id: 42\ndata: {"seq": 42, "type": "message.created", "message_id": "m_2", "at": 1}\n\n'


class _Dropping(httpx.AsyncByteStream, httpx.SyncByteStream):
    """The opening, then the connection drops."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield OPENING
        raise httpx.ReadError("dropped")

    def __iter__(self) -> Iterator[bytes]:
        yield OPENING
        raise httpx.ReadError("dropped")


STREAM = {"Content-Type": "text/event-stream; charset=utf-8"}
"""What the service says its event stream is."""


def streams(cursors: list[str | None]) -> Callable[[httpx.Request], httpx.Response]:
    """The first stream drops after its opening; the next tells of the event after the opening,
    if asked to resume there. Each stream's Last-Event-ID is kept in `cursors`."""

    def handler(request: httpx.Request) -> httpx.Response:
        cursors.append(request.headers.get("last-event-id"))
        if len(cursors) == 1:
            return httpx.Response(200, stream=_Dropping(), headers=STREAM)
        if cursors[-1] == "41":
            return httpx.Response(200, content=LATER, headers=STREAM)
        # Resumed from anywhere else, it ends here rather than try again forever.
        return httpx.Response(401, json={"error": {"code": "unauthenticated", "message": "?"}})

    return handler


async def test_a_stream_dropped_before_its_first_event_resumes_from_its_opening() -> None:
    """Opened without a cursor, it starts "now": mail that came while it was away is told."""
    cursors: list[str | None] = []
    transport = httpx.MockTransport(streams(cursors))
    async with (
        AsyncClient("http://agentpost.test", "ap_x", transport=transport) as bob,
        aclosing(bob.events()) as events,
    ):
        with anyio.fail_after(WAKE_S):
            event = await anext(events)
    assert (cursors[:2], event.message_id) == ([None, "41"], "m_2")


async def test_a_cursor_the_service_moved_back_is_where_a_dropped_stream_resumes() -> None:
    """The service starts a stream given a cursor past every event at its newest event (41):
    after a drop, resuming at the old cursor would start at the newest again, and miss what
    came while the stream was away."""
    cursors: list[str | None] = []
    transport = httpx.MockTransport(streams(cursors))
    async with (
        AsyncClient("http://agentpost.test", "ap_x", transport=transport) as bob,
        aclosing(bob.events(after=999)) as events,
    ):
        with anyio.fail_after(WAKE_S):
            event = await anext(events)
    assert (cursors[:2], event.message_id) == (["999", "41"], "m_2")


def test_the_blocking_client_resumes_where_the_service_moved_its_cursor_too() -> None:
    cursors: list[str | None] = []
    transport = httpx.MockTransport(streams(cursors))
    with Client("http://agentpost.test", "ap_x", transport=transport) as bob:
        events = bob.events(after=999)
        try:
            event = next(events)
        finally:
            events.close()
    assert (cursors[:2], event.message_id) == (["999", "41"], "m_2")


def test_the_blocking_client_resumes_from_the_opening_too() -> None:
    cursors: list[str | None] = []
    transport = httpx.MockTransport(streams(cursors))
    with Client("http://agentpost.test", "ap_x", transport=transport) as bob:
        events = bob.events()
        try:
            event = next(events)
        finally:
            events.close()
    assert (cursors[:2], event.message_id) == ([None, "41"], "m_2")


async def test_each_new_cursor_is_told_the_streams_opening_first() -> None:
    """A caller that opens the stream again itself (after a refusal, which raises) needs where
    the last one was: the opening's cursor when no event came."""
    told: list[int] = []
    transport = httpx.MockTransport(streams([]))
    async with (
        AsyncClient("http://agentpost.test", "ap_x", transport=transport) as bob,
        aclosing(bob.events(on_cursor=told.append)) as events,
    ):
        with anyio.fail_after(WAKE_S):
            await anext(events)
    assert told == [41, 42]


def test_the_blocking_client_tells_each_new_cursor_too() -> None:
    told: list[int] = []
    transport = httpx.MockTransport(streams([]))
    with Client("http://agentpost.test", "ap_x", transport=transport) as bob:
        events = bob.events(on_cursor=told.append)
        try:
            next(events)
        finally:
            events.close()
    assert told == [41, 42]
