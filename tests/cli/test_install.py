"""`agentpost install claude|codex`: merged into existing settings, idempotent, `--dry-run` inert.

Each test runs the installed `agentpost` script as a process in a project folder made by the
test, with settings files holding other people's servers, hooks, keys and comments.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

AGENTPOST = Path(sys.executable).with_name("agentpost")
VENV_BIN = str(AGENTPOST.parent)

THEIR_MCP = {
    "mcpServers": {"github": {"command": "gh-mcp", "args": ["--stdio"]}},
    "note": "kept as is",
}
THEIR_SETTINGS = {
    "permissions": {"allow": ["Bash(git status)"]},
    "hooks": {
        "PostToolUse": [
            {"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "ruff format"}]}
        ],
        "Stop": [{"hooks": [{"type": "command", "command": "say done"}]}],
    },
}
THEIR_CODEX = """# my codex settings
model = "o4-mini"  # the fast one

[mcp_servers.docs]
command = "docs-mcp"
args = ["serve"]  # keep this comment
"""


def install(
    *args: str, cwd: Path, path: str | None = None, codex_home: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path if path is not None else os.environ.get("PATH", "")}
    if codex_home is not None:
        env["CODEX_HOME"] = str(codex_home)
    return subprocess.run(
        [str(AGENTPOST), "install", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=4) + "\n")


def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    write_json(root / ".mcp.json", THEIR_MCP)
    write_json(root / ".claude" / "settings.json", THEIR_SETTINGS)
    return root


def snapshot(*paths: Path) -> dict[Path, str | None]:
    return {p: p.read_text() if p.exists() else None for p in paths}


def our_commands(settings: dict[str, Any], event: str) -> list[str]:
    return [
        h["command"]
        for group in settings["hooks"][event]
        for h in group["hooks"]
        if h["command"].endswith("hook claude")
    ]


def test_claude_merges_the_server_and_hooks_into_existing_settings(tmp_path: Path) -> None:
    root = project(tmp_path)
    done = install("claude", cwd=root, path=f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}")
    assert done.returncode == 0, done.stderr

    mcp = json.loads((root / ".mcp.json").read_text())
    assert mcp["note"] == "kept as is"
    assert mcp["mcpServers"]["github"] == THEIR_MCP["mcpServers"]["github"]
    assert mcp["mcpServers"]["agentpost"] == {"command": "agentpost", "args": ["mcp"]}

    settings = json.loads((root / ".claude" / "settings.json").read_text())
    assert settings["permissions"] == THEIR_SETTINGS["permissions"]
    assert settings["hooks"]["Stop"] == THEIR_SETTINGS["hooks"]["Stop"]
    post = settings["hooks"]["PostToolUse"]
    assert post[0] == THEIR_SETTINGS["hooks"]["PostToolUse"][0]
    assert post[1]["matcher"] == "*"
    for event in ("SessionStart", "UserPromptSubmit", "PostToolUse"):
        assert our_commands(settings, event) == ["agentpost hook claude"], event

    # The command it wrote runs as a hook: nothing to say here, and exit 0.
    hook = subprocess.run(
        ["sh", "-c", our_commands(settings, "PostToolUse")[0]],
        input="{}",
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"},
        check=True,
    )
    assert hook.stdout == ""


def test_claude_twice_changes_nothing_the_second_time(tmp_path: Path) -> None:
    root = project(tmp_path)
    assert install("claude", cwd=root).returncode == 0
    files = (root / ".mcp.json", root / ".claude" / "settings.json")
    before = snapshot(*files)
    again = install("claude", cwd=root)
    assert again.returncode == 0, again.stderr
    assert snapshot(*files) == before
    assert again.stdout.count("already set up, unchanged") == 2


def test_claude_keeps_an_agentpost_server_someone_configured(tmp_path: Path) -> None:
    root = tmp_path / "project"
    mine = {"command": "agentpost", "args": ["mcp", "--url", "https://post.example"]}
    write_json(root / ".mcp.json", {"mcpServers": {"agentpost": mine}})
    assert install("claude", cwd=root).returncode == 0
    assert json.loads((root / ".mcp.json").read_text())["mcpServers"] == {"agentpost": mine}
    settings = json.loads((root / ".claude" / "settings.json").read_text())
    assert len(our_commands(settings, "SessionStart")) == 1


def test_claude_without_agentpost_on_path_writes_the_absolute_command(tmp_path: Path) -> None:
    root = project(tmp_path)
    assert install("claude", cwd=root, path="/usr/bin:/bin").returncode == 0
    mcp = json.loads((root / ".mcp.json").read_text())
    assert mcp["mcpServers"]["agentpost"]["command"] == str(AGENTPOST.resolve())
    settings = json.loads((root / ".claude" / "settings.json").read_text())
    assert our_commands(settings, "UserPromptSubmit") == [f"{AGENTPOST.resolve()} hook claude"]


def test_claude_writes_to_the_top_of_the_repository(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "src" / "deep").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    assert install("claude", cwd=root / "src" / "deep").returncode == 0
    assert (root / ".mcp.json").exists()
    assert (root / ".claude" / "settings.json").exists()
    assert not (root / "src" / "deep" / ".mcp.json").exists()


def test_claude_dry_run_prints_the_change_and_writes_nothing(tmp_path: Path) -> None:
    root = project(tmp_path)
    files = (root / ".mcp.json", root / ".claude" / "settings.json")
    before = snapshot(*files)
    done = install("claude", "--dry-run", cwd=root)
    assert done.returncode == 0, done.stderr
    assert snapshot(*files) == before
    assert f"{root / '.mcp.json'}: would change (added the MCP server 'agentpost'" in done.stdout
    assert '+    "agentpost": {' in done.stdout
    assert "added the PostToolUse hook" in done.stdout

    empty = tmp_path / "empty"
    empty.mkdir()
    assert install("claude", "--dry-run", cwd=empty).returncode == 0
    assert list(empty.iterdir()) == []


def test_a_dry_runs_diff_writes_out_what_would_drive_the_terminal(tmp_path: Path) -> None:
    """A settings file someone else committed may hold, raw in a JSON string, a one-byte CSI
    or a bidirectional override: the diff shows them written out, so what it shows is what is
    there; the file itself keeps them."""
    root = project(tmp_path)
    mcp = root / ".mcp.json"
    raw = {**THEIR_MCP, "note": "a \x9b2J b \u202eevil"}
    mcp.write_text(json.dumps(raw, ensure_ascii=False, indent=4) + "\n")
    done = install("claude", "--dry-run", cwd=root)
    assert done.returncode == 0, done.stderr
    assert not {"\x9b", "\u202e"} & set(done.stdout)
    assert "a \\x9b2J b \\u202eevil" in done.stdout
    assert install("claude", cwd=root).returncode == 0
    assert json.loads(mcp.read_text())["note"] == raw["note"]


def test_claude_refuses_a_settings_file_that_is_not_json_and_leaves_it(tmp_path: Path) -> None:
    root = project(tmp_path)
    broken = root / ".claude" / "settings.json"
    broken.write_text("{ this is not json")
    files = (root / ".mcp.json", broken)
    before = snapshot(*files)
    done = install("claude", cwd=root)
    assert done.returncode == 2
    assert "is not JSON" in done.stderr
    assert snapshot(*files) == before


@pytest.mark.parametrize("entry", [None, "agentpost mcp", {"args": ["mcp"]}, {"command": 7}])
def test_claude_refuses_an_agentpost_entry_it_cannot_start_and_leaves_it(
    tmp_path: Path, entry: Any
) -> None:
    """Kept as written, it would be "already set up", and Claude Code could start nothing."""
    root = project(tmp_path)
    write_json(root / ".mcp.json", {"mcpServers": {"agentpost": entry}})
    files = (root / ".mcp.json", root / ".claude" / "settings.json")
    before = snapshot(*files)
    done = install("claude", cwd=root)
    assert done.returncode == 2, done.stdout
    assert "mcpServers.agentpost is neither a command nor a URL" in done.stderr
    assert snapshot(*files) == before


def test_codex_refuses_an_agentpost_table_it_cannot_start_and_leaves_it(tmp_path: Path) -> None:
    codex_home = tmp_path / "codex"
    codex_home.mkdir()
    config = codex_home / "config.toml"
    config.write_text('[mcp_servers.agentpost]\nargs = ["mcp"]\n')
    done = install("codex", cwd=tmp_path, codex_home=codex_home)
    assert done.returncode == 2, done.stdout
    assert "[mcp_servers.agentpost] is neither a command nor a URL" in done.stderr
    assert config.read_text() == '[mcp_servers.agentpost]\nargs = ["mcp"]\n'


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"hooks": {}, "model": "a", "hooks": {"Stop": []}}', "'hooks' twice"),
        ('{"cleanupPeriodDays": 1e400}', "1e400"),
        ('{"cleanupPeriodDays": NaN}', "NaN"),
        ('{"cleanupPeriodDays": ' + "1" * 5000 + "}", "5000 digits"),
    ],
    ids=["duplicate-key", "number-past-float", "nan", "digits-past-int"],
)
def test_claude_refuses_json_it_could_not_write_back_as_written_and_leaves_it(
    tmp_path: Path, text: str, says: str
) -> None:
    """Rewriting would drop the first of two equal keys, or write Infinity or NaN, which is no
    JSON Claude Code reads: the file is refused, untouched."""
    root = project(tmp_path)
    odd = root / ".claude" / "settings.json"
    odd.write_text(text)
    files = (root / ".mcp.json", odd)
    before = snapshot(*files)
    done = install("claude", cwd=root)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: invalid_argument: ")
    assert says in done.stderr
    assert snapshot(*files) == before


def test_claude_adds_its_hooks_beside_a_group_whose_hooks_are_not_a_list(tmp_path: Path) -> None:
    root = project(tmp_path)
    odd = {"hooks": {"SessionStart": [{"hooks": 5}, "a string", {"hooks": None}]}}
    write_json(root / ".claude" / "settings.json", odd)
    done = install("claude", cwd=root)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    settings = json.loads((root / ".claude" / "settings.json").read_text())
    assert settings["hooks"]["SessionStart"][:3] == odd["hooks"]["SessionStart"]
    [ours] = settings["hooks"]["SessionStart"][3:]
    assert ours["hooks"][0]["command"].endswith("hook claude")


def test_a_settings_file_that_is_a_symlink_stays_one_and_its_target_is_merged_into(
    tmp_path: Path,
) -> None:
    root = project(tmp_path)
    dotfiles = tmp_path / "dotfiles" / "settings.json"
    write_json(dotfiles, THEIR_SETTINGS)
    link = root / ".claude" / "settings.json"
    link.unlink()
    link.symlink_to(dotfiles)
    done = install("claude", cwd=root)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink()
    assert link.resolve() == dotfiles.resolve()
    merged = json.loads(dotfiles.read_text())
    assert merged["permissions"] == THEIR_SETTINGS["permissions"]
    assert len(our_commands(merged, "SessionStart")) == 1


def test_claude_that_cannot_write_one_file_writes_neither_and_says_why(tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    (root / ".claude").write_text("a file where the settings folder belongs")
    done = install("claude", cwd=root)
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: invalid_argument: cannot write {root / '.claude'}")
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in root.iterdir()) == [".claude"]  # no .mcp.json, no leftovers


def test_claude_refuses_a_settings_symlink_that_loops_and_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "project"
    (root / ".claude").mkdir(parents=True)
    (root / ".claude" / "settings.json").symlink_to("settings.json")
    done = install("claude", cwd=root)
    assert done.returncode == 2
    assert done.stderr == (
        f"error: invalid_argument: cannot write {root / '.claude' / 'settings.json'}: "
        "a symlink loop\n"
    )
    assert sorted(p.name for p in root.iterdir()) == [".claude"]


def test_a_refusal_names_a_project_folder_that_looks_like_markup_as_written(
    tmp_path: Path,
) -> None:
    root = tmp_path / "br[/x]"
    root.mkdir(parents=True)
    (root / ".mcp.json").write_text("[/red] not json")
    done = install("claude", "--project", str(root), cwd=tmp_path)
    assert done.stderr == (
        f"error: invalid_argument: {root / '.mcp.json'} is not JSON: "
        "Expecting value: line 1 column 2 (char 1)\n"
    )
    assert done.returncode == 2
    assert (root / ".mcp.json").read_text() == "[/red] not json"


def test_codex_adds_its_table_keeping_comments_and_other_servers(tmp_path: Path) -> None:
    codex_home = tmp_path / "codex"
    codex_home.mkdir()
    config = codex_home / "config.toml"
    config.write_text(THEIR_CODEX)
    done = install("codex", cwd=tmp_path, codex_home=codex_home, path="/usr/bin:/bin")
    assert done.returncode == 0, done.stderr
    text = config.read_text()
    assert text.startswith(THEIR_CODEX)  # every byte of theirs, comments included
    parsed = tomllib.loads(text)
    assert parsed["model"] == "o4-mini"
    assert parsed["mcp_servers"]["docs"] == {"command": "docs-mcp", "args": ["serve"]}
    assert parsed["mcp_servers"]["agentpost"] == {
        "command": str(AGENTPOST.resolve()),
        "args": ["mcp"],
    }

    again = install("codex", cwd=tmp_path, codex_home=codex_home, path="/usr/bin:/bin")
    assert again.returncode == 0
    assert config.read_text() == text
    assert "already set up, unchanged" in again.stdout


@pytest.mark.parametrize(
    "theirs",
    [
        'mcp_servers.docs.command = "docs-mcp"\nmodel = "o4-mini"\n',
        'mcp_servers = { docs = { command = "docs-mcp" } }\nmodel = "o4-mini"\n',
    ],
    ids=["dotted-keys", "inline-table"],
)
def test_codex_adds_its_server_however_their_servers_are_written_leaving_the_rest(
    tmp_path: Path, theirs: str
) -> None:
    codex_home = tmp_path / "codex"
    codex_home.mkdir()
    config = codex_home / "config.toml"
    config.write_text(theirs)
    done = install("codex", cwd=tmp_path, codex_home=codex_home, path="/usr/bin:/bin")
    assert done.returncode == 0, done.stderr
    parsed = tomllib.loads(config.read_text())
    assert parsed == {
        "model": "o4-mini",  # still theirs, at the top, not taken into agentpost's table
        "mcp_servers": {
            "docs": {"command": "docs-mcp"},
            "agentpost": {"command": str(AGENTPOST.resolve()), "args": ["mcp"]},
        },
    }


@pytest.mark.parametrize("existing", [None, THEIR_CODEX])
def test_codex_dry_run_writes_nothing(tmp_path: Path, existing: str | None) -> None:
    codex_home = tmp_path / "codex"
    config = codex_home / "config.toml"
    if existing is not None:
        codex_home.mkdir()
        config.write_text(existing)
    done = install("codex", "--dry-run", cwd=tmp_path, codex_home=codex_home)
    assert done.returncode == 0, done.stderr
    assert "would change (added [mcp_servers.agentpost])" in done.stdout
    assert "+[mcp_servers.agentpost]" in done.stdout
    assert snapshot(config) == {config: existing}


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"mcp_servers = 5\n", "mcp_servers is not a table"),
        (b'model = "caf\xe9"\n', "is not UTF-8 text"),
        # Where the file breaks off, said as Python's own TOML reader says it (tomlkit named a
        # NUL character at line 1, column 0).
        (b"bad = [\n", "is not TOML: Invalid value (at end of document)"),
    ],
    ids=["not-a-table", "latin-1", "cut-short"],
)
def test_codex_refuses_a_config_it_cannot_merge_into_and_leaves_it(
    tmp_path: Path, content: bytes, says: str
) -> None:
    codex_home = tmp_path / "codex"
    codex_home.mkdir()
    config = codex_home / "config.toml"
    config.write_bytes(content)
    done = install("codex", cwd=tmp_path, codex_home=codex_home)
    assert done.returncode == 2
    assert done.stderr.startswith("error: invalid_argument: ")
    assert says in done.stderr
    assert config.read_bytes() == content


def test_claude_refuses_a_project_folder_that_is_not_there_and_makes_none(tmp_path: Path) -> None:
    typo = tmp_path / "projcet"
    done = install("claude", "--project", str(typo), cwd=tmp_path)
    assert done.returncode == 2
    assert "--project" in done.stderr
    assert not typo.exists()


# -- uninstall ------------------------------------------------------------------------------------


def uninstall(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(AGENTPOST), "uninstall", *args],
        cwd=cwd,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_uninstall_claude_takes_back_exactly_what_install_added(tmp_path: Path) -> None:
    """Settings written as install writes them (two-space JSON) come back byte for byte."""
    root = tmp_path / "project"
    for path, value in ((".mcp.json", THEIR_MCP), (".claude/settings.json", THEIR_SETTINGS)):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(json.dumps(value, indent=2) + "\n")
    files = (root / ".mcp.json", root / ".claude" / "settings.json")
    before = snapshot(*files)
    assert install("claude", cwd=root).returncode == 0
    assert snapshot(*files) != before
    done = uninstall("claude", cwd=root)
    assert done.returncode == 0, done.stderr
    assert snapshot(*files) == before
    assert "removed the MCP server 'agentpost'" in done.stdout
    again = uninstall("claude", cwd=root)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("nothing of agentpost's, unchanged") == 2


def test_uninstall_claude_removes_the_files_install_made(tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    assert install("claude", cwd=root).returncode == 0
    assert (root / ".mcp.json").exists()
    done = uninstall("claude", cwd=root)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in root.iterdir()) == []


def test_uninstall_claude_keeps_their_hooks_in_a_group_with_ours(tmp_path: Path) -> None:
    root = tmp_path / "project"
    theirs = {"type": "command", "command": "say hi"}
    ours = {"type": "command", "command": "agentpost hook claude"}
    settings = {"hooks": {"SessionStart": [{"hooks": [theirs, ours]}]}, "model": "opus"}
    write_json(root / ".claude" / "settings.json", settings)
    assert uninstall("claude", cwd=root).returncode == 0
    left = json.loads((root / ".claude" / "settings.json").read_text())
    assert left == {"hooks": {"SessionStart": [{"hooks": [theirs]}]}, "model": "opus"}


def test_uninstall_claude_dry_run_prints_the_change_and_writes_nothing(tmp_path: Path) -> None:
    root = project(tmp_path)
    assert install("claude", cwd=root).returncode == 0
    files = (root / ".mcp.json", root / ".claude" / "settings.json")
    before = snapshot(*files)
    dry = uninstall("claude", "--dry-run", cwd=root)
    assert dry.returncode == 0, dry.stderr
    assert snapshot(*files) == before
    assert '-    "agentpost": {' in dry.stdout
    assert "would change" in dry.stdout


def test_install_claude_repairs_a_command_whose_agentpost_is_gone(tmp_path: Path) -> None:
    """A moved or deleted virtualenv leaves an absolute path to nothing: install points it at
    this agentpost again, keeping the rest of the entry as the user wrote it."""
    root = tmp_path / "project"
    gone = str(tmp_path / "old-venv" / "bin" / "agentpost")
    server = {"command": gone, "args": ["mcp", "--url", "https://post.example"], "env": {"A": "1"}}
    write_json(root / ".mcp.json", {"mcpServers": {"agentpost": server}})
    hook = {"type": "command", "command": f"{gone} hook claude", "timeout": 10}
    write_json(root / ".claude" / "settings.json", {"hooks": {"SessionStart": [{"hooks": [hook]}]}})
    done = install("claude", cwd=root, path="/usr/bin:/bin")
    assert done.returncode == 0, done.stderr
    now = str(AGENTPOST.resolve())
    mcp = json.loads((root / ".mcp.json").read_text())
    assert mcp["mcpServers"]["agentpost"] == {**server, "command": now}
    settings = json.loads((root / ".claude" / "settings.json").read_text())
    assert our_commands(settings, "SessionStart") == [f"{now} hook claude"]
    assert "repaired" in done.stdout


def test_install_codex_repairs_a_command_whose_agentpost_is_gone(tmp_path: Path) -> None:
    """Codex's entry too: `already set up` for a command that no longer starts anything left
    Codex without agentpost; only the command changes, the user's comment and env stay."""
    codex_home = tmp_path / "codex"
    codex_home.mkdir()
    config = codex_home / "config.toml"
    gone = str(tmp_path / "old-venv" / "bin" / "agentpost")
    config.write_text(
        THEIR_CODEX + f'\n[mcp_servers.agentpost]\ncommand = "{gone}"  # my clone\n'
        'args = ["mcp"]\nenv = { AGENTPOST_AGENT = "codex-a" }\n'
    )
    done = install("codex", cwd=tmp_path, codex_home=codex_home, path="/usr/bin:/bin")
    assert done.returncode == 0, done.stderr
    assert "repaired [mcp_servers.agentpost]" in done.stdout
    now = str(AGENTPOST.resolve())
    text = config.read_text()
    assert text.startswith(THEIR_CODEX)
    assert f'command = "{now}"  # my clone' in text
    assert tomllib.loads(text)["mcp_servers"]["agentpost"] == {
        "command": now,
        "args": ["mcp"],
        "env": {"AGENTPOST_AGENT": "codex-a"},
    }
    again = install("codex", cwd=tmp_path, codex_home=codex_home, path="/usr/bin:/bin")
    assert "already set up, unchanged" in again.stdout
    assert config.read_text() == text


def test_both_installs_write_what_the_readme_tells_a_user_to_write_by_hand(tmp_path: Path) -> None:
    """The README's `.mcp.json` and `~/.codex/config.toml` snippets, with `agentpost` on PATH."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    by_hand_json = re.search(r"```json\n(.*?)```", readme, re.DOTALL)
    by_hand_toml = re.search(r"```toml\n(\[mcp_servers\.agentpost\].*?)```", readme, re.DOTALL)
    assert by_hand_json, "the README shows no hand-written .mcp.json"
    assert by_hand_toml, "the README shows no hand-written [mcp_servers.agentpost]"
    on_path = f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"
    root = tmp_path / "project"
    root.mkdir()
    codex_home = tmp_path / "codex"
    codex_home.mkdir()
    assert install("claude", cwd=root, path=on_path).returncode == 0
    assert install("codex", cwd=root, path=on_path, codex_home=codex_home).returncode == 0
    assert json.loads((root / ".mcp.json").read_text()) == json.loads(by_hand_json.group(1))
    written = tomllib.loads((codex_home / "config.toml").read_text())
    assert written == tomllib.loads(by_hand_toml.group(1))
