"""Server-sent events: new mail and receipts as they happen; `Last-Event-ID` resumes with
nothing missed and nothing twice."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest

from service_process import Service

pytestmark = pytest.mark.anyio


async def read_events(client: httpx.AsyncClient, count: int, **headers: str) -> list[Any]:
    """The first `count` events of a fresh stream, as (id, event, data)."""
    found: list[Any] = []
    current: dict[str, str] = {}
    with anyio.fail_after(20):
        async with client.stream("GET", "/v1/events", headers=headers) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            async for line in stream.aiter_lines():
                if not line.strip():
                    if "data" in current:
                        found.append(
                            (int(current["id"]), current["event"], json.loads(current["data"]))
                        )
                        if len(found) == count:
                            return found
                    current = {}
                    continue
                field, _, value = line.partition(":")
                current[field] = value.strip()
    return found


async def test_a_stream_tells_of_new_mail_and_of_receipts(service: Service) -> None:
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    told: list[Any] = []

    async def listen() -> None:
        told.extend(await read_events(alice, 2, **{"Last-Event-ID": "0"}))

    async with anyio.create_task_group() as group:
        group.start_soon(listen)
        sent = (await alice.post("/v1/messages", json={"to": "bob", "body": "hi"})).json()
        await bob.get("/v1/inbox")
        await bob.post("/v1/inbox/ack", json={"ids": [sent["id"]]})
    assert [event for _, event, _ in told] == ["message.read", "message.acked"]
    assert {data["message_id"] for _, _, data in told} == {sent["id"]}


async def test_last_event_id_resumes_with_nothing_missed(service: Service) -> None:
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    for n in range(3):
        await alice.post("/v1/messages", json={"to": "bob", "body": f"m{n}"})
    everything = await read_events(bob, 3, **{"Last-Event-ID": "0"})
    assert [e for _, e, _ in everything] == ["message.created"] * 3
    first_id = everything[0][0]
    resumed = await read_events(bob, 2, **{"Last-Event-ID": str(first_id)})
    assert [i for i, _, _ in resumed] == [i for i, _, _ in everything[1:]]


async def test_a_stream_without_a_cursor_says_where_it_starts(service: Service) -> None:
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    await alice.post("/v1/messages", json={"to": "bob", "body": "before the stream"})
    before = await read_events(bob, 1, **{"Last-Event-ID": "0"})
    with anyio.fail_after(20):
        async with bob.stream("GET", "/v1/events") as stream:
            lines = stream.aiter_lines()
            first = [await anext(lines), await anext(lines)]
    assert f"id: {before[0][0]}" in first  # the start, with no data: nothing is replayed
    await alice.post("/v1/messages", json={"to": "bob", "body": "after"})
    (resumed,) = await read_events(bob, 1, **{"Last-Event-ID": str(before[0][0])})
    assert resumed[0] > before[0][0]


@pytest.mark.parametrize("cursor", [b"abc", b"-1", b"\xb2", b"1\xb9"])
async def test_a_last_event_id_that_is_no_ascii_number_is_an_invalid_argument(
    service: Service, cursor: bytes
) -> None:
    """Latin-1 digits ("²", "¹") included: `int` refuses them, so they must not reach it."""
    bob = await service.agent("bob")
    answer = await bob.get("/v1/events", headers={"Last-Event-ID": cursor})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "invalid_argument"


async def test_a_stream_ends_cleanly_when_the_server_stops(service: Service) -> None:
    """The stream's body is finished (no cut-off chunked read for the client, no error in the
    server's log), so a client sees an end and resumes with its Last-Event-ID elsewhere."""
    bob = await service.agent("bob")
    with anyio.fail_after(20):
        async with bob.stream("GET", "/v1/events") as stream:
            lines = stream.aiter_lines()
            assert (await anext(lines)).startswith(":")
            await service.stop()
            rest = [line async for line in lines]  # a cut-off body raises here
    assert all(not line.startswith("data:") for line in rest)
    assert b"without completing response" not in service.log.read_bytes()


async def test_a_last_event_id_past_every_event_resumes_at_the_newest_missing_nothing(
    service: Service,
) -> None:
    """A cursor this log never handed out (another post office's, or a database started
    afresh) must not leave the stream silent until the ids reach it some day."""
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    await alice.post("/v1/messages", json={"to": "bob", "body": "before the stream"})
    (before,) = await read_events(bob, 1, **{"Last-Event-ID": "0"})
    told: list[Any] = []
    with anyio.fail_after(20):
        async with bob.stream("GET", "/v1/events", headers={"Last-Event-ID": "9" * 18}) as stream:
            lines = stream.aiter_lines()
            first = [await anext(lines), await anext(lines)]
            sent = (await alice.post("/v1/messages", json={"to": "bob", "body": "after"})).json()
            async for line in lines:
                if line.startswith("data:"):
                    told.append(json.loads(line.partition(":")[2]))
                    break
    assert f"id: {before[0]}" in first  # where the stream starts: the newest event there is
    assert [event["message_id"] for event in told] == [sent["id"]]
