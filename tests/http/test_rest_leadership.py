"""Leadership over REST and MCP/HTTP: agents on other machines hold the seat with their sessions."""

from __future__ import annotations

from pathlib import Path

import httpx
import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from service_process import Service, running_service

pytestmark = pytest.mark.anyio


async def session_on(service: Service, name: str, branch: str) -> httpx.AsyncClient:
    """An agent's client speaking for a session it minted in project `rocket` on `branch`."""
    key = await service.create_agent(name)
    minted = await service.client(key).post(
        "/v1/sessions", json={"project": "rocket", "branch": branch, "worktree": "/elsewhere"}
    )
    assert minted.status_code == 201, minted.text
    return service.client(key, **{"Agentpost-Session": minted.json()["session_id"]})


async def test_a_new_session_on_main_takes_the_free_seat_and_others_see_it(
    service: Service,
) -> None:
    alice = await session_on(service, "alice", "main")  # auto_lead: claimed when minted
    bob = await session_on(service, "bob", "main")  # the seat is held: bob's session just opens
    claimed = await alice.post("/v1/leadership/claim", json={})
    assert claimed.status_code == 200, claimed.text
    assert (claimed.json()["leader"], claimed.json()["term"]) == ("alice", 1)
    seen = (await bob.get("/v1/leadership")).json()
    assert (seen["project"], seen["leader"], seen["term"], seen["branch"]) == (
        "rocket",
        "alice",
        1,
        "main",
    )
    refused = await bob.post("/v1/leadership/claim", json={})
    assert refused.status_code == 409
    assert refused.json()["error"]["details"] == {"leader": "alice", "term": 1}
    # Forcing is the owner's: an agent key is refused.
    forced = await bob.post("/v1/leadership/claim", json={"force": True})
    assert forced.status_code == 403
    everyone = (await bob.get("/v1/leadership/all")).json()["leaders"]
    assert [(s["project"], s["leader"]) for s in everyone] == [("rocket", "alice")]


async def test_a_session_a_heartbeat_moves_onto_the_default_branch_takes_the_free_seat(
    service: Service,
) -> None:
    """As a local session stands afresh at each checkout: a remote-backed stdio session's
    heartbeat says where its worktree moved, and on a branch that may lead it takes the seat
    if free, as it would have when it opened. One that stepped down takes it no more."""
    alice = await session_on(service, "alice", "feature-x")
    session = alice.headers["Agentpost-Session"]
    assert (await alice.get("/v1/leadership")).json()["leader"] is None
    beat = await alice.post(f"/v1/sessions/{session}/heartbeat", json={"branch": "main"})
    assert beat.status_code == 200, beat.text
    seat = (await alice.get("/v1/leadership")).json()
    assert (seat["leader"], seat["branch"], seat["term"]) == ("alice", "main", 1)

    assert (await alice.post("/v1/leadership/release", json={})).json()["released"] is True
    for branch in ("feature-x", "main"):
        await alice.post(f"/v1/sessions/{session}/heartbeat", json={"branch": branch})
    assert (await alice.get("/v1/leadership")).json()["leader"] is None


async def test_a_session_minted_without_auto_lead_takes_no_free_seat_until_it_claims(
    service: Service,
) -> None:
    """What a remote-backed stdio session that stepped down asks for when its session, ended
    from outside, is minted again: the new one took the seat back, on a new term."""
    key = await service.create_agent("alice")
    minted = await service.client(key).post(
        "/v1/sessions", json={"project": "rocket", "branch": "main", "auto_lead": False}
    )
    assert minted.status_code == 201, minted.text
    session = minted.json()["session_id"]
    alice = service.client(key, **{"Agentpost-Session": session})
    for branch in ("feature-x", "main"):
        await alice.post(f"/v1/sessions/{session}/heartbeat", json={"branch": branch})
    assert (await alice.get("/v1/leadership")).json()["leader"] is None
    claimed = (await alice.post("/v1/leadership/claim", json={})).json()
    assert (claimed["leader"], claimed["session_id"], claimed["term"]) == ("alice", session, 1)


async def test_a_feature_branch_is_refused_and_release_frees_the_seat(service: Service) -> None:
    alice = await session_on(service, "alice", "main")
    feature = await session_on(service, "feat", "feature-x")
    refused = await feature.post("/v1/leadership/claim", json={})
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "forbidden"
    await alice.post("/v1/leadership/claim", json={})
    not_mine = await feature.post("/v1/leadership/release", json={})
    assert not_mine.status_code == 200
    assert (not_mine.json()["leader"], not_mine.json()["released"]) == ("alice", False)
    released = await alice.post("/v1/leadership/release", json={})
    assert (released.json()["leader"], released.json()["term"]) == (None, 1)
    assert released.json()["released"] is True
    body_refused = await alice.post("/v1/leadership/claim", json={"project": "rocket", "x": 1})
    assert body_refused.status_code == 400


async def test_the_leadership_tools_work_over_mcp_http(service: Service) -> None:
    key = await service.create_agent("alice", project="rocket")
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http,
        Client(streamable_http_client(f"{service.url}/mcp", http_client=http)) as client,
    ):
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {"leader", "claim_leadership", "release_leadership"} <= names
        seat = await client.call_tool("leader", {})
        assert seat.structured_content is not None
        assert seat.structured_content["project"] == "rocket"
        assert seat.structured_content["leader"] is None
        # The key's own session has no branch: it may not lead.
        refused = await client.call_tool("claim_leadership", {})
        assert refused.is_error
        assert refused.content[0].text.startswith("forbidden: ")  # type: ignore[union-attr]


async def test_a_self_registered_agent_takes_no_seat_until_the_owner_vouches(
    tmp_path: Path,
) -> None:
    async with running_service(tmp_path, {"AGENTPOST_OPEN_REGISTRATION": "true"}) as service:
        registered = await service.client().post(
            "/v1/register", json={"name": "drifter", "project": "rocket"}
        )
        key = registered.json()["key"]
        minted = await service.client(key).post(
            "/v1/sessions", json={"project": "rocket", "branch": "main", "worktree": "/w"}
        )
        assert minted.status_code == 201, minted.text  # auto_lead: no seat, no refusal
        drifter = service.client(key, **{"Agentpost-Session": minted.json()["session_id"]})
        assert (await drifter.get("/v1/leadership")).json()["leader"] is None
        refused = await drifter.post("/v1/leadership/claim", json={})
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "forbidden"
        assert "vouch" in refused.json()["error"]["message"]
        assert (await service.admin.post("/v1/admin/agents/drifter/vouch")).status_code == 200
        claimed = await drifter.post("/v1/leadership/claim", json={})
        assert claimed.json()["leader"] == "drifter", claimed.text
