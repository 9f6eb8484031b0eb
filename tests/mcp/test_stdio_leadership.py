"""Leadership among real `agentpost mcp` sessions in a real repository and its worktrees.

Sessions on the default branch stand for the seat on their own (`auto_lead`): exactly one wins,
the others take over when it dies, and every change is announced on `#<project>` by `system`.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from git_repo import git, make_repo
from service_process import Service
from stdio_agents import WAKE_TIMEOUT_S, Agent, Agents, Ledger, end_process, gather, text_of

pytestmark = pytest.mark.anyio


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "rocket")


async def seat_when(agent: Agent, ok: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The seat as `agent` sees it, once `ok` says it is as expected (asked every 50 ms)."""
    with anyio.fail_after(WAKE_TIMEOUT_S):
        while True:
            seat = await agent.call("leader")
            if ok(seat):
                return seat
            await anyio.sleep(0.05)


async def seat_once_settled(agent: Agent) -> dict[str, Any]:
    """The seat as `agent` sees it, once somebody holds it."""
    return await seat_when(agent, lambda seat: seat["leader"] is not None)


async def start_remote(
    agents: Agents, service: Service, key: str, repo: Path, env: dict[str, str] | None = None
) -> Agent:
    """`agentpost mcp --url --key` in `repo`'s worktree."""
    params = agents.params(None, env, repo, None)
    params = params.model_copy(update={"args": [*params.args, "--url", service.url, "--key", key]})
    remote = Agent(None, agents.revision, agents.tmp_path / "remote.stderr")
    agents.tried.append(remote)
    with anyio.fail_after(60):
        await agents.group.start(remote.run, params)
    agents.running.append(remote)
    return remote


async def announcements(agent: Agent) -> list[str]:
    found = await agent.call("read_channel", channel="#rocket", limit=50)
    return [m["body"] for m in found["messages"] if m["from"] == "system"]


async def test_of_sessions_starting_together_on_the_default_branch_exactly_one_leads(
    agents: Agents, repo: Path
) -> None:
    feature = repo.parent / "rocket-feature"
    git(repo, "worktree", "add", "-b", "feature", str(feature))
    on_main = await gather(*(agents.start(cwd=repo, project=None) for _ in range(4)))
    other = await agents.start(cwd=feature, project=None)
    seat = await seat_once_settled(other)
    assert seat["project"] == "rocket"
    assert seat["term"] == 1
    assert seat["leader"] in {a.name for a in on_main}
    assert seat["branch"] == "main"
    for agent in [*on_main, other]:
        assert (await agent.call("leader"))["leader"] == seat["leader"]
    assert await announcements(other) == [f"{seat['leader']} now leads rocket (term 1)."]

    # A worktree on another branch may not lead, even when asked.
    assert await other.refused("claim_leadership") == "forbidden"
    # The seat is held: another session on main is told who holds it.
    follower = next(a for a in on_main if a.name != seat["leader"])
    assert await follower.refused("claim_leadership") == "conflict"


async def test_when_the_leader_is_killed_another_session_takes_over_with_a_new_term(
    agents: Agents, repo: Path, ledger: Ledger
) -> None:
    first, second, third = await gather(*(agents.start(cwd=repo, project=None) for _ in range(3)))
    seat = await seat_once_settled(first)
    leader = next(a for a in (first, second, third) if a.name == seat["leader"])
    survivors = [a for a in (first, second, third) if a is not leader]

    await end_process(ledger, leader, signal.SIGKILL)
    now = await seat_when(survivors[0], lambda seat: seat["leader"] not in (None, leader.name))
    assert now["term"] == 2
    assert now["leader"] in {a.name for a in survivors}
    assert (await announcements(survivors[0]))[-1] == (
        f"{now['leader']} now leads rocket (term 2), taking over from {leader.name}."
    )

    # Stepping down frees the seat; the remaining standing session takes it, term 3.
    new_leader = next(a for a in survivors if a.name == now["leader"])
    last = next(a for a in survivors if a is not new_leader)
    released = await new_leader.call("release_leadership")
    assert released["term"] == 2
    taken = await seat_when(last, lambda seat: seat["leader"] == last.name)
    assert taken["term"] == 3
    # A local session may force the seat; the term grows again.
    forced = await new_leader.call("claim_leadership", force=True)
    assert (forced["leader"], forced["term"]) == (new_leader.name, 4)


async def test_a_session_that_checks_out_the_default_branch_stands_for_the_free_seat(
    agents: Agents, repo: Path
) -> None:
    """Standing was decided once, at the start: a session begun on a feature branch never
    stood, even on the default branch after a checkout. It stands afresh at each checkout."""
    git(repo, "checkout", "-q", "-b", "feature")
    agent = await agents.start(cwd=repo, project=None, env={"AGENTPOST_HEARTBEAT_S": "0.3"})
    await anyio.sleep(1)
    assert (await agent.call("leader"))["leader"] is None
    git(repo, "checkout", "-q", "main")
    seat = await seat_once_settled(agent)
    assert (seat["leader"], seat["branch"]) == (agent.name, "main")


async def test_auto_lead_off_leaves_the_seat_to_an_explicit_claim(
    agents: Agents, repo: Path
) -> None:
    agent = await agents.start(cwd=repo, project=None, env={"AGENTPOST_AUTO_LEAD": "false"})
    await anyio.sleep(0.5)
    assert (await agent.call("leader"))["leader"] is None
    claimed = await agent.call("claim_leadership")
    assert (claimed["leader"], claimed["term"]) == (agent.name, 1)


async def test_a_remote_backed_session_on_main_claims_the_free_seat_on_start(
    agents: Agents, service: Service, repo: Path
) -> None:
    key = await service.create_agent("alice")
    remote = await start_remote(agents, service, key, repo)
    seat = await remote.call("leader")
    assert (seat["project"], seat["leader"], seat["term"]) == ("rocket", "alice", 1)
    released = await remote.call("release_leadership")
    assert released["leader"] is None


async def test_a_remote_backed_session_that_checks_out_the_default_branch_takes_the_free_seat(
    agents: Agents, service: Service, repo: Path
) -> None:
    """As a local session does: begun on a feature branch it may not lead; its heartbeat
    carries the checkout of the default branch, and the free seat is its."""
    git(repo, "checkout", "-q", "-b", "feature")
    key = await service.create_agent("alice")
    remote = await start_remote(agents, service, key, repo, {"AGENTPOST_HEARTBEAT_S": "0.3"})
    assert (await remote.call("leader"))["leader"] is None
    git(repo, "checkout", "-q", "main")
    seat = await seat_once_settled(remote)
    assert (seat["leader"], seat["branch"], seat["term"]) == ("alice", "main", 1)


async def test_a_second_window_of_the_leading_agent_is_told_another_session_of_its_own_leads(
    agents: Agents, repo: Path
) -> None:
    """Its refused claim and its release read "carol leads rocket", told to carol: as if
    the claim had won, or the release had been its own seat's."""
    first = await agents.start("carol", cwd=repo, project=None)
    await seat_when(first, lambda seat: seat["leader"] == "carol")
    second = await agents.start("carol", cwd=repo, project=None)
    refused = await second.result("claim_leadership")
    assert refused.is_error
    assert text_of(refused).startswith(
        f"conflict: another session of yours ({first.session_id}) leads rocket (term 1)"
    )
    released = await second.result("release_leadership")
    assert text_of(released).startswith(
        "This session did not lead rocket, another of yours does: nothing changed."
    )
    assert (await second.call("leader"))["session_id"] == first.session_id


async def test_a_remote_backed_session_that_stepped_down_stays_down_when_minted_again(
    agents: Agents, service: Service, repo: Path
) -> None:
    """Its session ended from outside (by the owner, or evicted), the next call minted a new
    one, which took the free seat as it opened: a new term, announced, the step down undone."""
    key = await service.create_agent("alice")
    remote = await start_remote(agents, service, key, repo)
    assert (await remote.call("release_leadership"))["released"] is True
    ended = await service.client(key).delete(f"/v1/sessions/{remote.session_id}")
    assert ended.status_code == 200, ended.text
    again = await remote.call("whoami")
    assert again["session_id"] != remote.session_id
    assert (await remote.call("leader"))["leader"] is None
    claimed = await remote.call("claim_leadership")
    assert (claimed["leader"], claimed["session_id"]) == ("alice", again["session_id"])
