"""One's own profile and who is at work, over REST: `PATCH /v1/me`, sessions, presence."""

from __future__ import annotations

from typing import Any

import pytest

from service_process import Service

pytestmark = pytest.mark.anyio


def profile(answer: Any) -> dict[str, Any]:
    """What `GET /v1/me` says, but the time since the last request, which moves on."""
    return {k: v for k, v in answer.json().items() if k != "last_seen_s"}


async def presence_of(client: Any, name: str) -> list[dict[str, Any]]:
    found = (await client.get("/v1/presence")).json()["agents"]
    return [p for p in found if p["name"] == name]


async def test_a_refused_profile_change_changes_nothing_of_the_session_either(
    service: Service,
) -> None:
    alice = await service.agent("alice")
    assert (await alice.patch("/v1/me", json={"objective": "ship v2"})).status_code == 200
    before = await presence_of(alice, "alice")
    me = profile(await alice.get("/v1/me"))
    for change, status, code in (
        ({"status": "blocked", "objective": "other", "description": "d" * 3000}, 413, "too_large"),
        ({"status": "done", "objective": "other", "project": "Not A Project!"}, 400, None),
    ):
        answer = await alice.patch("/v1/me", json=change)
        assert answer.status_code == status, answer.text
        assert answer.json()["error"]["code"] == (code or "invalid_argument")
    assert (
        [(p["status"], p["objective"]) for p in await presence_of(alice, "alice")]
        == [(p["status"], p["objective"]) for p in before]
        == [("active", "ship v2")]
    )
    assert profile(await alice.get("/v1/me")) == me


async def test_an_over_long_capability_is_refused_quoting_only_a_prefix_of_it(
    service: Service,
) -> None:
    alice = await service.agent("alice")
    me = profile(await alice.get("/v1/me"))
    answer = await alice.patch("/v1/me", json={"capabilities": ["python", "c" * 100_000]})
    assert answer.status_code == 400, answer.text[:500]
    error = answer.json()["error"]
    assert error["code"] == "invalid_argument"
    assert "a capability is at most 64 characters" in error["message"]
    assert error["details"]["limit"] == 64
    assert len(answer.content) < 500
    assert profile(await alice.get("/v1/me")) == me


async def test_an_ended_session_does_not_say_what_an_agent_online_is_doing(
    service: Service,
) -> None:
    alice = await service.agent("alice")
    at_work = {"project": "alpha", "branch": "main", "objective": "live work"}
    live = (await alice.post("/v1/sessions", json=at_work)).json()["session_id"]
    on_live = {"Agentpost-Session": live}
    finished = {"project": "beta", "branch": "old-feature", "objective": "finished thing"}
    ended = (await alice.post("/v1/sessions", json=finished)).json()["session_id"]
    await alice.patch("/v1/me", json={"status": "done"}, headers={"Agentpost-Session": ended})
    assert (await alice.delete(f"/v1/sessions/{ended}", headers=on_live)).status_code == 200

    bob = await service.agent("bob")
    (found,) = await presence_of(bob, "alice")
    assert found["online"] is True
    assert (found["project"], found["branch"], found["objective"]) in (
        ("alpha", "main", "live work"),
        (None, None, ""),  # the key's own session, touched by the requests above
    )
    assert found["status"] != "done"


async def test_a_command_run_with_the_key_does_not_hide_what_the_agents_session_is_doing(
    service: Service,
) -> None:
    # `agentpost mcp --url` works in a minted session; a command run with the same key (a
    # read) opens the key's own session beside it, which says nothing of the agent's work.
    alice = await service.agent("alice")
    at_work = {"project": "alpha", "worktree": "/src/alpha", "branch": "fix-parser"}
    minted = (await alice.post("/v1/sessions", json=at_work)).json()["session_id"]
    on_it = {"Agentpost-Session": minted}
    assert (await alice.patch("/v1/me", json={"objective": "fixing it"}, headers=on_it)).is_success
    assert (await alice.get("/v1/inbox", params={"peek": True})).status_code == 200

    bob = await service.agent("bob")
    (found,) = await presence_of(bob, "alice")
    assert found["sessions"] == 2
    assert (found["branch"], found["worktree"], found["objective"]) == (
        "fix-parser",
        "/src/alpha",
        "fixing it",
    )
    # Once the key's own session says what it does, it is the one that said so last.
    assert (await alice.patch("/v1/me", json={"objective": "reviewing"})).status_code == 200
    (found,) = await presence_of(bob, "alice")
    assert (found["branch"], found["objective"]) == (None, "reviewing")


async def test_a_minted_session_is_the_agents_only_one_and_ends_offline(service: Service) -> None:
    """Minting names no session yet: it does not open the key's own beside the minted one."""
    alice = await service.agent("alice")
    minted = (await alice.post("/v1/sessions", json={"project": "alpha"})).json()["session_id"]
    on_it = {"Agentpost-Session": minted}
    assert (await alice.get("/v1/inbox", headers=on_it)).status_code == 200
    bob = await service.agent("bob")
    [present] = await presence_of(bob, "alice")
    assert (present["online"], present["sessions"]) == (True, 1)
    assert (await alice.delete(f"/v1/sessions/{minted}", headers=on_it)).status_code == 200
    assert await presence_of(bob, "alice") == []


async def test_beating_and_ending_a_session_by_its_id_opens_no_other(service: Service) -> None:
    """The session named in the path is the one spoken of: the key's own is neither opened
    nor revived, so the agent is offline once that session ends."""
    alice = await service.agent("alice")
    minted = (await alice.post("/v1/sessions", json={})).json()["session_id"]
    beat = await alice.post(f"/v1/sessions/{minted}/heartbeat")
    assert beat.status_code == 200, beat.text
    bob = await service.agent("bob")
    [present] = await presence_of(bob, "alice")
    assert (present["online"], present["sessions"]) == (True, 1)
    assert (await alice.delete(f"/v1/sessions/{minted}")).status_code == 200
    assert await presence_of(bob, "alice") == []


async def test_a_heartbeat_may_move_its_session_to_another_branch(service: Service) -> None:
    """A remote-backed stdio session's worktree checks out another branch: its heartbeat says
    so. One without a body leaves the branch; a branch past the limit changes nothing."""
    alice = await service.agent("alice")
    minted = (await alice.post("/v1/sessions", json={"branch": "main"})).json()["session_id"]
    bob = await service.agent("bob")
    moved = await alice.post(f"/v1/sessions/{minted}/heartbeat", json={"branch": "fix/parser"})
    assert moved.status_code == 200, moved.text
    assert (await alice.post(f"/v1/sessions/{minted}/heartbeat")).status_code == 200
    huge = await alice.post(f"/v1/sessions/{minted}/heartbeat", json={"branch": "b" * 256})
    assert (huge.status_code, huge.json()["error"]["code"]) == (413, "too_large")
    assert huge.json()["error"]["details"] == {"limit": 255, "size": 256}
    for forged in ("main\nleader: mallory", "main\u2028x"):
        refused = await alice.post(f"/v1/sessions/{minted}/heartbeat", json={"branch": forged})
        assert (refused.status_code, refused.json()["error"]["code"]) == (400, "invalid_argument")
        assert refused.json()["error"]["message"] == "branch must be one line"
    [present] = await presence_of(bob, "alice")
    assert present["branch"] == "fix/parser"


async def test_a_key_cannot_mint_sessions_without_end(service: Service) -> None:
    """Each mint is a row: past the limit, the oldest ended session makes room; while every
    one may be in use, the next is refused."""
    alice = await service.agent("alice")
    minted = []
    while True:
        answer = await alice.post("/v1/sessions", json={})
        if answer.status_code != 201:
            break
        minted.append(answer.json()["session_id"])
    assert answer.status_code == 409, answer.text
    assert answer.json()["error"]["code"] == "conflict"
    assert answer.json()["error"]["details"] == {"limit": 100}
    assert len(minted) == 100  # minting speaks for no session: the key's own is not made
    ended = await alice.delete(
        f"/v1/sessions/{minted[0]}", headers={"Agentpost-Session": minted[1]}
    )
    assert ended.status_code == 200
    assert (await alice.post("/v1/sessions", json={})).status_code == 201


async def test_moving_to_another_project_moves_the_keys_own_session_with_it(
    service: Service,
) -> None:
    alice = await service.agent("alice", project="alpha")
    await alice.get("/v1/me")  # the key's own session, opened in alpha
    moved = await alice.patch("/v1/me", json={"project": "beta"})
    assert moved.status_code == 200, moved.text

    bob = await service.agent("bob")
    assert [p["project"] for p in await presence_of(bob, "alice")] == ["beta"]
    assert [p["name"] for p in (await bob.get("/v1/presence?project=alpha")).json()["agents"]] == []


async def test_moving_project_leaves_a_registered_sessions_own_project(service: Service) -> None:
    alice = await service.agent("alice", project="alpha")
    minted = await alice.post("/v1/sessions", json={"project": "gamma", "branch": "main"})
    on_it = {"Agentpost-Session": minted.json()["session_id"]}
    moved = await alice.patch("/v1/me", json={"project": "beta"}, headers=on_it)
    assert moved.status_code == 200, moved.text

    bob = await service.agent("bob")
    # A session registered in a worktree says where it works, whatever the directory says.
    assert [p["project"] for p in await presence_of(bob, "alice")] == ["gamma"]


async def test_a_method_a_route_does_not_take_is_refused_naming_the_ones_it_does(
    service: Service,
) -> None:
    alice = await service.agent("alice")
    answer = await alice.delete("/v1/me")
    assert answer.status_code == 405
    assert {"GET", "PATCH"} <= set(answer.headers["allow"].replace(" ", "").split(","))
    error = answer.json()["error"]
    assert error["code"] == "not_found"
    assert error["message"] == "/v1/me takes GET, PATCH, not DELETE"
    assert (await alice.get("/v1/me")).status_code == 200
