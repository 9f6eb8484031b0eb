"""A POST whose every field has a default may be sent with no body at all, as a curl line from
docs/SERVICE.md would (`curl -X POST …/v1/leadership/release`): it means `{}`, not a refusal
that a body is "required". A route that takes no body refuses one, but for `{}`, as a body's
unknown field is refused. Against a real `agentpost serve`."""

from __future__ import annotations

import pytest

from service_process import Service

pytestmark = pytest.mark.anyio


async def test_posts_whose_fields_all_have_defaults_need_no_body(service: Service) -> None:
    alice = await service.agent("alice", project="shop")
    admin = service.admin
    reserved = await alice.post("/v1/reservations", json={"paths": ["src/a.py"]})
    assert reserved.status_code == 200, reserved.text

    minted = await alice.post("/v1/sessions")
    assert minted.status_code == 201, minted.text
    assert minted.json()["agent"] == "alice"
    renewed = await alice.post("/v1/reservations/renew")
    assert renewed.status_code == 200, renewed.text
    assert [r["path"] for r in renewed.json()["reservations"]] == ["src/a.py"]
    released = await alice.post("/v1/reservations/release")
    assert released.status_code == 200, released.text
    assert [r["path"] for r in released.json()["reservations"]] == ["src/a.py"]
    on_main = await alice.post("/v1/sessions", json={"branch": "main"})  # it may lead
    session = {"Agentpost-Session": on_main.json()["session_id"]}
    stepped_down = await alice.post("/v1/leadership/release", headers=session)
    assert stepped_down.status_code == 200, stepped_down.text
    assert stepped_down.json()["leader"] is None
    claimed = await alice.post("/v1/leadership/claim", headers=session)
    assert claimed.status_code == 200, claimed.text
    assert claimed.json()["leader"] == "alice"
    issued = await admin.post("/v1/admin/agents/alice/keys")
    assert issued.status_code == 201, issued.text
    assert issued.json()["key"].startswith("ap_")


async def test_a_body_that_is_there_is_still_checked(service: Service) -> None:
    alice = await service.agent("alice")
    refused = await alice.post("/v1/leadership/release", json={"projet": "shop"})
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "invalid_argument"


async def test_a_route_that_takes_no_body_refuses_one_and_changes_nothing(
    service: Service,
) -> None:
    """Each was taken and ignored: `{"peek": true}` on `GET /v1/inbox` read the mail it meant
    to peek at; `{"agent": "eve"}` on `PUT /v1/blocks/bob` blocked bob."""
    alice = await service.agent("alice")
    await service.agent("bob")
    assert (await alice.post("/v1/messages", json={"to": "alice", "body": "x"})).status_code == 201
    session = (await alice.post("/v1/sessions")).json()["session_id"]
    sent = [
        ("GET", "/v1/inbox", {"peek": True}),
        ("PUT", "/v1/blocks/bob", {"agent": "eve"}),
        ("PUT", "/v1/channels/dev/members/me", {"channel": "ops"}),
        ("DELETE", f"/v1/sessions/{session}", {"force": True}),
        ("PUT", "/v1/blocks/bob", []),
        ("PUT", "/v1/blocks/bob", "x"),
    ]
    for method, path, body in sent:
        answer = await alice.request(method, path, json=body)
        assert answer.status_code == 400, (method, path, answer.text)
        error = answer.json()["error"]
        assert error["code"] == "invalid_argument"
        assert error["message"] == f"{method} {path} takes no body: send none (or {{}})"
    not_json = await alice.put("/v1/blocks/bob", content=b"agent=eve")
    assert not_json.status_code == 400, not_json.text
    disable = await service.admin.post("/v1/admin/agents/bob/disable", json={"why": "x"})
    assert disable.status_code == 400, disable.text

    assert (await alice.get("/v1/blocks")).json()["blocked"] == []
    channels = (await alice.get("/v1/channels")).json()["channels"]
    assert "dev" not in [c["name"].lstrip("#") for c in channels]
    assert (await alice.get("/v1/inbox?peek=true")).json()["unread"] == 1
    listed = (await service.admin.get("/v1/admin/agents")).json()["agents"]
    assert [a["disabled"] for a in listed if a["name"] == "bob"] == [False]


async def test_a_route_that_takes_no_body_takes_none_or_an_empty_object(service: Service) -> None:
    alice = await service.agent("alice")
    await service.agent("bob")
    assert (await alice.put("/v1/blocks/bob")).status_code == 200
    unblocked = await alice.request("DELETE", "/v1/blocks/bob", json={})
    assert unblocked.status_code == 200, unblocked.text
    blank = {"Content-Type": "application/json"}
    joined = await alice.put("/v1/channels/dev/members/me", content=b" { } ", headers=blank)
    assert joined.status_code == 200, joined.text
    assert (await alice.get("/v1/blocks")).json()["blocked"] == []
