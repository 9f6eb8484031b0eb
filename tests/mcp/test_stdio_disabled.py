"""A running `agentpost mcp` whose agent the owner disables acts no more, reads included."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from agentpost.domain.models import Caller
from agentpost.services.channels import members
from command_line import agentpost
from git_repo import git, make_repo
from stdio_agents import INBOX_URI, Agent, Agents, Ledger

pytestmark = pytest.mark.anyio


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """Repository `forge` (the project) with a file to reserve."""
    root = make_repo(tmp_path / "forge")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("app\n")
    git(root, "add", ".")
    git(root, "commit", "-m", "files")
    return root


async def owner_does(*args: str) -> None:
    """What the owner types at the command line, on this test's post office."""
    done = await anyio.to_thread.run_sync(lambda: agentpost("admin", *args))
    assert done.returncode == 0, done.stderr


async def unread_of(ledger: Ledger, name: str) -> list[str]:
    """The bodies of the agent's unread mail, looked at without marking it."""
    inbox = await ledger.office.mailbox.inbox(Caller(name), peek=True, limit=50)
    return [m.body for m in inbox.messages]


async def test_a_session_whose_agent_is_disabled_is_refused_gone_and_changes_nothing(
    agents: Agents, ledger: Ledger, repo: Path
) -> None:
    zed = await agents.start("zed", cwd=repo, project=None)
    amy = await agents.start("amy", cwd=repo, project=None)
    await amy.call("send", to="zed", body="for zed when it is back")
    await zed.call("set_status", status="active", objective="parser")
    await owner_does("disable", "zed")

    for tool, arguments in (
        ("reserve", {"paths": ["src/app.py"]}),
        ("join", {"channel": "#ops"}),
        ("register", {"objective": "still here"}),
        ("set_status", {"status": "idle", "objective": "still here"}),
        ("inbox", {}),
        ("whoami", {}),
        ("send", {"to": "amy", "body": "still here?"}),
    ):
        assert await zed.refused(tool, **arguments) == "gone", tool
    with pytest.raises(MCPError, match=r"^gone: "):
        await zed.mcp.read_resource(INBOX_URI)

    assert (await amy.call("reserve", paths=["src/app.py"]))["conflicts"] == []
    assert "for zed when it is back" in await unread_of(ledger, "zed")
    assert await ledger.office.store.read(lambda conn: members(conn, "#ops")) == []
    assert (await ledger.session(zed.session_id)).objective == "parser"


async def test_once_enabled_again_a_new_session_acts_and_the_old_one_is_told_to_restart(
    agents: Agents, ledger: Ledger, repo: Path
) -> None:
    zed = await agents.start("zed", cwd=repo, project=None)
    amy = await agents.start("amy", cwd=repo, project=None)
    await amy.call("send", to="zed", body="for zed when it is back")
    await owner_does("disable", "zed")
    await owner_does("enable", "zed")

    assert await zed.refused("reserve", paths=["src/app.py"]) == "not_found"
    assert await zed.refused("inbox") == "not_found"
    assert "for zed when it is back" in await unread_of(ledger, "zed")

    again: Agent = await agents.start("zed", cwd=repo, project=None)
    inbox = await again.call("inbox", limit=50)
    assert "for zed when it is back" in [m["body"] for m in inbox["messages"]]
    assert (await again.call("reserve", paths=["src/app.py"]))["conflicts"] == []
