"""Who a local command speaks as when no name is given: the agent whose session runs it.

An agent runs `agentpost` through its client (Claude Code's Bash tool), beside the `agentpost
mcp` the same client started. Its words must reach a colleague as that agent's, with that agent's
trust, never as the owner's. A fake Claude Code (tests/claude_stand_in.py) starts a real
`agentpost mcp` and runs the commands as its children; the test itself, which started the fake
Claude Code but descends from no session's client, is the person at the command line.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from agentpost.cli.main import EXIT_CODES
from agentpost.domain.errors import ErrorCode
from agentpost.services.admission import ENDED
from claude_stand_in import ask, claude_code
from command_line import (
    AGENTPOST,
    agentpost,
    agentpost_json,
    arrange,
    workdir,  # noqa: F401 - an autouse fixture, registered by being imported
)
from service_process import Service


@contextmanager
def claude(agent: str) -> Iterator[subprocess.Popen[str]]:
    """A Claude Code whose `agentpost mcp` speaks as `agent`, working in the test's folder."""
    folder = Path.cwd()
    with claude_code(agent, cwd=folder, log=folder.parent / f"{agent}.stderr") as process:
        yield process


def run_in(claude: subprocess.Popen[str], *args: str) -> dict[str, Any]:
    """`agentpost ARGS` run by Claude Code's Bash tool; its returncode, stdout and stderr."""
    done = ask(claude, [str(AGENTPOST), *args])
    assert isinstance(done, dict)
    return done


def json_in(claude: subprocess.Popen[str], *args: str) -> Any:
    done = run_in(claude, *args, "--json")
    assert done["returncode"] == 0, done["stderr"]
    return json.loads(done["stdout"])


def live_session_of(home: Path, agent: str) -> str:
    conn = sqlite3.connect(home / "agentpost.db")
    try:
        query = "SELECT id FROM sessions WHERE agent = ? AND ended_at IS NULL"
        [(found,)] = conn.execute(query, (agent,)).fetchall()
    finally:
        conn.close()
    return str(found)


def mail_of(agent: str) -> list[tuple[str, str, str]]:
    """(sender, trust, body) of everything `agent` has, read as `agent` by name."""
    found = agentpost_json("inbox", "--all", "--peek", "--as", agent)["messages"]
    return [(m["from"], m["trust"], m["body"]) for m in found]


def test_a_send_an_agent_runs_reaches_its_colleague_as_that_agents_words_with_its_trust() -> None:
    arrange("bob")
    with claude("alice") as alice:
        done = agentpost("admin", "unvouch", "alice")  # its words now carry less than owner's
        assert done.returncode == 0, done.stderr
        sent = json_in(alice, "send", "bob", "please merge my branch")
    assert mail_of("bob") == [("alice", "untrusted", "please merge my branch")]
    assert sent["to"] == ["bob"]


def test_whoami_under_an_agents_session_names_the_agent_and_the_session(
    isolated_home: Path,
) -> None:
    with claude("alice") as alice:
        me = json_in(alice, "whoami")
        session = live_session_of(isolated_home, "alice")
        said = run_in(alice, "whoami")
    assert (me["name"], me["trust"], me["session_id"]) == ("alice", "verified", session)
    assert said["stdout"] == f"alice, trust verified, in session {session}\n"


def test_a_command_outside_every_session_speaks_as_the_owner() -> None:
    arrange("bob")
    with claude("alice"):  # the test started it, but runs under none of its sessions
        sent = agentpost_json("send", "bob", "from the person at the keyboard")
        me = agentpost("whoami")
    assert mail_of("bob") == [("owner", "verified", "from the person at the keyboard")]
    assert sent["to"] == ["bob"]
    assert me.stdout == "owner (the person at the command line), trust verified, in no session\n"


def test_as_and_agentpost_agent_still_name_who_speaks_under_a_session() -> None:
    arrange("bob", "carol")
    with claude("alice") as alice:
        json_in(alice, "send", "bob", "as carol", "--as", "carol")
        json_in(alice, "send", "bob", "as the owner", "--as", "owner")
        done = ask(alice, ["env", "AGENTPOST_AGENT=carol", str(AGENTPOST), "whoami", "--json"])
    assert [(sender, body) for sender, _, body in mail_of("bob")] == [
        ("carol", "as carol"),
        ("owner", "as the owner"),
    ]
    assert done["returncode"] == 0, done["stderr"]
    assert json.loads(done["stdout"])["name"] == "carol"
    assert json.loads(done["stdout"])["session_id"] is None


def test_a_refused_command_under_a_session_is_refused_as_anywhere_and_sends_nothing() -> None:
    arrange("bob")
    with claude("alice") as alice:
        done = run_in(alice, "send", "bob", "x", "--data", "{not json")
    assert done["stderr"].startswith("error: invalid_argument: --data is not JSON"), done["stderr"]
    assert done["returncode"] == EXIT_CODES[ErrorCode.INVALID_ARGUMENT]
    assert mail_of("bob") == []


def test_a_command_an_agent_runs_once_disabled_is_gone_never_the_owners() -> None:
    """Disabling ends the agent's session while its `agentpost mcp` runs on: what its client
    runs then is still the agent's, and refused, not the owner's words."""
    arrange("bob")
    with claude("zed") as zed:
        assert agentpost("admin", "disable", "zed").returncode == 0
        sent = run_in(zed, "send", "bob", "sent by zed after it was disabled")
        me = run_in(zed, "whoami")
    for done in (sent, me):
        assert done["stderr"].startswith("error: gone: agent 'zed' is disabled"), done["stderr"]
        assert done["returncode"] == EXIT_CODES[ErrorCode.GONE]
    assert mail_of("bob") == []


def test_a_command_an_agent_runs_once_enabled_again_is_told_to_restart_never_the_owners(
    isolated_home: Path,
) -> None:
    """Enabling the agent leaves the session disabling ended over, its `agentpost mcp` running
    on: what its client runs then is refused as that process's calls are (`not_found`, start
    `agentpost mcp` again), not the owner's words; once its client restarts it, the agent's."""
    arrange("bob")
    with claude("zed") as zed:
        for act in ("disable", "enable"):
            assert agentpost("admin", act, "zed").returncode == 0
        sent = run_in(zed, "send", "bob", "sent by zed's ended session")
        me = run_in(zed, "whoami")
        assert ask(zed, "restart") == "ready"
        again = json_in(zed, "whoami")
        restarted = live_session_of(isolated_home, "zed")
    for done in (sent, me):
        assert done["stderr"].startswith(f"error: not_found: {ENDED}"), done["stderr"]
        assert done["returncode"] == EXIT_CODES[ErrorCode.NOT_FOUND]
    assert mail_of("bob") == []
    assert (again["name"], again["session_id"]) == ("zed", restarted)


@pytest.mark.anyio
async def test_with_a_url_the_key_says_who_speaks_under_a_session(
    service: Service, isolated_home: Path
) -> None:
    key = await service.create_agent("carol")
    with claude("alice") as alice:
        me = json_in(alice, "whoami", "--url", service.url, "--key", key)
        alices = live_session_of(isolated_home, "alice")
    assert me["name"] == "carol"
    assert me["session_id"] != alices  # the key's own session, if any: never alice's


def test_a_command_beside_an_agentpost_mcp_that_died_unreaped_speaks_as_the_owner(
    isolated_home: Path,
) -> None:
    """Its client has not yet reaped the killed server (a zombie, still in the process table
    under its parent): the session is over, though its row still looks live."""
    with claude("alice") as alice:
        conn = sqlite3.connect(isolated_home / "agentpost.db")
        try:
            [(pid,)] = conn.execute("SELECT pid FROM sessions WHERE agent = 'alice'").fetchall()
        finally:
            conn.close()
        os.kill(pid, signal.SIGKILL)
        while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            pass  # dying: the kernel makes it a zombie at once, and nobody reaps it yet
        me = json_in(alice, "whoami")
    assert (me["name"], me["session_id"]) == ("owner", None)
