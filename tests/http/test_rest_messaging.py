"""Two agents with their own keys exchange mail over REST, as DESIGN.md describes it."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest

from agentpost.service import SHUTDOWN_GRACE_S
from service_process import Service, eventually, running_service

pytestmark = pytest.mark.anyio


async def test_two_agents_exchange_read_and_acknowledge_mail(service: Service) -> None:
    alice = await service.agent("alice")
    bob = await service.agent("bob")

    sent = await alice.post("/v1/messages", json={"to": "bob", "body": "lunch?", "data": {"n": 1}})
    assert sent.status_code == 201, sent.text
    message_id = sent.json()["id"]

    inbox = (await bob.get("/v1/inbox")).json()
    assert [(m["id"], m["from"], m["body"], m["data"]) for m in inbox["messages"]] == [
        (message_id, "alice", "lunch?", {"n": 1})
    ]
    assert inbox["messages"][0]["trust"] == "verified"
    acked = await bob.post("/v1/inbox/ack", json={"ids": [message_id]})
    assert acked.json() == {"acked": [message_id], "not_found": []}

    receipts = (await alice.get("/v1/sent")).json()["messages"][0]["receipts"]
    assert [(r["to"], r["state"]) for r in receipts] == [("bob", "acked")]


async def test_a_reply_joins_its_parents_thread(service: Service) -> None:
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    first = (await alice.post("/v1/messages", json={"to": "bob", "body": "q"})).json()
    reply = await bob.post(
        "/v1/messages", json={"to": "alice", "body": "a", "reply_to": first["id"]}
    )
    assert reply.json()["thread_id"] == first["thread_id"]
    thread = (await alice.get(f"/v1/threads/{first['thread_id']}")).json()
    assert [m["body"] for m in thread["messages"]] == ["q", "a"]


async def test_the_inbox_and_wait_take_a_thread_by_the_id_of_a_reply_in_it(
    service: Service,
) -> None:
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    first = (await alice.post("/v1/messages", json={"to": "bob", "body": "q"})).json()
    more = {"to": "bob", "body": "q2", "reply_to": first["id"]}
    follow_up = (await alice.post("/v1/messages", json=more)).json()
    await alice.post("/v1/messages", json={"to": "bob", "body": "other"})
    by_reply = {"thread_id": follow_up["id"]}
    peeked = (await bob.get("/v1/inbox", params={**by_reply, "peek": True})).json()
    assert [m["body"] for m in peeked["messages"]] == ["q", "q2"]
    waited = (await bob.get("/v1/inbox/wait", params={**by_reply, "timeout_s": 0})).json()
    assert ([m["body"] for m in waited["messages"]], waited["unread"]) == (["q", "q2"], 1)


async def test_a_from_field_is_refused_and_nothing_is_stored(service: Service) -> None:
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    spoof = await alice.post("/v1/messages", json={"to": "bob", "body": "hi", "from": "owner"})
    assert spoof.status_code == 400
    assert spoof.json()["error"]["code"] == "invalid_argument"
    assert (await bob.get("/v1/inbox", params={"peek": True})).json()["messages"] == []


async def test_a_blank_message_id_or_cursor_is_an_invalid_argument_on_every_route(
    service: Service,
) -> None:
    alice = await service.agent("alice")
    await service.agent("bob")
    assert (await alice.put("/v1/channels/ops/members/me")).status_code == 200
    for path, params in [
        ("/v1/messages/%20", {}),
        ("/v1/threads/%20", {}),
        ("/v1/channels/ops/messages", {"before": ""}),
        ("/v1/channels/ops/messages", {"before": " "}),
    ]:
        answer = await alice.get(path, params=params)
        assert answer.status_code == 400, (path, params, answer.text)
        assert answer.json()["error"]["code"] == "invalid_argument"
    reply = await alice.post("/v1/messages", json={"to": "bob", "body": "b", "reply_to": ""})
    assert reply.json()["error"]["code"] == "invalid_argument"


async def test_the_sender_is_always_the_keys_agent(service: Service) -> None:
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    await alice.post("/v1/messages", json={"to": "bob", "body": "from me"})
    (message,) = (await bob.get("/v1/inbox")).json()["messages"]
    assert message["from"] == "alice"


async def test_nobody_reads_acks_or_sees_another_agents_mail(service: Service) -> None:
    alice = await service.agent("alice")
    await service.agent("bob")
    mallory = await service.agent("mallory")
    sent = (await alice.post("/v1/messages", json={"to": "bob", "body": "secret"})).json()

    assert (await mallory.get(f"/v1/messages/{sent['id']}")).status_code == 404
    assert (await mallory.get(f"/v1/threads/{sent['thread_id']}")).status_code == 404
    assert (await mallory.post("/v1/inbox/ack", json={"ids": [sent["id"]]})).json() == {
        "acked": [],
        "not_found": [sent["id"]],
    }
    assert (await mallory.get("/v1/search", params={"q": "secret"})).json()["messages"] == []
    assert (await mallory.get("/v1/inbox")).json()["messages"] == []


async def test_search_pages_back_with_a_pages_last_id(service: Service) -> None:
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    for n in range(3):
        await alice.post("/v1/messages", json={"to": "bob", "body": f"release {n}"})
    secret = (await alice.post("/v1/messages", json={"to": "alice", "body": "release"})).json()

    first = (await bob.get("/v1/search", params={"q": "release", "limit": 2})).json()
    assert [m["body"] for m in first["messages"]] == ["release 2", "release 1"]
    params = {"q": "release", "limit": 2, "before": first["messages"][-1]["id"]}
    older = (await bob.get("/v1/search", params=params)).json()
    assert [m["body"] for m in older["messages"]] == ["release 0"]
    hidden = await bob.get("/v1/search", params={"q": "release", "before": secret["id"]})
    assert (hidden.status_code, hidden.json()["error"]["code"]) == (404, "not_found")


async def test_the_whole_inbox_pages_back_with_before(service: Service) -> None:
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    for n in range(3):
        await alice.post("/v1/messages", json={"to": "bob", "body": f"note {n}"})
    secret = (await alice.post("/v1/messages", json={"to": "alice", "body": "mine"})).json()

    whole = {"unread_only": "false", "limit": 2, "peek": "true"}
    newest = (await bob.get("/v1/inbox", params=whole)).json()["messages"]
    assert [m["body"] for m in newest] == ["note 1", "note 2"]
    older = await bob.get("/v1/inbox", params={**whole, "before": newest[0]["id"]})
    assert [m["body"] for m in older.json()["messages"]] == ["note 0"]
    hidden = await bob.get("/v1/inbox", params={**whole, "before": secret["id"]})
    assert (hidden.status_code, hidden.json()["error"]["code"]) == (404, "not_found")
    unread = await bob.get("/v1/inbox", params={"before": newest[0]["id"]})
    assert (unread.status_code, unread.json()["error"]["code"]) == (400, "invalid_argument")
    assert (await bob.get("/v1/inbox", params={"peek": "true"})).json()["unread"] == 3


async def test_sent_and_a_thread_page_back_with_before(service: Service) -> None:
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    root = (await alice.post("/v1/messages", json={"to": "bob", "body": "step 0"})).json()
    for n in (1, 2):
        reply = {"to": "bob", "body": f"step {n}", "reply_to": root["id"]}
        await alice.post("/v1/messages", json=reply)

    sent = (await alice.get("/v1/sent", params={"limit": 2})).json()["messages"]
    assert [m["body"] for m in sent] == ["step 2", "step 1"]
    older = await alice.get("/v1/sent", params={"limit": 2, "before": sent[-1]["id"]})
    assert [m["body"] for m in older.json()["messages"]] == ["step 0"]
    foreign = await bob.get("/v1/sent", params={"before": root["id"]})  # not bob's own
    assert (foreign.status_code, foreign.json()["error"]["code"]) == (404, "not_found")

    thread = f"/v1/threads/{root['id']}"
    newest = (await bob.get(thread, params={"limit": 2})).json()
    assert [m["body"] for m in newest["messages"]] == ["step 1", "step 2"]
    first = newest["messages"][0]["id"]
    before = (await bob.get(thread, params={"limit": 2, "before": first})).json()
    assert [m["body"] for m in before["messages"]] == ["step 0"]
    past = (await bob.get(thread, params={"before": root["id"]})).json()
    assert past == {"messages": [], "thread_id": root["id"]}


async def test_a_channel_broadcast_reaches_members_and_its_history(service: Service) -> None:
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    assert (await alice.put("/v1/channels/ops/members/me")).status_code == 200
    assert (await bob.put("/v1/channels/ops/members/me")).status_code == 200
    sent = await alice.post("/v1/messages", json={"to": "#ops", "body": "deploying"})
    assert sent.json()["channel"] == "#ops"
    assert [m["body"] for m in (await bob.get("/v1/inbox")).json()["messages"]] == ["deploying"]
    history = (await bob.get("/v1/channels/ops/messages")).json()
    assert [m["body"] for m in history["messages"]] == ["deploying"]


async def test_wait_answers_as_soon_as_mail_arrives(service: Service) -> None:
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    answers: list[dict[str, object]] = []

    async def wait() -> None:
        answers.append((await bob.get("/v1/inbox/wait", params={"timeout_s": 20})).json())

    async with anyio.create_task_group() as group:
        group.start_soon(wait)
        await anyio.sleep(0.3)
        await alice.post("/v1/messages", json={"to": "bob", "body": "ping"})
    (answer,) = answers
    assert answer["timed_out"] is False
    assert [m["body"] for m in answer["messages"]] == ["ping"]  # type: ignore[attr-defined]


async def test_a_wait_whose_client_hung_up_takes_no_mail(tmp_path: Path) -> None:
    """The client gave up (a timeout of its own, a dropped network): its wait ends, so its
    agent goes offline as one that makes no request, and the mail that comes next stays
    unread for the wait it opens again; the sender's receipt says queued."""
    quick = {"AGENTPOST_HEARTBEAT_S": "0.2", "AGENTPOST_OFFLINE_AFTER_S": "1"}
    async with running_service(tmp_path, quick) as service:
        alice = await service.agent("alice")
        key = await service.create_agent("bob")
        with pytest.raises(httpx.ReadTimeout):
            await service.client(key).get(
                "/v1/inbox/wait", params={"timeout_s": 60}, timeout=httpx.Timeout(60, read=0.5)
            )
        # A wait still open would keep bob online for its minute.
        await eventually(lambda: offline(alice, "bob"))
        sent = (await alice.post("/v1/messages", json={"to": "bob", "body": "ping"})).json()

        [receipt] = (await alice.get("/v1/sent")).json()["messages"]
        assert receipt["id"] == sent["id"]
        assert [(r["to"], r["state"]) for r in receipt["receipts"]] == [("bob", "queued")]
        again = await service.client(key).get("/v1/inbox/wait", params={"timeout_s": 5})
        assert [m["id"] for m in again.json()["messages"]] == [sent["id"]]
        refused = await service.client(key).get("/v1/inbox/wait", params={"thread_id": "t" * 65})
        assert (refused.status_code, refused.json()["error"]["code"]) == (400, "invalid_argument")


async def offline(client: httpx.AsyncClient, name: str) -> bool:
    """Whether `name` is offline, as `client` sees it."""
    agents = (await client.get("/v1/presence")).json()["agents"]
    return not any(a["name"] == name and a["online"] for a in agents)


async def test_wait_times_out_with_timed_out_true_never_an_error(service: Service) -> None:
    bob = await service.agent("bob")
    answer = await bob.get("/v1/inbox/wait", params={"timeout_s": 0.2})
    assert answer.status_code == 200
    assert answer.json() == {"messages": [], "unread": 0, "timed_out": True}


async def test_openapi_and_docs_are_served(service: Service) -> None:
    anonymous = service.client()
    spec = (await anonymous.get("/openapi.json")).json()
    assert "/v1/messages" in spec["paths"]
    assert (await anonymous.get("/docs")).status_code == 200


async def test_the_openapi_documents_bad_input_as_the_400_the_service_answers(
    service: Service,
) -> None:
    """FastAPI documented a 422 `HTTPValidationError` on every route taking input; the service
    answers 400 `invalid_argument` in its own error shape, which a generated client must know."""
    spec = (await service.client().get("/openapi.json")).json()
    documented = [
        (method, path, set(operation["responses"]))
        for path, item in spec["paths"].items()
        for method, operation in item.items()
    ]
    assert [entry for entry in documented if "422" in entry[2]] == []
    delegate = spec["paths"]["/v1/tasks"]["post"]["responses"]["400"]
    error = delegate["content"]["application/json"]["schema"]
    assert error == {"$ref": "#/components/schemas/Error"}
    shape = spec["components"]["schemas"]["Error"]
    assert set(shape["properties"]["error"]["properties"]) == {
        "code", "message", "details", "retry_after_s"
    }  # fmt: skip
    alice = await service.agent("alice")
    refused = await alice.post("/v1/tasks", json={"to": "bob"})
    assert refused.status_code == 400
    assert set(refused.json()) == {"error"}
    assert set(refused.json()["error"]) <= set(shape["properties"]["error"]["properties"])


async def test_a_server_that_stops_answers_its_long_polls_at_once(service: Service) -> None:
    """uvicorn waits for every open request before it exits: a wait or a request held to
    its deadline kept a stopping replica half alive for minutes. They answer timed out
    now, well within the grace a stopping server gives what is still open."""
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    answers: dict[str, dict[str, object]] = {}

    async def wait() -> None:
        answer = await bob.get("/v1/inbox/wait", params={"timeout_s": 120})
        answers["wait"] = answer.json()

    async def ask() -> None:
        question = {"to": "alice", "question": "still there?", "timeout_s": 120}
        answers["request"] = (await bob.post("/v1/requests", json=question)).json()

    async with anyio.create_task_group() as group:
        group.start_soon(wait)
        group.start_soon(ask)
        await eventually(lambda: asked(alice))  # the request waits for its answer now
        with anyio.fail_after(SHUTDOWN_GRACE_S / 2):
            await service.stop()
    assert answers["wait"] == {"messages": [], "unread": 0, "timed_out": True}
    assert (answers["request"]["answered"], answers["request"]["timed_out"]) == (False, True)


async def asked(client: httpx.AsyncClient) -> bool:
    return bool((await client.get("/v1/inbox", params={"peek": True})).json()["messages"])
