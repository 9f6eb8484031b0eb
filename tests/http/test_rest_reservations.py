"""File reservations over the network: REST through the Python client, and the `coord` tools of
MCP over HTTP, against a real `agentpost serve`. Worktrees over there are not on this host, so
patterns are compared by their text alone."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.reservations import MAX_LIVE, MAX_PATHS
from remote_office import Office
from service_process import Service

pytestmark = pytest.mark.anyio


@pytest.fixture
async def office(service: Service) -> AsyncIterator[Office]:
    opened = Office(service)
    try:
        yield opened
    finally:
        await opened.aclose()


async def test_the_client_takes_one_path_or_id_whole_not_letter_by_letter(office: Office) -> None:
    alice = await office.agent("alice", project="shop")
    [granted] = (await alice.reserve("src/app.py")).granted
    assert granted.path == "src/app.py"
    [renewed] = (await alice.renew_reservations(granted.id)).reservations
    assert renewed.id == granted.id
    released = await alice.release_reservations(paths="src/app.py")
    assert [r.path for r in released.reservations] == ["src/app.py"]
    bob = await office.agent("bob")
    sent = await alice.send("bob", "one id")
    assert (await bob.ack(sent.id)).acked == [sent.id]


async def test_reserve_list_renew_and_release_over_rest(office: Office) -> None:
    alice = await office.agent("alice", project="shop")
    bob = await office.agent("bob", project="shop")
    mine = await alice.reserve(["src/**"], ttl_s=600, reason="parser rewrite")
    [granted] = mine.granted
    assert (granted.path, granted.agent, granted.project, granted.exclusive) == (
        "src/**",
        "alice",
        "shop",
        True,
    )

    theirs = await bob.reserve(["src/a.py", "./docs/"], exclusive=False)
    assert [r.path for r in theirs.granted] == ["docs"]
    [conflict] = theirs.conflicts
    assert (conflict.path, conflict.holder, conflict.held, conflict.expires_at) == (
        "src/a.py",
        "alice",
        "src/**",
        granted.expires_at,
    )
    assert [r.agent for r in await bob.reservations(path="src/a.py")] == ["alice"]
    assert sorted(r.agent for r in await bob.reservations()) == ["alice", "bob"]

    [kept] = (await alice.renew_reservations()).reservations
    assert kept.ttl_s == 600  # its own, not the default hour
    renewed = await alice.renew_reservations(ttl_s=3600)
    assert [r.id for r in renewed.reservations] == [granted.id]
    assert renewed.reservations[0].expires_at > granted.expires_at

    refused = await bob.release_reservations(ids=[granted.id])
    assert (refused.reservations, refused.not_found) == ([], [granted.id])
    released = await alice.release_reservations()
    assert [r.id for r in released.reservations] == [granted.id]
    assert (await bob.reserve(["src/a.py"])).conflicts == []


async def test_a_listing_names_the_project_of_the_callers_session_or_the_one_asked_for(
    office: Office,
) -> None:
    """A client that names no project is told which one it was shown: its session's, where it
    reserves, even when there is nothing in it to name it by."""
    alice = await office.agent("alice", project="shop")
    assert (await alice.reservations()).project == "shop"
    await alice.reserve("src/app.py")
    found = await alice.reservations()
    assert (found.project, [r.path for r in found]) == ("shop", ["src/app.py"])
    elsewhere = await alice.reservations(project="work")
    assert (elsewhere.project, list(elsewhere)) == ("work", [])


async def test_reserve_tells_which_other_sessions_keep_the_claims_alive(office: Office) -> None:
    """Over HTTP a key speaks for its own session, which goes offline when its requests stop:
    the answer says whether another session of the agent keeps the claims alive, and else
    when they lapse, well before their TTL."""
    alice = await office.agent("alice", project="shop")
    alone = await alice.reserve("src/app.py")
    assert alone.other_sessions == []
    assert alone.lapse_unheard_at is not None
    assert alone.lapse_unheard_at < alone.granted[0].expires_at
    assert alone.lapses_with_caller()

    minted = await alice.open_session()
    kept = await alice.reserve("docs/guide.md")
    assert kept.other_sessions == [minted]
    assert not kept.lapses_with_caller()


async def test_an_agent_without_a_project_is_told_how_to_name_one(office: Office) -> None:
    loner = await office.agent("loner")
    with pytest.raises(AgentpostError) as caught:
        await loner.reserve(["src/a.py"])
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert "AGENTPOST_PROJECT" in caught.value.message


async def test_bad_input_is_refused_with_400(service: Service) -> None:
    alice = await service.agent("alice", project="shop")
    for body in (
        {"paths": ["src/a.py"], "holder": "bob"},  # unknown fields are refused
        {"paths": ["/etc/passwd"]},
        {"paths": []},
        {"paths": ["a"], "ttl_s": 0},
    ):
        answer = await alice.post("/v1/reservations", json=body)
        assert answer.status_code == 400, (body, answer.text)
        assert answer.json()["error"]["code"] == "invalid_argument"


async def test_past_the_live_limit_reserve_is_a_409_naming_the_limit(service: Service) -> None:
    alice = await service.agent("alice", project="shop")
    for folder in ("a", "b"):
        answer = await alice.post(
            "/v1/reservations", json={"paths": [f"{folder}/{n}" for n in range(MAX_PATHS)]}
        )
        assert answer.status_code == 200, answer.text
    answer = await alice.post("/v1/reservations", json={"paths": ["c"]})
    assert answer.status_code == 409, answer.text
    error = answer.json()["error"]
    assert (error["code"], error["details"]) == ("conflict", {"limit": MAX_LIVE})
    listed = await alice.get("/v1/reservations")
    assert len(listed.json()["reservations"]) == MAX_LIVE


async def test_the_coord_tools_reserve_over_mcp_http(service: Service) -> None:
    alice_key = await service.create_agent("alice", project="shop")
    bob = await service.agent("bob", project="shop")
    await bob.post("/v1/reservations", json={"paths": ["docs/*"]})
    headers = {"Authorization": f"Bearer {alice_key}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(f"{service.url}/mcp", http_client=http)) as client,
    ):
        listed = {tool.name for tool in (await client.list_tools()).tools}
        assert {"reserve", "renew_reservations", "release_reservations", "reservations"} <= listed
        result = await client.call_tool("reserve", {"paths": ["docs/guide.md", "src/*"]})
        assert not result.is_error
        assert result.structured_content is not None
        assert [r["path"] for r in result.structured_content["granted"]] == ["src/*"]
        assert [c["holder"] for c in result.structured_content["conflicts"]] == ["bob"]
