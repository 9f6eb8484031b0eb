"""The commit guard end to end: `agentpost guard install` in a real repository, then real
`git commit`s, refused or let through by the reservations of the test's post office.

Reservations are arranged in-process through the services, by sessions of a live process no
commit descends from (so they stay live, and the guard finds no session of the committer: it
falls back to the worktree, as for a person's commit); every act and observation is git's or the
command line's. A fake Claude Code (tests/cli/_fake_claude.py) commits as the agent of the real
`agentpost mcp` it started.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from agentpost.cli import guard
from agentpost.config import Settings
from agentpost.domain.models import Caller
from agentpost.services import PostOffice
from agentpost.services.local_identity import LocalContext, this_host
from claude_stand_in import ask, claude_code
from service_process import Service

AGENTPOST = Path(sys.executable).with_name("agentpost")
WAIT_S = 30
OUTSIDER_PID = 1
"""init: alive, and no commit's ancestor is its parent, so its sessions are nobody's committer."""


def git_env(**extra: str) -> dict[str, str]:
    """This test's post office, and no git configuration of the machine's."""
    env = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
    }
    env.update(extra)
    return env


def run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=cwd, env=git_env(**env), capture_output=True, text=True, timeout=WAIT_S
    )


def git(repo: Path, *args: str) -> str:
    done = run(["git", *args], repo)
    assert done.returncode == 0, done.stderr
    return done.stdout


def agentpost(repo: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run([str(AGENTPOST), *args], repo, **env)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository `shop` (so its project is `shop`) with one commit."""
    root = tmp_path / "shop"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    for name in ("src/app.py", "src/util.py", "docs/guide.md"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"{name}\n")
    git(root, "add", ".")
    git(root, "commit", "-qm", "start")
    return root


def stage(repo: Path, *files: str) -> None:
    """Change `files` and stage them."""
    for name in files:
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(path.read_text() + "more\n" if path.exists() else "new\n")
    git(repo, "add", *files)


def commit(repo: Path, *files: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Change `files`, stage them and try to commit."""
    stage(repo, *files)
    return run(["git", "commit", "-qm", f"change {' '.join(files)}"], repo, **env)


def reserve(
    agent: str,
    paths: list[str],
    *,
    worktree: str = "/elsewhere/shop",
    exclusive: bool = True,
    reason: str = "rewriting it",
    project: str = "shop",
) -> None:
    """`agent` reserves `paths` of `project` from a live local session (of `OUTSIDER_PID`)."""

    async def main() -> None:
        office = await PostOffice.open(Settings())
        try:
            context = LocalContext(
                host=this_host(), pid=OUTSIDER_PID, project=project, worktree=worktree, branch="x"
            )
            session = await office.presence.open_local_session(context, name=agent)
            caller = Caller(agent, session.id)
            result = await office.reservations.reserve(
                caller, paths, exclusive=exclusive, reason=reason
            )
            assert result.conflicts == []
        finally:
            await office.aclose()

    anyio.run(main)


def installed(repo: Path) -> None:
    done = agentpost(repo, "guard", "install")
    assert done.returncode == 0, done.stderr


# -- refusing and allowing ------------------------------------------------------------------------


def test_a_commit_touching_a_file_another_agent_holds_exclusively_is_refused(repo: Path) -> None:
    installed(repo)
    reserve("bob", ["src/**"])
    done = commit(repo, "src/app.py", "docs/guide.md")
    assert done.returncode == 1
    assert "src/app.py: held by bob as 'src/**' until 20" in done.stderr
    assert "rewriting it" in done.stderr
    assert "AGENTPOST_GUARD=off" in done.stderr
    assert "docs/guide.md" not in done.stderr
    assert git(repo, "rev-list", "--count", "HEAD").strip() == "1"


def test_a_holders_reason_reaches_the_committers_terminal_written_out(repo: Path) -> None:
    """The reason is another agent's text: it must not drive the terminal it is shown on."""
    installed(repo)
    reserve("bob", ["src/**"], reason="mine \x9b2J\u202e\x7f")
    done = commit(repo, "src/app.py")
    assert done.returncode == 1
    for raw in ("\x9b", "\u202e", "\x7f"):
        assert raw not in done.stderr
    assert "mine \\x9b2J\\u202e\\x7f" in done.stderr


def test_a_commit_of_files_nobody_else_holds_goes_through(repo: Path) -> None:
    installed(repo)
    reserve("bob", ["src/app.py"])
    reserve("carol", ["docs/*"], exclusive=False)  # shared: a claim, not a lock
    done = commit(repo, "src/util.py", "docs/guide.md", "README.md")
    assert done.returncode == 0, done.stderr
    assert git(repo, "rev-list", "--count", "HEAD").strip() == "2"


def test_agentpost_guard_off_lets_any_commit_through(repo: Path) -> None:
    installed(repo)
    reserve("bob", ["src/**"])
    done = commit(repo, "src/app.py", AGENTPOST_GUARD="off")
    assert done.returncode == 0, done.stderr


def test_the_holder_commits_its_own_files_by_name(repo: Path) -> None:
    installed(repo)
    reserve("bob", ["src/**"])
    assert commit(repo, "src/app.py", AGENTPOST_AGENT="bob").returncode == 0
    assert commit(repo, "src/app.py", AGENTPOST_AGENT="alice").returncode == 1


def test_the_holder_commits_its_own_files_from_the_worktree_it_reserved_them_in(
    repo: Path,
) -> None:
    installed(repo)
    reserve("bob", ["src/**"], worktree=str(repo))
    done = commit(repo, "src/app.py")
    assert done.returncode == 0, done.stderr


def test_two_agents_in_one_worktree_are_told_apart_by_the_claude_code_that_commits(
    repo: Path,
) -> None:
    installed(repo)
    # From the worktree bob works in too, in the project the stand-in's `agentpost mcp` names.
    reserve("alice", ["src/**"], worktree=str(repo), project="apollo")
    logs = repo.parent
    with (
        claude_code("alice", cwd=repo, log=logs / "alice.stderr", env=git_env()) as alice,
        claude_code("bob", cwd=repo, log=logs / "bob.stderr", env=git_env()) as bob,
    ):
        stage(repo, "src/app.py")
        refused = ask(bob, ["git", "commit", "-qm", "bob's change"])
        assert refused["returncode"] == 1, refused["stderr"]
        assert "src/app.py: held by alice as 'src/**'" in refused["stderr"]
        done = ask(alice, ["git", "commit", "-qm", "alice's change"])
        assert done["returncode"] == 0, done["stderr"]
    assert git(repo, "rev-list", "--count", "HEAD").strip() == "2"


def test_a_project_named_in_claude_codes_settings_for_the_server_holds_for_its_commits(
    repo: Path,
) -> None:
    """`.mcp.json` may give `agentpost mcp` an `AGENTPOST_PROJECT` its commits never see (the
    stand-in's is apollo, the folder's shop): the guard checked shop, saw none of the
    reservations made in apollo, and let every commit through."""
    installed(repo)
    reserve("alice", ["src/app.py"], project="apollo")
    with claude_code("bob", cwd=repo, log=repo.parent / "bob.stderr", env=git_env()) as bob:
        stage(repo, "src/app.py")
        refused = ask(bob, ["git", "commit", "-qm", "bob's change"])
    assert refused["returncode"] == 1, refused["stderr"]
    assert "(project apollo)" in refused["stderr"]
    assert "src/app.py: held by alice" in refused["stderr"]
    assert git(repo, "rev-list", "--count", "HEAD").strip() == "1"


def test_every_worktree_of_the_repository_shares_the_guard(repo: Path, tmp_path: Path) -> None:
    installed(repo)
    linked = tmp_path / "shop-feature"
    git(repo, "worktree", "add", "-q", "-b", "feature", str(linked))
    reserve("bob", ["src/app.py"], worktree=str(repo))
    done = commit(linked, "src/app.py")
    assert done.returncode == 1
    assert "held by bob" in done.stderr


def test_an_unreadable_post_office_warns_and_lets_the_commit_through(repo: Path) -> None:
    installed(repo)
    done = commit(repo, "src/app.py", AGENTPOST_URL="http://127.0.0.1:9", AGENTPOST_KEY="ap_x")
    assert done.returncode == 0
    assert "reservations not checked (unavailable" in done.stderr


@pytest.mark.parametrize(
    "config",
    ['home = "never closed\n', "no_such_setting = 1\n"],
    ids=["invalid-toml", "unknown-key"],
)
def test_a_broken_config_file_warns_and_lets_the_commit_through(
    repo: Path, tmp_path: Path, config: str
) -> None:
    installed(repo)
    reserve("bob", ["src/**"])
    broken = tmp_path / "broken.toml"
    broken.write_text(config)
    done = commit(repo, "src/app.py", AGENTPOST_CONFIG=str(broken))
    assert done.returncode == 0, done.stderr
    assert "reservations not checked (" in done.stderr
    assert "committing anyway" in done.stderr
    assert "Traceback" not in done.stderr
    assert git(repo, "rev-list", "--count", "HEAD").strip() == "2"


@pytest.mark.anyio
async def test_with_a_url_and_key_the_guard_reads_the_remote_service(
    repo: Path, service: Service
) -> None:
    installed(repo)
    bob = await service.agent("bob", project="shop")
    answer = await bob.post("/v1/reservations", json={"paths": ["src/*.py"]})
    assert answer.status_code == 200, answer.text
    alice_key = await service.create_agent("alice", project="shop")
    env = {"AGENTPOST_URL": service.url, "AGENTPOST_KEY": alice_key}
    done = await anyio.to_thread.run_sync(lambda: commit(repo, "src/app.py", **env))
    assert done.returncode == 1, done.stderr
    assert "src/app.py: held by bob as 'src/*.py'" in done.stderr
    git(repo, "restore", "--staged", "src/app.py")
    done = await anyio.to_thread.run_sync(lambda: commit(repo, "docs/guide.md", **env))
    assert done.returncode == 0, done.stderr


async def remote_reservation(
    service: Service, agent: str, worktree: Path | str, project: str = "shop"
) -> str:
    """`agent` (made now, of `project`) reserves `src/*.py` exclusively from a session minted
    in `worktree`, as `agentpost mcp --url` mints one; the agent's key."""
    key = await service.create_agent(agent, project=project)
    client = service.client(key)
    minted = await client.post("/v1/sessions", json={"project": project, "worktree": str(worktree)})
    assert minted.status_code == 201, minted.text
    session = {"Agentpost-Session": minted.json()["session_id"]}
    answer = await client.post("/v1/reservations", json={"paths": ["src/*.py"]}, headers=session)
    assert answer.status_code == 200, answer.text
    assert answer.json()["granted"], answer.text
    return key


@pytest.mark.anyio
async def test_with_a_url_and_key_another_agents_claim_from_a_worktree_of_the_same_path_is_held(
    repo: Path, service: Service
) -> None:
    # Over the network a worktree's path says nothing of whose it is: two containers, each
    # with the repository at /workspace, are two agents' worktrees. The key says who commits.
    installed(repo)
    await remote_reservation(service, "bob", repo)
    alice_key = await service.create_agent("alice", project="shop")
    env = {"AGENTPOST_URL": service.url, "AGENTPOST_KEY": alice_key}
    done = await anyio.to_thread.run_sync(lambda: commit(repo, "src/app.py", **env))
    assert done.returncode == 1, done.stderr
    assert "src/app.py: held by bob as 'src/*.py'" in done.stderr


@pytest.mark.anyio
async def test_with_a_url_and_key_the_keys_agent_commits_what_it_reserved_from_another_worktree(
    repo: Path, service: Service
) -> None:
    installed(repo)
    alice_key = await remote_reservation(service, "alice", "/elsewhere/shop")
    env = {"AGENTPOST_URL": service.url, "AGENTPOST_KEY": alice_key}
    done = await anyio.to_thread.run_sync(lambda: commit(repo, "src/app.py", **env))
    assert done.returncode == 0, done.stderr
    assert git(repo, "rev-list", "--count", "HEAD").strip() == "2"


@pytest.mark.anyio
async def test_with_the_owners_key_claims_made_from_this_worktree_are_the_committers(
    repo: Path, service: Service
) -> None:
    # The owner is the person at the command line, as locally: no agent of its own, so what
    # was reserved from the worktree being committed in is taken as its own.
    installed(repo)
    await remote_reservation(service, "bob", repo)
    env = {"AGENTPOST_URL": service.url, "AGENTPOST_KEY": service.admin_key}
    done = await anyio.to_thread.run_sync(lambda: commit(repo, "src/app.py", **env))
    assert done.returncode == 0, done.stderr


# -- the post office Claude Code's settings name --------------------------------------------------


def elsewhere(tmp_path: Path) -> dict[str, str]:
    """A committer whose own post office is another file than the service's: the service runs
    on another machine, as far as the guard can tell."""
    return {"AGENTPOST_HOME": str(tmp_path / "committer-home")}


def name_server(file: Path, entry: dict[str, object], *, folder: Path | None = None) -> None:
    """Write the `agentpost` MCP server into `file`: `.mcp.json`'s form, or, given the `folder`
    Claude Code runs in, `~/.claude.json`'s local scope for it (`claude mcp add`'s default)."""
    servers = {"mcpServers": {"agentpost": entry, "other": {"type": "http", "url": "http://x/"}}}
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps(servers if folder is None else {"projects": {str(folder): servers}}))


def claude_json() -> Path:
    return Path(os.environ["CLAUDE_CONFIG_DIR"]) / ".claude.json"


async def try_commit(repo: Path, *files: str, **env: str) -> subprocess.CompletedProcess[str]:
    return await anyio.to_thread.run_sync(lambda: commit(repo, *files, **env))


async def held_by_bob(repo: Path, service: Service, project: str = "shop") -> str:
    """The guard installed, bob holding `src/*.py` of `project` on the service (from another
    machine's worktree); the key of alice, who commits."""
    installed(repo)
    await remote_reservation(service, "bob", "/elsewhere/shop", project)
    return await service.create_agent("alice", project=project)


async def held_there_free_elsewhere(repo: Path, tmp_path: Path, key: str) -> None:
    """Bob's file's commit is refused, naming him and never the key; another file's goes in."""
    done = await try_commit(repo, "src/app.py", **elsewhere(tmp_path))
    assert done.returncode == 1, done.stderr
    assert "src/app.py: held by bob as 'src/*.py'" in done.stderr
    assert key not in done.stderr
    git(repo, "restore", "--staged", "src/app.py")
    done = await try_commit(repo, "docs/guide.md", **elsewhere(tmp_path))
    assert done.returncode == 0, done.stderr
    assert git(repo, "rev-list", "--count", "HEAD").strip() == "2"


@pytest.mark.anyio
async def test_a_remote_post_office_named_only_in_mcp_json_holds_the_commit(
    repo: Path, service: Service, tmp_path: Path
) -> None:
    """The hook has no AGENTPOST_URL: it read the committer's own post office, saw none of the
    service's claims and let the commit through."""
    alice_key = await held_by_bob(repo, service)
    env = {"AGENTPOST_URL": service.url, "AGENTPOST_KEY": alice_key}
    name_server(repo / ".mcp.json", {"command": "agentpost", "args": ["mcp"], "env": env})
    await held_there_free_elsewhere(repo, tmp_path, alice_key)


@pytest.mark.anyio
async def test_an_http_entry_names_the_service_and_its_bearer_key_from_the_environment(
    repo: Path, service: Service, tmp_path: Path
) -> None:
    alice_key = await held_by_bob(repo, service)
    entry = {
        "type": "http",
        "url": f"{service.url}/mcp?tools=core,coord",
        "headers": {"authorization": "Bearer ${ALICE_KEY}"},
    }
    name_server(repo / ".mcp.json", entry)
    done = await try_commit(repo, "src/app.py", ALICE_KEY=alice_key, **elsewhere(tmp_path))
    assert done.returncode == 1, done.stderr
    assert "src/app.py: held by bob" in done.stderr


@pytest.mark.anyio
async def test_the_local_scope_claude_mcp_add_writes_outranks_the_projects_mcp_json(
    repo: Path, service: Service, tmp_path: Path
) -> None:
    """README's `claude mcp add … -- agentpost mcp` writes `~/.claude.json`, under the folder:
    there it wins over `.mcp.json`'s local `agentpost mcp`, as in Claude Code."""
    alice_key = await held_by_bob(repo, service)
    name_server(repo / ".mcp.json", {"command": "agentpost", "args": ["mcp"]})
    remote = {"command": "agentpost", "args": ["mcp", f"--url={service.url}", "--key", alice_key]}
    name_server(claude_json(), remote, folder=repo)
    done = await try_commit(repo, "src/app.py", **elsewhere(tmp_path))
    assert done.returncode == 1, done.stderr
    assert "src/app.py: held by bob" in done.stderr
    assert alice_key not in done.stderr


@pytest.mark.anyio
async def test_a_project_the_entry_gives_its_server_is_the_one_checked_on_the_service(
    repo: Path, service: Service, tmp_path: Path
) -> None:
    alice_key = await held_by_bob(repo, service, project="apollo")
    env = {"AGENTPOST_URL": service.url, "AGENTPOST_PROJECT": "apollo"}
    name_server(repo / ".mcp.json", {"command": "agentpost", "args": ["mcp"], "env": env})
    done = await try_commit(repo, "src/app.py", AGENTPOST_KEY=alice_key, **elsewhere(tmp_path))
    assert done.returncode == 1, done.stderr
    assert "(project apollo)" in done.stderr


@pytest.mark.anyio
async def test_a_remote_post_office_named_without_a_key_refuses_the_commit_and_says_why(
    repo: Path, service: Service, tmp_path: Path
) -> None:
    """Not the committer's own post office in its place, nor a commit passed as checked: what
    is missing is named, and how to commit all the same."""
    await held_by_bob(repo, service)
    name_server(repo / ".mcp.json", {"command": "agentpost", "args": ["mcp", "--url", service.url]})
    done = await try_commit(repo, "docs/guide.md", **elsewhere(tmp_path))
    assert done.returncode == 1, done.stderr
    assert f"uses the post office at {service.url}, and no key for it is set here" in done.stderr
    assert "AGENTPOST_GUARD=off" in done.stderr
    assert git(repo, "rev-list", "--count", "HEAD").strip() == "1"
    checked = agentpost(repo, "guard", "check", **elsewhere(tmp_path))
    assert checked.returncode == 3, checked.stderr  # unauthenticated, as the command line says
    done = await try_commit(repo, "docs/guide.md", AGENTPOST_GUARD="off", **elsewhere(tmp_path))
    assert done.returncode == 0, done.stderr


def test_the_committers_url_without_a_key_refuses_the_commit(repo: Path) -> None:
    """It warned that the service was away, or refused the keyless call, and let the commit
    through: a missing key is the committer's to set, not a service that is down."""
    installed(repo)
    done = commit(repo, "docs/guide.md", AGENTPOST_URL="http://127.0.0.1:9")
    assert done.returncode == 1, done.stderr
    assert "AGENTPOST_URL names the post office at http://127.0.0.1:9, and no key" in done.stderr


def test_a_key_variable_unset_for_the_committer_refuses_the_commit_by_its_name(
    repo: Path,
) -> None:
    installed(repo)
    entry = {"type": "http", "url": "http://127.0.0.1:9/mcp"}
    name_server(repo / ".mcp.json", {**entry, "headers": {"Authorization": "Bearer ${AP_KEY}"}})
    done = commit(repo, "docs/guide.md")
    assert done.returncode == 1, done.stderr
    assert "takes its key from ${AP_KEY}, which is not set here" in done.stderr
    assert "commit refused" in done.stderr


def test_an_unreachable_service_named_in_mcp_json_is_said_and_the_commit_goes_through(
    repo: Path,
) -> None:
    installed(repo)
    secret = "ap_" + "k" * 43
    env = {"AGENTPOST_URL": "http://127.0.0.1:9", "AGENTPOST_KEY": secret}
    name_server(repo / ".mcp.json", {"command": "agentpost", "args": ["mcp"], "env": env})
    done = commit(repo, "src/app.py")
    assert done.returncode == 0, done.stderr
    assert "reservations not checked (unavailable: cannot reach the post office at " in done.stderr
    assert "http://127.0.0.1:9" in done.stderr
    assert secret not in done.stderr


def test_an_mcp_json_that_is_not_json_is_said_and_the_commit_goes_through(repo: Path) -> None:
    """Claude Code cannot read it either: no agent uses a post office it names."""
    installed(repo)
    (repo / ".mcp.json").write_text('{"mcpServers": {"agentpost": ')
    done = commit(repo, "src/app.py")
    assert done.returncode == 0, done.stderr
    assert f"reservations not checked (invalid_argument: {repo / '.mcp.json'} is not JSON" in (
        done.stderr
    )


def test_a_local_agentpost_entry_keeps_the_local_post_office(repo: Path) -> None:
    """What `agentpost install claude` writes; other servers of the file are not agentpost's."""
    installed(repo)
    name_server(repo / ".mcp.json", {"command": "agentpost", "args": ["mcp"]})
    reserve("bob", ["src/**"])
    done = commit(repo, "src/app.py")
    assert done.returncode == 1, done.stderr
    assert "src/app.py: held by bob" in done.stderr


# -- the post office Codex's settings name -------------------------------------------------------


def name_codex_server(file: Path, table: str) -> None:
    """Write `[mcp_servers.agentpost]` with `table` (its lines of TOML) into Codex's `file`,
    beside a server of another name."""
    file.parent.mkdir(parents=True, exist_ok=True)
    other = '[mcp_servers.docs]\ncommand = "docs-mcp"\n'
    file.write_text(f"{other}\n[mcp_servers.agentpost]\n{table}\n")


def codex_config() -> Path:
    return Path(os.environ["CODEX_HOME"]) / "config.toml"


@pytest.mark.anyio
async def test_a_remote_post_office_named_only_in_codexs_settings_holds_the_commit(
    repo: Path, service: Service, tmp_path: Path
) -> None:
    """Only Claude Code's settings were read: a post office that Codex's agents alone were
    given went unseen, and every commit went through."""
    alice_key = await held_by_bob(repo, service)
    env = f'AGENTPOST_URL = "{service.url}"\nAGENTPOST_KEY = "{alice_key}"'
    name_codex_server(
        codex_config(), f'command = "agentpost"\nargs = ["mcp"]\n[mcp_servers.agentpost.env]\n{env}'
    )
    await held_there_free_elsewhere(repo, tmp_path, alice_key)


@pytest.mark.anyio
async def test_the_projects_codex_url_names_the_service_and_the_variable_of_its_bearer_key(
    repo: Path, service: Service, tmp_path: Path
) -> None:
    alice_key = await held_by_bob(repo, service)
    table = f'url = "{service.url}/mcp"\nbearer_token_env_var = "ALICE_KEY"'
    name_codex_server(repo / ".codex" / "config.toml", table)
    name_codex_server(codex_config(), 'command = "agentpost"\nargs = ["mcp"]')  # outranked
    done = await try_commit(repo, "src/app.py", ALICE_KEY=alice_key, **elsewhere(tmp_path))
    assert done.returncode == 1, done.stderr
    assert "src/app.py: held by bob" in done.stderr


def test_a_codex_key_variable_unset_for_the_committer_refuses_the_commit_by_its_name(
    repo: Path,
) -> None:
    installed(repo)
    table = 'url = "http://127.0.0.1:9/mcp"\nbearer_token_env_var = "AP_KEY"'
    name_codex_server(repo / ".codex" / "config.toml", table)
    done = commit(repo, "docs/guide.md")
    assert done.returncode == 1, done.stderr
    assert "takes its key from the variable 'AP_KEY' (its bearer_token_env_var)" in done.stderr
    assert "commit refused" in done.stderr


def test_a_codex_file_that_is_not_toml_is_said_and_the_commit_goes_through(repo: Path) -> None:
    """Codex cannot read it either: no agent uses a post office it names."""
    installed(repo)
    codex_config().parent.mkdir(parents=True, exist_ok=True)
    codex_config().write_text("[mcp_servers.agentpost\n")
    done = commit(repo, "src/app.py")
    assert done.returncode == 0, done.stderr
    assert f"reservations not checked (invalid_argument: {codex_config()} is not TOML" in (
        done.stderr
    )


def test_claude_codes_local_agentpost_entry_outranks_codexs(repo: Path) -> None:
    """Claude Code's scopes come first: its agents use the local post office, which is read."""
    installed(repo)
    name_server(repo / ".mcp.json", {"command": "agentpost", "args": ["mcp"]})
    name_codex_server(codex_config(), 'url = "http://127.0.0.1:9/mcp"\nbearer_token_env_var = "AP"')
    reserve("bob", ["src/**"])
    done = commit(repo, "src/app.py")
    assert done.returncode == 1, done.stderr
    assert "src/app.py: held by bob" in done.stderr


# -- installing and removing ----------------------------------------------------------------------


def test_install_is_idempotent_and_uninstall_removes_the_hook(repo: Path) -> None:
    installed(repo)
    hook = repo / ".git" / "hooks" / "pre-commit"
    first = hook.read_text()
    installed(repo)
    assert hook.read_text() == first
    assert os.access(hook, os.X_OK)
    assert str(AGENTPOST) in first  # by absolute path: a git client's PATH may not find it
    done = agentpost(repo, "guard", "uninstall")
    assert done.returncode == 0, done.stderr
    assert not hook.exists()
    reserve("bob", ["src/**"])
    assert commit(repo, "src/app.py").returncode == 0


def test_a_foreign_hook_is_chained_kept_running_and_restored_on_uninstall(repo: Path) -> None:
    hooks = repo / ".git" / "hooks"
    foreign = hooks / "pre-commit"
    script = '#!/bin/sh\necho "lint ran" >> "$(git rev-parse --git-dir)/lint.log"\n'
    foreign.write_text(script)
    foreign.chmod(0o755)
    installed(repo)
    installed(repo)  # again: the chained hook stays chained, once
    assert (hooks / "pre-commit.before-agentpost").read_text() == script

    assert commit(repo, "docs/guide.md").returncode == 0
    assert (repo / ".git" / "lint.log").read_text() == "lint ran\n"
    reserve("bob", ["src/**"])
    assert commit(repo, "src/app.py").returncode == 1
    assert (repo / ".git" / "lint.log").read_text() == "lint ran\n"  # refused before it

    assert agentpost(repo, "guard", "uninstall").returncode == 0
    assert foreign.read_text() == script
    assert os.access(foreign, os.X_OK)
    assert not (hooks / "pre-commit.before-agentpost").exists()


def test_once_agentpost_is_gone_the_hook_warns_and_lets_commits_through(repo: Path) -> None:
    installed(repo)
    hook = repo / ".git" / "hooks" / "pre-commit"
    gone = "/nowhere/uninstalled/agentpost"  # the installation the hook names was removed
    script = hook.read_text()
    named = re.search(r"if \[ -x (\S+) \]", script)
    assert named is not None, script
    hook.write_text(script.replace(named.group(1), gone))
    reserve("bob", ["src/**"])
    done = commit(repo, "src/app.py")
    assert done.returncode == 0, done.stderr
    assert f"reservations not checked ({gone} is gone" in done.stderr


def test_once_the_python_it_runs_in_lost_agentpost_the_hook_warns_and_lets_commits_through(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The form for an installation with no `agentpost` script: `python -c …` of the Python
    it was installed into, which stays when agentpost is uninstalled from it."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    python = str(bare / "bin" / "python")
    runner = "from agentpost.cli.entry import main; main()"
    monkeypatch.setattr(guard, "agentpost_command", lambda: [python, "-c", runner])
    installed(repo)
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text(guard.hook_script())
    reserve("bob", ["src/**"])
    done = commit(repo, "src/app.py")
    assert done.returncode == 0, done.stderr
    assert f"reservations not checked ({python} is gone" in done.stderr


def test_uninstall_leaves_a_foreign_hook_alone(repo: Path) -> None:
    foreign = repo / ".git" / "hooks" / "pre-commit"
    foreign.write_text("#!/bin/sh\nexit 0\n")
    done = agentpost(repo, "guard", "uninstall")
    assert done.returncode == 0
    assert "nothing to remove" in done.stdout
    assert foreign.read_text() == "#!/bin/sh\nexit 0\n"


def test_install_honours_core_hooks_path(repo: Path) -> None:
    git(repo, "config", "core.hooksPath", ".githooks")
    installed(repo)
    assert (repo / ".githooks" / "pre-commit").exists()


def test_install_under_a_relative_hooks_path_says_it_guards_this_worktree_only(
    repo: Path, tmp_path: Path
) -> None:
    """Said to guard every worktree, it guarded only the one it was run in: git looks for a
    relative core.hooksPath in the worktree that commits."""
    git(repo, "config", "core.hooksPath", ".githooks")
    linked = tmp_path / "shop-feature"
    git(repo, "worktree", "add", "-q", "-b", "feature", str(linked))
    done = agentpost(repo, "guard", "install")
    assert done.returncode == 0, done.stderr
    assert "this guards this worktree only" in done.stdout
    assert not (linked / ".githooks" / "pre-commit").exists()
    git(repo, "config", "core.hooksPath", str(tmp_path / "hooks"))
    shared = agentpost(repo, "guard", "install")
    assert "worktree only" not in shared.stdout
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    reserve("bob", ["src/**"])
    assert commit(repo, "src/app.py").returncode == 1


def test_install_where_the_hooks_folder_cannot_be_is_refused_by_name(repo: Path) -> None:
    (repo / "hooks-file").write_text("a file where git is told the hooks are\n")
    git(repo, "config", "core.hooksPath", "hooks-file")
    done = agentpost(repo, "guard", "install")
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: invalid_argument: cannot change the hooks in {repo}")
    assert "Traceback" not in done.stderr


def test_install_outside_a_repository_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    done = agentpost(folder, "guard", "install")
    assert done.returncode == 2
    assert "not inside a git repository" in done.stderr


def test_a_check_outside_a_repository_says_so_in_one_line_and_passes(tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    done = agentpost(folder, "guard", "check")
    assert done.returncode == 0
    assert "not inside a git repository (fatal: not a git repository" in done.stderr
    assert len(done.stderr.splitlines()) == 1
