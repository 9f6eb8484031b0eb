"""Abuse limits over REST: each one refuses with its code and status, and changes nothing;
the ones that must outlive the process (rate windows, idempotency keys) do."""

from __future__ import annotations

import contextlib
import json
from functools import partial
from pathlib import Path

import anyio
import httpx
import pytest

from agentpost.service import MAX_ARRIVING_PER_ADDRESS
from rate_window import inside_one_rate_window
from service_process import Service, eventually, running_service

pytestmark = pytest.mark.anyio


async def test_a_retried_send_with_the_same_idempotency_key_is_stored_once_across_a_restart(
    service: Service,
) -> None:
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    headers = {"Idempotency-Key": "order-42"}
    first = await alice.post("/v1/messages", json={"to": "bob", "body": "x"}, headers=headers)
    await service.restart()
    again = await alice.post("/v1/messages", json={"to": "bob", "body": "x"}, headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.json()["id"] == first.json()["id"]
    assert len((await bob.get("/v1/inbox")).json()["messages"]) == 1


async def test_a_different_body_under_the_same_idempotency_key_is_a_conflict(
    service: Service,
) -> None:
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    headers = {"Idempotency-Key": "order-42"}
    await alice.post("/v1/messages", json={"to": "bob", "body": "x"}, headers=headers)
    other = await alice.post("/v1/messages", json={"to": "bob", "body": "y"}, headers=headers)
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "conflict"
    assert [m["body"] for m in (await bob.get("/v1/inbox")).json()["messages"]] == ["x"]


async def test_sends_over_the_rate_are_refused_with_retry_after_across_a_restart(
    tmp_path: Path,
) -> None:
    async with running_service(tmp_path, {"AGENTPOST_SEND_RATE_PER_MINUTE": "2"}) as service:
        alice = await service.agent("alice")
        await service.create_agent("bob")
        await inside_one_rate_window(needed_s=30)  # the restart must not reach the next minute
        for _ in range(2):
            ok = await alice.post("/v1/messages", json={"to": "bob", "body": "x"})
            assert ok.status_code == 201
        await service.restart()
        refused = await alice.post("/v1/messages", json={"to": "bob", "body": "x"})
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "rate_limited"
        assert 1 <= int(refused.headers["Retry-After"]) <= 60


async def test_a_request_body_over_the_limit_is_too_large(tmp_path: Path) -> None:
    async with running_service(tmp_path, {"AGENTPOST_MAX_REQUEST_BYTES": "4096"}) as service:
        alice = await service.agent("alice")
        bob = await service.agent("bob")
        big = await alice.post("/v1/messages", json={"to": "bob", "body": "x" * 5000})
        assert big.status_code == 413
        assert big.json()["error"]["code"] == "too_large"

        async def chunks():  # type: ignore[no-untyped-def]
            yield b'{"to": "bob", "body": "'
            for _ in range(10):
                yield b"y" * 1000
            yield b'"}'

        streamed = await alice.post(
            "/v1/messages", content=chunks(), headers={"Content-Type": "application/json"}
        )
        assert streamed.status_code == 413
        assert (await bob.get("/v1/inbox")).json()["messages"] == []


async def test_a_body_over_max_body_bytes_is_too_large(service: Service) -> None:
    alice = await service.agent("alice")
    await service.create_agent("bob")
    answer = await alice.post("/v1/messages", json={"to": "bob", "body": "é" * 20000})
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "too_large"


async def test_a_body_longer_than_its_announced_length_is_not_taken_in(tmp_path: Path) -> None:
    """The guard trusts a Content-Length within the limit: HTTP/1.1 reads no more body than
    that, and what follows is read as another request."""
    async with running_service(tmp_path, {"AGENTPOST_MAX_REQUEST_BYTES": "4096"}) as service:
        key = await service.create_agent("alice")
        bob = await service.agent("bob")
        body = json.dumps({"to": "bob", "body": "y" * 20000}).encode()
        head = (
            f"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
            "Content-Type: application/json\r\nContent-Length: 40\r\n\r\n"
        )
        async with await anyio.connect_tcp("127.0.0.1", service.port) as stream:
            await stream.send(head.encode() + body)
            answer = b""
            with anyio.fail_after(10):
                while b"\r\n\r\n" not in answer:
                    answer += await stream.receive()
        assert answer.startswith(b"HTTP/1.1 4")  # the first 40 bytes are no message
        assert (await bob.get("/v1/inbox")).json()["messages"] == []


async def raw_exchange(port: int, request: bytes) -> bytes:
    """Write `request` on a fresh connection; everything the server answers until it closes."""
    answer = b""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await stream.send(request)
        with anyio.fail_after(10), contextlib.suppress(anyio.EndOfStream, OSError):
            while True:
                answer += await stream.receive()
    return answer


async def test_a_request_head_over_64_kib_is_refused_before_anything_reads_it(
    service: Service,
) -> None:
    """No key is needed to send headers: without a bound, one connection filled the memory.
    The server answers 431 and closes; a client still writing may see the close as a reset."""
    chunk, most = b"a" * 65536, 64 << 20
    sent, answer = 0, b""
    async with await anyio.connect_tcp("127.0.0.1", service.port) as stream:
        try:
            await stream.send(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Filler: ")
            while sent < most:
                await stream.send(chunk)
                sent += len(chunk)
            with anyio.fail_after(10):
                answer = await stream.receive()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError):
            pass
    assert sent < 16 << 20, "the server read on past the bound"
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431 ")

    ordinary = "a" * 32_000  # large, but a head of fewer than 64 KiB
    assert (await service.client().get("/health", headers={"X-Filler": ordinary})).is_success


async def test_a_head_over_64_kib_sent_in_one_write_is_refused(service: Service) -> None:
    """A client sends its head at once, and the server may read all of it in one go: the
    bound holds for a head that ends in the same read that takes it past 64 KiB."""
    filler = b"".join(b"X-Filler-%d: %s\r\n" % (i, b"a" * 1000) for i in range(100))
    request = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + filler + b"\r\n"
    assert 64 * 1024 < len(request) < 128 * 1024
    answer = await raw_exchange(service.port, request)
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert b"200 OK" not in answer


async def test_a_body_arriving_with_its_head_is_not_counted_as_head(service: Service) -> None:
    key = await service.create_agent("alice")
    await service.create_agent("bob")
    body = json.dumps({"to": "bob", "body": "y" * 200_000}).encode()  # under the request limit
    head = (
        f"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    answer = await raw_exchange(service.port, head.encode() + body)
    assert answer.startswith(b"HTTP/1.1 413 ")  # the body was read, and is over max_body_bytes
    assert b'"too_large"' in answer


async def test_a_full_inbox_refuses_direct_mail_with_429(tmp_path: Path) -> None:
    async with running_service(tmp_path, {"AGENTPOST_MAX_UNACKED": "1"}) as service:
        alice = await service.agent("alice")
        await service.create_agent("bob")
        assert (
            await alice.post("/v1/messages", json={"to": "bob", "body": "1"})
        ).status_code == 201
        full = await alice.post("/v1/messages", json={"to": "bob", "body": "2"})
        assert full.status_code == 429
        assert full.json()["error"]["code"] == "inbox_full"
        assert "Retry-After" in full.headers


async def test_joining_past_max_channels_per_agent_is_a_409_conflict(tmp_path: Path) -> None:
    async with running_service(tmp_path, {"AGENTPOST_MAX_CHANNELS_PER_AGENT": "1"}) as service:
        alice = await service.agent("alice")
        assert (await alice.put("/v1/channels/ops/members/me")).status_code == 200
        refused = await alice.put("/v1/channels/release/members/me")
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "conflict"
        assert refused.json()["error"]["details"] == {"limit": 1}
        listed = (await alice.get("/v1/channels")).json()["channels"]
        assert [c["name"] for c in listed if not c["implicit"]] == ["#ops"]
        assert (await alice.put("/v1/channels/general/members/me")).status_code == 200


async def test_the_owner_sets_one_agents_channel_cap_over_rest(service: Service) -> None:
    alice = await service.agent("alice")
    limits = await service.admin.put(
        "/v1/admin/agents/alice/limits", json={"max_channels_per_agent": 1}
    )
    assert limits.json() == {
        "agent": "alice",
        "send_rate_per_minute": 60,
        "max_unacked": 1000,
        "max_channels_per_agent": 1,
        "max_open_tasks_per_agent": 200,
    }
    assert (await alice.put("/v1/channels/ops/members/me")).status_code == 200
    refused = await alice.put("/v1/channels/release/members/me")
    assert refused.status_code == 409
    assert refused.json()["error"]["details"] == {"limit": 1}


async def test_the_owner_sets_one_agents_open_task_cap_over_rest(service: Service) -> None:
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    limits = await service.admin.put(
        "/v1/admin/agents/alice/limits", json={"max_open_tasks_per_agent": 1}
    )
    assert limits.json()["max_open_tasks_per_agent"] == 1
    first = await alice.post("/v1/tasks", json={"to": "bob", "title": "One"})
    assert first.status_code == 201
    refused = await alice.post("/v1/tasks", json={"to": "bob", "title": "Two"})
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "conflict"
    assert refused.json()["error"]["details"] == {"limit": 1}
    assert [t["title"] for t in (await bob.get("/v1/tasks")).json()["tasks"]] == ["One"]
    assert (await bob.post("/v1/tasks", json={"to": "alice", "title": "Back"})).status_code == 201
    done = await bob.patch(f"/v1/tasks/{first.json()['id']}", json={"status": "done"})
    assert done.status_code == 200
    again = await alice.post("/v1/tasks", json={"to": "bob", "title": "Two"})
    assert again.status_code == 201


async def test_an_unknown_recipient_is_404(service: Service) -> None:
    alice = await service.agent("alice")
    answer = await alice.post("/v1/messages", json={"to": "nobody", "body": "x"})
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "unknown_recipient"


async def test_an_unknown_route_answers_in_the_error_shape(service: Service) -> None:
    alice = await service.agent("alice")
    answer = await alice.get("/v1/nothing-here")
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "not_found"


async def test_a_blocked_senders_mail_is_dropped_silently(service: Service) -> None:
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    assert (await bob.put("/v1/blocks/alice")).json() == {"blocked": ["alice"]}
    sent = await alice.post("/v1/messages", json={"to": "bob", "body": "spam"})
    assert sent.status_code == 201
    assert (await bob.get("/v1/inbox")).json()["messages"] == []
    await bob.delete("/v1/blocks/alice")
    await alice.post("/v1/messages", json={"to": "bob", "body": "hi"})
    assert [m["body"] for m in (await bob.get("/v1/inbox")).json()["messages"]] == ["hi"]


async def test_the_owner_cannot_block_its_own_mail_to_an_agent(service: Service) -> None:
    """The owner's word to an agent dropped silently, by the owner's own hand, makes no
    sense: an agent cannot block the owner either."""
    bob = await service.agent("bob")
    refused = await service.admin.put("/v1/admin/blocks/bob/owner")
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "forbidden"
    await service.admin.post("/v1/messages", json={"to": "bob", "body": "stop that"})
    assert [m["body"] for m in (await bob.get("/v1/inbox")).json()["messages"]] == ["stop that"]
    assert (await service.admin.delete("/v1/admin/blocks/bob/owner")).status_code == 200


async def test_every_send_is_audited_without_its_body(service: Service) -> None:
    alice = await service.agent("alice")
    await service.create_agent("bob")
    await alice.post("/v1/messages", json={"to": "bob", "body": "private words"})
    entries = (await service.admin.get("/v1/admin/audit", params={"actor": "alice"})).json()
    sends = [e for e in entries["entries"] if e["action"] == "message.sent"]
    assert len(sends) == 1
    assert "private words" not in str(sends[0])


async def test_an_agent_holds_at_most_max_open_waits_and_another_agent_is_not_held_up(
    tmp_path: Path,
) -> None:
    """Each wait or event stream held open costs the process a connection and a task: a key
    opening them without end would run it out for everyone."""
    async with running_service(tmp_path, {"AGENTPOST_MAX_OPEN_WAITS": "2"}) as service:
        key = await service.create_agent("alice")
        bob = await service.agent("bob")
        holder = service.client(key)  # its own connections, closed below: a hang-up
        alice = service.client(key)

        async def first_wait_answered(status: int) -> httpx.Response:
            while True:  # the held waits register, or end, within moments
                answer = await alice.get("/v1/inbox/wait", params={"timeout_s": 0})
                if answer.status_code == status:
                    return answer
                await anyio.sleep(0.05)

        async with anyio.create_task_group() as tg:
            for _ in range(2):
                tg.start_soon(partial(holder.get, "/v1/inbox/wait", params={"timeout_s": 30}))
            third = await first_wait_answered(429)
            assert third.json()["error"]["code"] == "rate_limited"
            assert third.json()["error"]["details"] == {"limit": 2}
            assert int(third.headers["Retry-After"]) >= 1
            stream = await alice.get("/v1/events")
            assert (stream.status_code, stream.json()["error"]["code"]) == (429, "rate_limited")
            # Another agent waits as before.
            assert (await bob.get("/v1/inbox/wait", params={"timeout_s": 0})).status_code == 200
            tg.cancel_scope.cancel()
        await holder.aclose()  # the held waits' client hangs up: they end, making room
        assert (await first_wait_answered(200)).json()["timed_out"] is True


async def test_event_streams_opened_at_once_are_refused_before_they_open_or_not_at_all(
    tmp_path: Path,
) -> None:
    """Room is looked for before a stream opens: two opened together may both find it, and
    then both stream. None may open and then end with an error event, which a client reads
    as its key refused."""
    async with running_service(tmp_path, {"AGENTPOST_MAX_OPEN_WAITS": "1"}) as service:
        key = await service.create_agent("alice")
        answers: list[tuple[int, str]] = []

        async def open_stream(client: httpx.AsyncClient) -> None:
            async with client.stream("GET", "/v1/events") as stream:
                text = ""
                # The opening id, and an error event if one came: it would come at once.
                with anyio.move_on_after(1):
                    async for chunk in stream.aiter_text():
                        text += chunk
                answers.append((stream.status_code, text))

        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(open_stream, service.client(key))
        assert {status for status, _ in answers} <= {200, 429}
        assert 200 in {status for status, _ in answers}
        assert [text for status, text in answers if "event: error" in text] == []


async def test_a_request_that_does_not_arrive_in_time_is_cut_and_others_are_served(
    tmp_path: Path,
) -> None:
    """No key is needed to open a connection and trickle a head, or send nothing: each such
    connection was held for good, and a client holding a thousand of them (the usual file
    limit) shut everyone out, the owner too. A request arrives whole within
    `request_timeout_s` of its first byte (of the connection's opening, for the first one),
    else it is answered 408 and its connection closes."""
    async with running_service(tmp_path, {"AGENTPOST_REQUEST_TIMEOUT_S": "1"}) as service:
        answers: dict[str, bytes] = {}

        async def read(name: str, stream: anyio.abc.ByteStream) -> None:
            answer = b""
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                while True:
                    answer += await stream.receive()
            answers[name] = answer

        async def trickle(stream: anyio.abc.ByteStream) -> None:
            await stream.send(b"GET /v1/me HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            with contextlib.suppress(anyio.BrokenResourceError, OSError):
                while "trickling" not in answers:  # a header now and then, never the end
                    await anyio.sleep(0.2)
                    await stream.send(b"X-More: a\r\n")

        async with (
            await anyio.connect_tcp("127.0.0.1", service.port) as silent,
            await anyio.connect_tcp("127.0.0.1", service.port) as trickling,
        ):
            began = anyio.current_time()
            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(trickle, trickling)
                    tg.start_soon(read, "trickling", trickling)
                    tg.start_soon(read, "silent", silent)
            assert anyio.current_time() - began < 5
        assert {name: a.split(b"\r\n")[0] for name, a in answers.items()} == {
            "silent": b"HTTP/1.1 408 Request Timeout",
            "trickling": b"HTTP/1.1 408 Request Timeout",
        }
        # A request that arrives in time is served, on a connection kept alive past the limit.
        owner = service.admin
        assert (await owner.get("/v1/me")).status_code == 200
        await anyio.sleep(1.5)
        assert (await owner.get("/v1/me")).status_code == 200


async def test_a_later_request_on_a_kept_alive_connection_is_cut_in_its_own_time(
    tmp_path: Path,
) -> None:
    """A kept-alive connection's next request is timed from its own first byte: the timer a
    connection keeps, due at the deadline of the request before, waits on for this one's, so
    it is neither cut early nor let trickle for good."""
    async with running_service(tmp_path, {"AGENTPOST_REQUEST_TIMEOUT_S": "1"}) as service:
        health = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        async with await anyio.connect_tcp("127.0.0.1", service.port) as stream:
            await stream.send(health + b"\r\n")
            first = b""
            with anyio.fail_after(5):
                while b"\r\n\r\n" not in first:
                    first += await stream.receive()
            assert first.startswith(b"HTTP/1.1 200 ")
            await anyio.sleep(0.6)  # begun well before the first request's deadline
            began = anyio.current_time()
            await stream.send(health)  # never ends
            answer = b""
            with (
                anyio.fail_after(5),
                contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError),
            ):
                while True:
                    answer += await stream.receive()
            took = anyio.current_time() - began
        answer = answer[answer.find(b"HTTP/1.1 408") :]  # after the rest of the first answer
        assert answer.split(b"\r\n")[0] == b"HTTP/1.1 408 Request Timeout"
        assert 0.9 <= took < 3


async def test_an_address_holds_a_bounded_number_of_requests_still_arriving(
    tmp_path: Path,
) -> None:
    """Cut after `request_timeout_s`, unfinished requests still took every file of the server
    for a client that opened them faster: an address has at most MAX_ARRIVING_PER_ADDRESS
    requests arriving at once, and its next connection closes as it opens. A burst of
    requests that arrive at once is served."""
    async with running_service(tmp_path, {"AGENTPOST_REQUEST_TIMEOUT_S": "60"}) as service:
        quick = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        answers: list[bytes] = []

        async def ask() -> None:
            answers.append(await raw_exchange(service.port, quick))

        async with anyio.create_task_group() as tg:
            for _ in range(100):
                tg.start_soon(ask)
        assert {a.split(b"\r\n")[0] for a in answers} == {b"HTTP/1.1 200 OK"}

        async with contextlib.AsyncExitStack() as held:
            for _ in range(MAX_ARRIVING_PER_ADDRESS):
                stream = await anyio.connect_tcp("127.0.0.1", service.port)
                await held.enter_async_context(stream)
                await stream.send(b"GET /health HTTP/1.1\r\n")
            with anyio.fail_after(10):  # well before the 60 s they may take
                try:
                    answer = await raw_exchange(service.port, quick)
                except anyio.BrokenResourceError:  # reset as it opened
                    answer = b""
            assert answer == b""

        async def served() -> bool:
            try:
                return (await service.client().get("/health")).status_code == 200
            except httpx.TransportError:
                return False

        await eventually(served)  # they closed: the address is served again


async def test_a_ttl_past_a_year_is_refused_naming_the_bound_and_sends_nothing(
    service: Service,
) -> None:
    """`1e300` was taken and stored as the message's expiry, where a reservation's TTL and a
    task's due are bounded."""
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    answer = await alice.post("/v1/messages", json={"to": "bob", "body": "x", "ttl_s": 1e300})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_argument"
    assert error["message"] == "ttl_s is a number of seconds above 0 and at most 31536000"
    assert (await bob.get("/v1/inbox")).json()["messages"] == []
    year = {"to": "bob", "body": "x", "ttl_s": 365 * 86_400}
    assert (await alice.post("/v1/messages", json=year)).status_code == 201


async def test_a_query_over_its_length_is_too_large_in_the_directory_as_in_search(
    service: Service,
) -> None:
    """The directory's `q` over 200 was a 400 `invalid_argument`, search's over 500 a 413
    `too_large`: a field over its limit is `too_large` (DESIGN's table), both ways."""
    alice = await service.agent("alice")
    for path, limit, at_limit in (
        ("/v1/agents", 200, "a" * 100 + " " + "b" * 99),
        ("/v1/search", 500, "a" * 500),
    ):
        answer = await alice.get(path, params={"q": at_limit + "c"})
        assert answer.status_code == 413, (path, answer.text)
        error = answer.json()["error"]
        assert error["code"] == "too_large"
        assert error["details"] == {"limit": limit, "size": limit + 1}
        assert (await alice.get(path, params={"q": at_limit})).status_code == 200
