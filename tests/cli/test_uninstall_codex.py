"""`agentpost uninstall codex`: takes out `[mcp_servers.agentpost]` and nothing else.

Each test runs the installed `agentpost` script as a process, with `CODEX_HOME` pointing at a
folder made by the test that holds someone's own Codex settings, comments included.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

AGENTPOST = Path(sys.executable).with_name("agentpost")

THEIR_CODEX = """# my codex settings
model = "o4-mini"  # the fast one

[mcp_servers.docs]
command = "docs-mcp"
args = ["serve"]  # keep this comment

[profiles.fast]
model = "o4-mini"
"""


def agentpost(*args: str, codex_home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(AGENTPOST), *args],
        cwd=codex_home.parent,
        env={**os.environ, "CODEX_HOME": str(codex_home)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def codex_home(tmp_path: Path, config: str | None) -> Path:
    home = tmp_path / "codex"
    home.mkdir()
    if config is not None:
        (home / "config.toml").write_text(config)
    return home


def test_uninstall_codex_takes_back_exactly_what_install_added(tmp_path: Path) -> None:
    home = codex_home(tmp_path, THEIR_CODEX)
    config = home / "config.toml"
    assert agentpost("install", "codex", codex_home=home).returncode == 0
    assert "agentpost" in tomllib.loads(config.read_text())["mcp_servers"]
    # Set apart from the table that follows it, as theirs are (it came right above it).
    assert 'args = ["mcp"]\n\n[profiles.fast]' in config.read_text()

    done = agentpost("uninstall", "codex", codex_home=home)
    assert done.returncode == 0, done.stderr
    assert config.read_text() == THEIR_CODEX  # every byte of theirs, comments included
    assert "removed [mcp_servers.agentpost]" in done.stdout

    again = agentpost("uninstall", "codex", codex_home=home)
    assert again.returncode == 0, again.stderr
    assert "nothing of agentpost's, unchanged" in again.stdout
    assert config.read_text() == THEIR_CODEX


def test_uninstall_codex_removes_the_file_install_made(tmp_path: Path) -> None:
    home = codex_home(tmp_path, None)
    assert agentpost("install", "codex", codex_home=home).returncode == 0
    assert (home / "config.toml").exists()
    done = agentpost("uninstall", "codex", codex_home=home)
    assert done.returncode == 0, done.stderr
    assert list(home.iterdir()) == []


def test_uninstall_codex_without_a_config_changes_nothing(tmp_path: Path) -> None:
    home = codex_home(tmp_path, None)
    done = agentpost("uninstall", "codex", codex_home=home)
    assert done.returncode == 0, done.stderr
    assert "nothing of agentpost's, unchanged" in done.stdout
    assert list(home.iterdir()) == []


@pytest.mark.parametrize(
    ("theirs", "left"),
    [
        (
            'mcp_servers.docs.command = "docs-mcp"\n'
            'mcp_servers.agentpost.command = "agentpost"\n'
            'model = "o4-mini"\n',
            {"model": "o4-mini", "mcp_servers": {"docs": {"command": "docs-mcp"}}},
        ),
        (
            'mcp_servers = { docs = { command = "docs-mcp" }, agentpost = { command = "a" } }\n'
            'model = "o4-mini"\n',
            {"model": "o4-mini", "mcp_servers": {"docs": {"command": "docs-mcp"}}},
        ),
        (
            'model = "o4-mini"\n\n[mcp_servers.agentpost]\ncommand = "agentpost"\n'
            'args = ["mcp", "--url", "http://127.0.0.1:8765"]\n\n'
            '[mcp_servers.agentpost.env]\nAGENTPOST_KEY = "ap_x"\n\n[profiles.fast]\nmodel = "x"\n',
            {"model": "o4-mini", "profiles": {"fast": {"model": "x"}}},
        ),
    ],
    ids=["dotted-keys", "inline-table", "own-table-with-env"],
)
def test_uninstall_codex_removes_its_server_however_it_is_written_leaving_the_rest(
    tmp_path: Path, theirs: str, left: dict[str, object]
) -> None:
    home = codex_home(tmp_path, theirs)
    done = agentpost("uninstall", "codex", codex_home=home)
    assert done.returncode == 0, done.stderr
    assert tomllib.loads((home / "config.toml").read_text()) == left


def test_uninstall_codex_dry_run_prints_the_change_and_writes_nothing(tmp_path: Path) -> None:
    home = codex_home(tmp_path, THEIR_CODEX)
    assert agentpost("install", "codex", codex_home=home).returncode == 0
    installed = (home / "config.toml").read_text()
    dry = agentpost("uninstall", "codex", "--dry-run", codex_home=home)
    assert dry.returncode == 0, dry.stderr
    assert "would change (removed [mcp_servers.agentpost])" in dry.stdout
    assert "-[mcp_servers.agentpost]" in dry.stdout
    assert (home / "config.toml").read_text() == installed


def test_uninstall_codex_refuses_a_config_that_is_not_toml_and_leaves_it(tmp_path: Path) -> None:
    home = codex_home(tmp_path, "[mcp_servers.agentpost\n")
    done = agentpost("uninstall", "codex", codex_home=home)
    assert done.returncode == 2
    assert done.stderr.startswith("error: invalid_argument: ")
    assert (home / "config.toml").read_text() == "[mcp_servers.agentpost\n"
