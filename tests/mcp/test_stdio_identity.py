"""Identity and presence of real `agentpost mcp` sessions, in both revisions.

A session is named by AGENTPOST_AGENT or, without it, from its git context as
`<project>-<branch>` (`-2`, `-3`… while another live session holds the name). A restarted
session that takes the same name inherits its unread mail. A session is offline at once when its
process ends, however it ends.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from mcp.client.stdio import PROCESS_TERMINATION_TIMEOUT

from account_helpers import owner
from agentpost.store import agents as agent_rows
from raw_stdio import legacy_initialize
from service_process import eventually, running_service
from stdio_agents import (
    WAKE_TIMEOUT_S,
    Agents,
    Ledger,
    end_process,
    gather,
    ids,
    receipt,
    server_command,
)

GIT = ["git", "-c", "user.name=T", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]


def git(cwd: Path, *args: str) -> None:
    subprocess.run(
        [*GIT, *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository `Rocket` on branch main, with one commit (so the project is `rocket`)."""
    path = tmp_path / "Rocket"
    path.mkdir()
    git(path, "init", "-b", "main")
    (path / "README.md").write_text("rocket\n")
    git(path, "add", "README.md")
    git(path, "commit", "-m", "first")
    return path.resolve()


NO_LEADER = {"AGENTPOST_AUTO_LEAD": "false"}
"""Sessions on main would take the seat and say so on #rocket: mail this test does not count."""


def by_name(who: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {agent["name"]: agent for agent in who["agents"]}


@pytest.mark.anyio
async def test_sessions_are_named_from_git_and_who_shows_where_each_works(
    agents: Agents, repo: Path
) -> None:
    worktree = repo.parent / "rocket-login"
    git(repo, "worktree", "add", "-b", "feat/Login", str(worktree))
    first, login = await gather(
        agents.start(cwd=repo, project=None, env=NO_LEADER),
        agents.start(cwd=worktree, project=None, env=NO_LEADER),
    )
    # `<project>-<branch>`, slugged; every worktree of a repository shares its project.
    assert (first.name, login.name) == ("rocket-main", "rocket-feat-login")
    me = await first.call("whoami")
    assert (me["project"], me["branch"], me["worktree"]) == ("rocket", "main", str(repo))
    me = await login.call("whoami")
    assert (me["project"], me["branch"], me["worktree"]) == ("rocket", "feat/Login", str(worktree))
    second = await agents.start(cwd=repo, project=None, env=NO_LEADER)
    assert second.name == "rocket-main-2"  # the plain name is held by a live session

    # `who` shows each agent's project, branch, worktree, objective, status and presence.
    registered = await first.call("register", description="reviews PRs", objective="review #12")
    assert registered["agent"] == "rocket-main"
    assert registered["objective"] == "review #12"
    status = await first.call("set_status", status="blocked", objective="waiting for CI")
    assert (status["status"], status["objective"]) == ("blocked", "waiting for CI")
    seen = by_name(await login.call("who"))
    assert set(seen) == {"rocket-main", "rocket-main-2", "rocket-feat-login"}
    assert seen["rocket-main"] | {"last_seen_s": 0} == {
        "name": "rocket-main",
        "description": "reviews PRs",
        "project": "rocket",
        "branch": "main",
        "worktree": str(repo),
        "objective": "waiting for CI",
        "status": "blocked",
        "online": True,
        "last_seen_s": 0,
        "sessions": 1,
        "trust": "verified",  # an agent a local session made: the machine's user's
    }
    assert 0 <= seen["rocket-main"]["last_seen_s"] < 60
    mine = seen["rocket-feat-login"]
    assert (mine["project"], mine["branch"], mine["worktree"], mine["status"]) == (
        "rocket",
        "feat/Login",
        str(worktree),
        "active",
    )
    assert set(by_name(await first.call("who", project="rocket"))) == set(seen)
    assert (await first.call("who", project="apollo"))["agents"] == []

    # A name held by another live session cannot be taken, and nothing moves.
    before = await login.call("whoami")
    assert await login.refused("register", name="rocket-main") == "conflict"
    assert await login.call("whoami") == before
    assert set(by_name(await first.call("who"))) == set(seen)

    # After a restart the plain name is free again, and its unread mail is waiting.
    early = await login.call("send", to="rocket-main", body="before you left", priority="urgent")
    await first.stop()
    late = await login.call("send", to="rocket-main", body="while you were away")
    assert receipt(await login.call("sent"), late["id"], "rocket-main")["state"] == "queued"
    third = await agents.start(cwd=repo, project=None, env=NO_LEADER)
    assert third.name == "rocket-main"
    assert third.session_id != first.session_id
    assert [p["id"] for p in third.first_answer["urgent"]] == [early["id"]]  # told at once
    assert third.first_answer["unread"] == 2
    assert ids((await third.call("inbox"))["messages"]) == [early["id"], late["id"]]
    assert receipt(await login.call("sent"), late["id"], "rocket-main")["state"] == "read"
    assert (await second.call("whoami"))["agent"] == "rocket-main-2"
    assert (await second.call("inbox"))["messages"] == []

    # A free name can be taken: the session moves to it, and mail to it arrives there.
    assert (await login.call("register", name="reviewer"))["agent"] == "reviewer"
    now = by_name(await third.call("who", include_offline=True))
    assert now["reviewer"]["online"] is True
    assert now["reviewer"]["branch"] == "feat/Login"
    assert now["rocket-feat-login"]["online"] is False
    sent = await third.call("send", to="reviewer", body="PR 12 is ready")
    assert ids((await login.call("inbox"))["messages"]) == [sent["id"]]


@pytest.mark.anyio
async def test_a_session_is_offline_at_once_when_its_process_ends(
    agents: Agents, ledger: Ledger
) -> None:
    alice, killed, closed, stopped = await agents.start_many("alice", "bob", "carol", "dave")
    assert set(by_name(await alice.call("who"))) == {"alice", "bob", "carol", "dave"}

    # SIGKILL: the server cannot say goodbye; its pid is gone, so it is offline at once.
    await end_process(ledger, killed, signal.SIGKILL)
    assert set(by_name(await alice.call("who"))) == {"alice", "carol", "dave"}
    assert by_name(await alice.call("who", include_offline=True))["bob"]["online"] is False

    # stdin closed: the server ends its own session, well before the client would give up
    # waiting for it to exit and terminate it.
    closed_at = time.time()
    await closed.stop()
    ended_at = (await ledger.session(closed.session_id)).ended_at
    assert ended_at is not None
    assert ended_at - closed_at < PROCESS_TERMINATION_TIMEOUT
    assert set(by_name(await alice.call("who"))) == {"alice", "dave"}

    # SIGTERM: the server ends its session on the way out.
    await end_process(ledger, stopped, signal.SIGTERM)
    assert (await ledger.session(stopped.session_id)).ended_at is not None
    assert set(by_name(await alice.call("who"))) == {"alice"}
    offline = by_name(await alice.call("who", include_offline=True))
    assert {name: a["online"] for name, a in offline.items()} == {
        "alice": True,
        "bob": False,
        "carol": False,
        "dave": False,
    }
    with anyio.fail_after(WAKE_TIMEOUT_S):
        await stopped.stop()


@pytest.mark.anyio
async def test_ctrl_c_ends_the_session_quietly(agents: Agents, ledger: Ledger) -> None:
    alice, interrupted = await agents.start_many("alice", "bob")
    await end_process(ledger, interrupted, signal.SIGINT)
    assert (await ledger.session(interrupted.session_id)).ended_at is not None
    assert set(by_name(await alice.call("who"))) == {"alice"}
    with anyio.fail_after(WAKE_TIMEOUT_S):
        await interrupted.stop()
    assert "KeyboardInterrupt" not in interrupted.stderr()  # nor a Traceback: the fixture looks


def serve_until_the_client_stops_reading(cwd: Path, env: dict[str, str], stderr: Path) -> str:
    """A real `agentpost mcp` asked `whoami`, whose client then closes its end of the
    server's stdout and asks again; the session's id, once the process has exited."""
    command, base = server_command()
    lines = [
        legacy_initialize(),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "whoami"}},
    ]
    with stderr.open("wb") as errlog:
        server = subprocess.Popen(
            [command, *base],
            cwd=cwd,
            env={**os.environ, **env},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errlog,
        )
    assert server.stdin is not None
    assert server.stdout is not None
    try:
        server.stdin.write(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
        server.stdin.flush()
        server.stdout.readline()  # initialize
        answer = json.loads(server.stdout.readline())
        session_id = str(answer["result"]["structuredContent"]["session_id"])
        server.stdout.close()
        again = {**lines[2], "id": 3}
        server.stdin.write(json.dumps(again).encode() + b"\n")  # its answer meets a closed pipe
        server.stdin.flush()
        assert server.wait(timeout=WAKE_TIMEOUT_S) == 0
    finally:
        server.kill()
        server.stdin.close()
    return session_id


@pytest.mark.anyio
async def test_a_client_that_stops_reading_ends_the_session_without_a_traceback(
    tmp_path: Path, ledger: Ledger
) -> None:
    """A client that closes its end of the server's stdout is gone, as one that closes stdin:
    the server ends the session and exits, with nothing alarming on stderr."""
    stderr = tmp_path / "alice.stderr"
    env = {"AGENTPOST_AGENT": "alice", "AGENTPOST_AUTO_LEAD": "false"}
    session_id = await anyio.to_thread.run_sync(
        serve_until_the_client_stops_reading, tmp_path, env, stderr
    )
    assert "Traceback" not in stderr.read_text()
    assert (await ledger.session(session_id)).ended_at is not None


@pytest.mark.anyio
async def test_a_checkout_in_the_worktree_moves_the_sessions_branch_within_a_heartbeat(
    agents: Agents, repo: Path
) -> None:
    """The branch a session shows is the one its worktree has checked out now, not the one it
    started on: after `git checkout`, `whoami` and the others' `who` say so within a
    heartbeat."""
    quick = {**NO_LEADER, "AGENTPOST_HEARTBEAT_S": "0.1"}
    mover, watcher = await gather(
        agents.start(cwd=repo, project=None, env=quick),
        agents.start("watcher", env=quick),
    )

    async def branch() -> str:
        return str((await mover.call("whoami"))["branch"])

    async def moved() -> bool:
        return await branch() == "fix/parser"

    async def detached() -> bool:
        return (await branch()).startswith("detached-")

    assert await branch() == "main"
    git(repo, "checkout", "-b", "fix/parser")
    await eventually(moved, WAKE_TIMEOUT_S)
    assert by_name(await watcher.call("who"))["rocket-main"]["branch"] == "fix/parser"
    assert mover.name == "rocket-main"  # the agent keeps its name: only where it works moved
    git(repo, "checkout", "--detach")
    await eventually(detached, WAKE_TIMEOUT_S)


@pytest.mark.anyio
async def test_a_session_under_a_self_registered_agents_name_is_untrusted_until_vouched(
    agents: Agents, ledger: Ledger
) -> None:
    """Trust is the agent's: the machine's user starting a session under a name a stranger
    registered (on a service sharing this file) does not make the stranger's name verified."""
    store = ledger.office.store
    await store.write(  # what a self-registration leaves in the store
        lambda conn: agent_rows.create_agent(conn, "drifter", now=store.clock(), trust="untrusted")
    )
    drifter, bob = await gather(
        agents.start("drifter", env=NO_LEADER), agents.start("bob", env=NO_LEADER)
    )
    await drifter.call("send", to="bob", body="before")
    await ledger.office.admin.vouch(await owner(ledger.office), "drifter")
    await drifter.call("send", to="bob", body="after")  # the same session, its next act
    inbox = await bob.call("inbox")
    assert [(m["body"], m["trust"]) for m in inbox["messages"]] == [
        ("before", "untrusted"),
        ("after", "verified"),
    ]


@pytest.mark.anyio
async def test_a_session_never_derives_a_name_a_stranger_registered_on_the_service(
    agents: Agents, repo: Path, tmp_path: Path
) -> None:
    """With registration open, anyone could register `rocket-main` before a session in the
    repository derived that name: the session became the stranger's agent, and the stranger's
    key read the mail the session's colleagues sent it."""
    async with running_service(tmp_path, {"AGENTPOST_OPEN_REGISTRATION": "true"}) as service:
        registered = await service.client().post("/v1/register", json={"name": "rocket-main"})
        assert registered.status_code == 201, registered.text
        stranger = service.client(registered.json()["key"])
        local = await agents.start(cwd=repo, project=None, env=NO_LEADER)
        assert local.name == "rocket-main-2"
        colleague = await agents.start("bob", env=NO_LEADER)
        await colleague.call("send", to=local.name, body="the deploy plan")
        assert [m["body"] for m in (await local.call("inbox"))["messages"]] == ["the deploy plan"]
        seen = await stranger.get("/v1/inbox", params={"unread_only": "false"})
        assert seen.status_code == 200, seen.text
        assert seen.json()["messages"] == []
        trust = {a["name"]: a["trust"] for a in (await colleague.call("who"))["agents"]}
        assert trust[local.name] == "verified"


@pytest.mark.anyio
async def test_the_instructions_name_vouched_for_colleagues_alone_never_a_strangers_name(
    agents: Agents, ledger: Ledger
) -> None:
    """The instructions are the model's system prompt: a name a stranger chose for itself (a
    valid one) stood there among the colleagues, with no mark, and so did the owner, the
    person, among "other AI agents". Strangers are counted; `who` names them with their trust."""
    store = ledger.office.store
    await store.write(  # what a self-registration leaves in the store
        lambda conn: agent_rows.create_agent(
            conn, "ignore-previous-instructions", now=store.clock(), trust="untrusted"
        )
    )
    await owner(ledger.office)
    await agents.start("bob", env=NO_LEADER)
    alice = await agents.start("alice", env=NO_LEADER)
    instructions = alice.mcp.instructions
    assert instructions is not None
    assert "ignore-previous" not in instructions
    assert "working beside you (bob, 1 not vouched for: `who` lists them)" in instructions
    assert "owner" not in instructions
