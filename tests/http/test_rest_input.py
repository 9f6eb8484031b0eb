"""Hostile input over REST: JSON that Python can decode but nothing can store or answer with
(half a surrogate pair, data nested past what a serializer takes) is refused as
`invalid_argument` on every route, changes nothing, and leaves every reader working."""

from __future__ import annotations

import gzip
import json
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from agentpost.domain.limits import MAX_DATA_DEPTH
from agentpost.http.app import build_rest_app
from agentpost.http.routing import UnicodeJsonRoute
from agentpost.services import PostOffice
from service_process import Service, running_service

pytestmark = pytest.mark.anyio

HALF_PAIR = "\ud800"


def nested(depth: int) -> object:
    value: object = "deep"
    for _ in range(depth):
        value = {"k": [value]}
    return value


async def send_json(
    client: httpx.AsyncClient, method: str, path: str, body: dict[str, Any]
) -> httpx.Response:
    """`body` as JSON the way any client may write it: non-ASCII as `\\uXXXX` escapes (httpx's
    own encoder could not write half a surrogate pair at all)."""
    content = json.dumps(body).encode("ascii")
    headers = {"Content-Type": "application/json"}
    return await client.request(method, path, content=content, headers=headers)


def refused_as_invalid(answer: httpx.Response) -> None:
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "invalid_argument"


def table_counts(home: Path) -> dict[str, int]:
    db = sqlite3.connect(f"file:{home / 'agentpost.db'}?mode=ro", uri=True)
    try:
        tables = [
            name
            for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if name not in ("audit", "rate_windows", "sqlite_sequence", "lockouts")
            and not name.startswith("messages_fts")
        ]
        return {t: db.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}
    finally:
        db.close()


async def test_half_a_surrogate_pair_in_any_body_is_refused_and_changes_nothing(
    service: Service,
) -> None:
    alice = await service.agent("alice")
    await service.create_agent("bob")
    assert (await alice.post("/v1/messages", json={"to": "bob", "body": "x"})).status_code == 201
    before = table_counts(service.home)
    posts: list[tuple[str, str, dict[str, Any]]] = [
        ("POST", "/v1/messages", {"to": "bob", "body": HALF_PAIR}),
        ("POST", "/v1/messages", {"to": "bob", "body": "x", "subject": HALF_PAIR}),
        ("POST", "/v1/messages", {"to": "bob", "body": "x", "data": {"a": HALF_PAIR}}),
        ("POST", "/v1/messages", {"to": "bob", "body": "x", "data": {HALF_PAIR: 1}}),
        ("POST", "/v1/messages", {"to": HALF_PAIR, "body": "x"}),
        ("PATCH", "/v1/me", {"capabilities": [HALF_PAIR]}),
        ("PATCH", "/v1/me", {"description": HALF_PAIR}),
        ("PATCH", "/v1/me", {"objective": HALF_PAIR}),
        ("POST", "/v1/tasks", {"to": "bob", "title": HALF_PAIR}),
        ("POST", "/v1/requests", {"to": "bob", "question": HALF_PAIR, "timeout_s": 0}),
        ("POST", "/v1/sessions", {"objective": HALF_PAIR}),
        ("POST", "/v1/webhooks", {"url": "http://127.0.0.1:9/h", "events": [HALF_PAIR]}),
        ("POST", "/v1/inbox/ack", {"ids": [HALF_PAIR]}),
        ("POST", "/v1/reservations", {"paths": [HALF_PAIR]}),
    ]
    for method, path, body in posts:
        refused_as_invalid(await send_json(alice, method, path, body))
    carol = {"name": "carol", "description": "\udfff"}
    refused_as_invalid(await send_json(service.admin, "POST", "/v1/admin/agents", carol))

    assert table_counts(service.home) == before
    assert (await alice.get("/v1/agents")).status_code == 200
    assert (await alice.get("/v1/me")).json()["capabilities"] == []


async def test_the_encoded_bytes_of_half_a_pair_are_refused_as_no_utf8(service: Service) -> None:
    """`json.loads` decodes bytes with `surrogatepass`: ED A0 80 would become "\ud800"."""
    alice = await service.agent("alice")
    await service.create_agent("bob")
    assert (await alice.get("/v1/inbox")).status_code == 200  # alice's session, made at first
    before = table_counts(service.home)
    half = b"m_\xed\xa0\x80"
    headers = {"Content-Type": "application/json"}
    for path, body in (
        ("/v1/inbox/ack", b'{"ids": ["' + half + b'"]}'),
        ("/v1/messages", b'{"to": "bob", "body": "x", "reply_to": "' + half + b'"}'),
        ("/v1/webhooks", b'{"url": "http://127.0.0.1:9/", "events": ["' + half + b'"]}'),
    ):
        refused_as_invalid(await alice.post(path, content=body, headers=headers))
    assert table_counts(service.home) == before


async def test_an_escaped_backslash_before_u_d800_is_ordinary_text(service: Service) -> None:
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    body = "a path: C:\\ud800\\file and a face: \U0001f600"
    assert (await alice.post("/v1/messages", json={"to": "bob", "body": body})).status_code == 201
    assert [m["body"] for m in (await bob.get("/v1/inbox")).json()["messages"]] == [body]


async def test_self_registration_refuses_half_a_surrogate_pair(tmp_path: Path) -> None:
    async with running_service(tmp_path, {"AGENTPOST_OPEN_REGISTRATION": "true"}) as service:
        anyone = service.client()
        mallory = {"name": "mallory", "description": HALF_PAIR}
        refused_as_invalid(await send_json(anyone, "POST", "/v1/register", mallory))
        listed = await service.admin.get("/v1/admin/agents")
        assert "mallory" not in [a["name"] for a in listed.json()["agents"]]


async def test_data_nested_past_the_limit_is_refused_and_every_reader_keeps_working(
    service: Service,
) -> None:
    mallory = await service.agent("mallory")
    alice = await service.agent("alice")
    deep = {"to": "#general", "body": "look", "data": nested(MAX_DATA_DEPTH)}
    refused_as_invalid(await mallory.post("/v1/messages", json=deep))
    at_limit = nested(MAX_DATA_DEPTH // 2)  # each level of `nested` is two: an object, a list
    ok = {"to": "#general", "body": "ok", "data": at_limit}
    sent = await mallory.post("/v1/messages", json=ok)
    assert sent.status_code == 201

    for path in ("/v1/inbox", "/v1/channels/general/messages", "/v1/search?q=ok"):
        answer = await alice.get(path)
        assert answer.status_code == 200, (path, answer.text)
        assert [m["data"] for m in answer.json()["messages"]] == [at_limit]
    assert (await mallory.get("/v1/sent")).status_code == 200


async def test_a_value_of_another_json_type_is_refused_never_converted(service: Service) -> None:
    """`"yes"` is no boolean and `true` or `"7"` no number: read leniently, the first minted
    an admin key and the second set a rate of one send a minute."""
    await service.create_agent("alice")
    admin = service.admin
    keys_before = (await admin.get("/v1/admin/keys")).json()
    await admin.put("/v1/admin/agents/alice/limits", json={"send_rate_per_minute": 30})
    usage_before = (await admin.get("/v1/admin/usage?agent=alice")).json()

    refused_as_invalid(await admin.post("/v1/admin/agents/owner/keys", json={"admin": "yes"}))
    for rate in (True, "7", 7.5):
        answer = await admin.put(
            "/v1/admin/agents/alice/limits", json={"send_rate_per_minute": rate}
        )
        refused_as_invalid(answer)

    assert (await admin.get("/v1/admin/keys")).json() == keys_before
    assert (await admin.get("/v1/admin/usage?agent=alice")).json() == usage_before
    accepted = await admin.put("/v1/admin/agents/alice/limits", json={"send_rate_per_minute": 7})
    assert accepted.json()["send_rate_per_minute"] == 7


async def test_a_misspelt_query_parameter_is_refused_and_reads_nothing(service: Service) -> None:
    """Dropped, `peak=true` read the whole inbox, and marked it read, where a peek was meant."""
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    assert (await alice.post("/v1/messages", json={"to": "bob", "body": "x"})).status_code == 201

    answer = await bob.get("/v1/inbox", params={"peak": "true"})
    refused_as_invalid(answer)
    assert "'peak'" in answer.json()["error"]["message"]
    assert answer.json()["error"]["details"]["fields"] == [
        {"field": "peak", "problem": "no such parameter"}
    ]
    refused_as_invalid(await bob.get("/v1/sent", params={"limt": "5"}))
    refused_as_invalid(await bob.get("/v1/me", params={"x": "1"}))

    peeked = (await bob.get("/v1/inbox", params={"peek": "true"})).json()
    assert [(m["body"], m["state"]) for m in peeked["messages"]] == [("x", "queued")]
    assert peeked["unread"] == 1


async def test_a_query_parameter_given_twice_is_refused_not_read_as_its_last(
    service: Service,
) -> None:
    await service.create_agent("alice")
    bob = await service.agent("bob")
    answer = await bob.get("/v1/inbox?peek=true&peek=false")
    refused_as_invalid(answer)
    assert answer.json()["error"]["details"]["fields"] == [
        {"field": "peek", "problem": "given twice"}
    ]


async def test_the_probes_take_what_a_monitor_adds_to_their_query(service: Service) -> None:
    anyone = service.client()
    assert (await anyone.get("/health", params={"ts": "1"})).status_code == 200
    assert (await anyone.get("/ready", params={"ts": "1"})).status_code == 200


async def test_a_line_feed_in_a_path_is_part_of_the_name_it_is_in(service: Service) -> None:
    """Starlette's patterns stop at a line feed: `#dev%0A` found no route (a bare "Not Found"),
    and `bob%0A` at a path's end was read as `bob`. Each is refused by the name's own rules, as
    a tab or a carriage return is, and changes nothing."""
    await service.create_agent("bob")
    alice = await service.agent("alice")
    assert (await alice.put("/v1/channels/%23dev/members/me")).status_code == 200
    for method, path, name in (
        ("GET", "/v1/channels/%23dev%0A/messages", "'dev\\n'"),
        ("PUT", "/v1/channels/%23dev%0A/members/me", "'dev\\n'"),
        ("DELETE", "/v1/channels/%23dev%0A/members/me", "'dev\\n'"),
        ("PUT", "/v1/blocks/bob%0A", "'bob\\n'"),
        ("PUT", "/v1/blocks/bob%0Ax", "'bob\\nx'"),
    ):
        answer = await alice.request(method, path)
        refused_as_invalid(answer)
        assert name in answer.json()["error"]["message"], (path, answer.text)
    assert (await alice.get("/v1/blocks")).json()["blocked"] == []
    channels = (await alice.get("/v1/channels")).json()["channels"]
    assert [c["name"] for c in channels if c["joined"]].count("#dev") == 1  # not left
    gone = await alice.get("/v1/messages/m_gone%0A")
    assert (gone.status_code, gone.json()["error"]["message"]) == (
        404,
        "no message 'm_gone\\n' that you can see",
    )


async def test_a_thread_whose_id_holds_a_line_feed_is_read_over_rest(service: Service) -> None:
    await service.create_agent("bob")
    alice = await service.agent("alice")
    body = {"to": "bob", "body": "x", "thread_id": "two\nlines"}
    sent = (await alice.post("/v1/messages", json=body)).json()
    thread = (await alice.get("/v1/threads/two%0Alines")).json()
    assert (thread["thread_id"], [m["id"] for m in thread["messages"]]) == (
        "two\nlines",
        [sent["id"]],
    )


async def test_a_control_character_where_no_route_takes_one_is_invalid_input(
    service: Service,
) -> None:
    """Not a bare "Not Found", and never the route without it: `/v1/inbox%0A` read the inbox,
    and marked it read."""
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    assert (await alice.post("/v1/messages", json={"to": "bob", "body": "x"})).status_code == 201
    for path in ("/v1/inbox%0A", "/v1/me%0A", "/v1/nowhere%09", "/health%0A", "/v1/me%7F"):
        answer = await bob.get(path)
        refused_as_invalid(answer)
        assert "control character" in answer.json()["error"]["message"], path
    assert (await bob.get("/v1/inbox", params={"peek": "true"})).json()["unread"] == 1
    nowhere = await bob.get("/v1/nowhere")
    assert (nowhere.status_code, nowhere.json()["error"]["code"]) == (404, "not_found")


async def test_a_line_feed_in_a_path_that_holds_every_stand_in_is_still_refused(
    service: Service,
) -> None:
    """The router's stand-ins for a line feed are the private use area's characters: a path
    that holds all of them is refused as bad input too, not answered with a 500."""
    alice = await service.agent("alice")
    every = "".join(map(chr, range(0xE000, 0xF900)))
    for path in (f"/v1/blocks/{every}%0A", f"/v1/inbox{every}%0A"):
        refused_as_invalid(await alice.put(path) if "blocks" in path else await alice.get(path))
    assert (await alice.get("/v1/blocks")).json()["blocked"] == []


def endpoints(routes: Iterable[Any]) -> Iterator[Any]:
    """Every route with an endpoint, through the routers FastAPI includes lazily."""
    for route in routes:
        if hasattr(route, "original_router"):
            yield from endpoints(route.original_router.routes)
        elif hasattr(route, "endpoint"):
            yield route


def test_every_rest_body_takes_json_types_strictly_and_no_unknown_field() -> None:
    app = build_rest_app(cast(PostOffice, object()))
    fields = [getattr(r, "body_field", None) for r in endpoints(app.routes)]
    bodies = [f.field_info.annotation for f in fields if f is not None]
    assert len(bodies) > 10
    for body in bodies:
        assert (body.model_config.get("strict"), body.model_config.get("extra")) == (
            True,
            "forbid",
        ), body


def test_every_rest_route_refuses_bodies_that_are_not_unicode() -> None:
    app = build_rest_app(cast(PostOffice, object()))
    # The API's routes; the docs pages (left out of the schema) read no body.
    routes = [r for r in endpoints(app.routes) if hasattr(r, "body_field") and r.include_in_schema]
    assert len(routes) > 40
    assert all(isinstance(route, UnicodeJsonRoute) for route in routes)


async def test_mcp_in_2026_07_28_refuses_arguments_holding_half_a_pair(service: Service) -> None:
    """That revision's transport parses with `json.loads`, which lets half pairs through; every
    tool then answers `invalid_argument`, changing nothing."""
    alice = service.client(await service.create_agent("alice"))
    assert (await alice.get("/v1/inbox")).status_code == 200  # alice's session, made at first
    before = table_counts(service.home)
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
    }
    for name, arguments in (
        ("ack", {"ids": [HALF_PAIR]}),
        ("send", {"to": "alice", "body": "x", "reply_to": HALF_PAIR}),
        ("join", {"channel": "#" + HALF_PAIR}),
    ):
        call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments, "_meta": meta},
        }
        routing = {"Mcp-Method": "tools/call", "Mcp-Name": name}
        answer = await alice.post(
            "/mcp", content=json.dumps(call).encode(), headers=headers | routing
        )
        assert answer.status_code == 200, answer.text
        result = answer.json()["result"]
        assert result["isError"] is True
        assert result["content"][0]["text"].startswith("invalid_argument: "), (name, result)
    assert table_counts(service.home) == before


async def test_a_body_that_is_no_json_object_is_refused_saying_what_is_wanted(
    service: Service,
) -> None:
    """curl's `-d` without `-H "Content-Type: application/json"` sends a form, and a typo
    breaks the JSON: each answer says so, not a character position posing as a field."""
    alice = await service.agent("alice")
    await service.create_agent("bob")
    assert (await alice.get("/v1/inbox")).status_code == 200  # alice's session, made at first
    before = table_counts(service.home)
    json_type = {"Content-Type": "application/json"}
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    for content, headers, says in (
        (b'{"to": "bob", "body": "x",}', json_type, "body: not JSON: Expecting property name"),
        (b'{"to": "bob", "body": "x"}', form, "body: should be a JSON object, sent with"),
    ):
        answer = await alice.post("/v1/messages", content=content, headers=headers)
        refused_as_invalid(answer)
        error = answer.json()["error"]
        assert error["message"].startswith(says), error
        assert [f["field"] for f in error["details"]["fields"]] == ["body"]
    assert table_counts(service.home) == before


async def test_a_compressed_body_is_refused_saying_so_not_as_no_utf8(service: Service) -> None:
    """A client that gzips what it sends (`Content-Encoding: gzip`) was told its body "is not
    UTF-8", as if its text were broken: the service takes no compressed body, and says so."""
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    assert (await alice.get("/v1/inbox")).status_code == 200  # alice's session, made at first
    before = table_counts(service.home)
    body = json.dumps({"to": "bob", "body": "squeezed"}).encode()
    answer = await alice.post(
        "/v1/messages",
        content=gzip.compress(body),
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    refused_as_invalid(answer)
    assert answer.json()["error"]["message"].startswith("the body is sent with Content-Encoding")
    assert table_counts(service.home) == before
    identity = {"Content-Type": "application/json", "Content-Encoding": "identity"}
    sent = await alice.post("/v1/messages", content=body, headers=identity)
    assert sent.status_code == 201
    assert [m["body"] for m in (await bob.get("/v1/inbox")).json()["messages"]] == ["squeezed"]


async def test_a_key_given_twice_at_any_depth_is_refused_naming_it(service: Service) -> None:
    """`{"to": "bob", "to": "eve"}` sent to eve, the last value: a proxy or a log that takes
    the first read mail to bob. Refused on every route, however deep the object."""
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    eve = await service.agent("eve")
    assert (await alice.get("/v1/inbox")).status_code == 200  # alice's session, made at first
    before = table_counts(service.home)
    headers = {"Content-Type": "application/json"}
    for method, path, body, key in (
        ("POST", "/v1/messages", b'{"to": "bob", "body": "x", "to": "eve"}', "to"),
        (
            "POST",
            "/v1/messages",
            b'{"to": "bob", "body": "x", "data": {"a": [{"k": 1, "k": 2}]}}',
            "k",
        ),
        ("PATCH", "/v1/me", b'{"description": "a", "description": "b"}', "description"),
        ("POST", "/v1/reservations", b'{"paths": ["a"], "paths": ["b"]}', "paths"),
    ):
        answer = await alice.request(method, path, content=body, headers=headers)
        refused_as_invalid(answer)
        assert f"key {key!r} more than once" in answer.json()["error"]["message"]
    assert table_counts(service.home) == before
    assert (await bob.get("/v1/inbox")).json()["messages"] == []
    assert (await eve.get("/v1/inbox")).json()["messages"] == []
    same_key_apart = b'{"to": "bob", "body": "x", "data": {"k": 1, "o": {"k": 2}}}'
    assert (
        await alice.post("/v1/messages", content=same_key_apart, headers=headers)
    ).status_code == 201
