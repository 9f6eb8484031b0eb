"""The wire, without a service: refusals read from any answer, and server-sent events read line
by line. Through httpx's own mock transport, so each case is one function in, one answer out."""

from __future__ import annotations

import email.utils
import json
import time

import httpx
import pytest

from agentpost.client import Client
from agentpost.client.wire import EventReader, refusal
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.events import Event


def answering(status: int, body: bytes, **headers: str | bytes) -> Client:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers=headers)

    return Client("http://agentpost.test", "ap_x", transport=httpx.MockTransport(handler))


def refused(client: Client) -> AgentpostError:
    with client, pytest.raises(AgentpostError) as caught:
        client.inbox()
    return caught.value


def error_body(code: str, message: str = "no", **extra: object) -> bytes:
    return json.dumps({"error": {"code": code, "message": message, **extra}}).encode()


def test_a_refusal_keeps_the_services_code_message_and_details() -> None:
    body = error_body("inbox_full", "bob holds 1000 messages", details={"recipient": "bob"})
    err = refused(answering(429, body, **{"Retry-After": "7"}))
    assert (err.code, err.message, err.details) == (
        ErrorCode.INBOX_FULL,
        "bob holds 1000 messages",
        {"recipient": "bob"},
    )
    assert err.retry_after_s == 7


def test_retry_after_may_be_a_date() -> None:
    when = email.utils.formatdate(time.time() + 120, usegmt=True)
    err = refused(answering(429, error_body("locked_out"), **{"Retry-After": when}))
    assert err.retry_after_s is not None
    assert 100 < err.retry_after_s <= 120


@pytest.mark.parametrize("value", [b"soon", b"\xb2", b"Fri, 32 Foo 2026"])
def test_a_retry_after_that_is_neither_seconds_nor_a_date_is_left_out(value: bytes) -> None:
    """A proxy may say anything there: the refusal is still the service's, without a wait."""
    err = refused(
        answering(429, error_body("rate_limited", retry_after_s=3), **{"Retry-After": value})
    )
    assert (err.code, err.retry_after_s) == (ErrorCode.RATE_LIMITED, 3)


def test_a_code_this_client_does_not_know_is_read_from_the_status() -> None:
    assert refused(answering(404, error_body("no_such_thing"))).code is ErrorCode.NOT_FOUND


def test_an_answer_that_is_not_agentposts_is_unavailable() -> None:
    err = refused(answering(502, b"<html>Bad Gateway</html>"))
    assert err.code is ErrorCode.UNAVAILABLE
    assert "502" in err.message
    assert refused(answering(200, b'{"not": "an inbox"}')).code is ErrorCode.UNAVAILABLE


def test_every_request_carries_the_key_and_the_session() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"blocked": []})

    transport = httpx.MockTransport(handler)
    with Client("http://agentpost.test/", "ap_secret", session="s_1", transport=transport) as c:
        c.block("#odd name")
    [request] = seen
    assert request.headers["authorization"] == "Bearer ap_secret"
    assert request.headers["agentpost-session"] == "s_1"
    assert (request.method, request.url.raw_path) == ("PUT", b"/v1/blocks/%23odd%20name")


def test_the_event_reader_follows_the_format() -> None:
    """Comments are keep-alives; data lines join with line breaks; a blank line dispatches; the
    id is the cursor to resume after; `retry` is in milliseconds."""
    reader = EventReader()
    payload = {"seq": 12, "type": "message.created", "message_id": "m_1", "at": 1.0, "data": {}}
    text = json.dumps(payload)
    lines = [": ping", "retry: 2500", "id: 12", "event: message.created"]
    lines += [f"data: {text[:10]}", f"data:{text[10:]}"]
    assert [reader.feed(line) for line in lines] == [None] * len(lines)
    assert reader.feed("") == Event(12, "message.created", "m_1", 1.0, {})
    assert (reader.cursor, reader.retry_s) == (12, 2.5)
    assert reader.feed("") is None  # a blank line with nothing pending dispatches nothing


def test_an_id_or_retry_that_is_no_ascii_number_is_ignored() -> None:
    reader = EventReader()
    for line in ["retry: 2500", "id: 12", "", "retry: ²", "id: 1²", ""]:
        assert reader.feed(line) is None
    assert (reader.cursor, reader.retry_s) == (12, 2.5)


def test_an_event_that_is_not_agentposts_is_unavailable() -> None:
    reader = EventReader()
    reader.feed("data: {not json")
    with pytest.raises(AgentpostError) as refused:
        reader.feed("")
    assert refused.value.code is ErrorCode.UNAVAILABLE


def test_a_refusal_without_a_body_is_read_from_the_status() -> None:
    err = refusal(403, {}, b"")
    assert (err.code, err.retry_after_s) == (ErrorCode.FORBIDDEN, None)
