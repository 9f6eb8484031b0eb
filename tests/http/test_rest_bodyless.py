"""A POST whose every field has a default may be sent with no body at all, as a curl line from
docs/SERVICE.md would (`curl -X POST …/v1/leadership/release`): it means `{}`, not a refusal
that a body is "required". Against a real `agentpost serve`."""

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
