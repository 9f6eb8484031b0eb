"""Fixtures for every test: anyio on asyncio, and a home of its own for each test.

No test may touch the real user's post office: AGENTPOST_HOME and AGENTPOST_CONFIG point into
the test's temporary folder (Claude Code's and Codex's settings too, which the commit guard
reads), and identity variables from the developer's shell are cleared.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "agentpost-home"
    for name in (
        "AGENTPOST_AGENT",
        "AGENTPOST_PROJECT",
        "AGENTPOST_DATABASE_URL",
        "AGENTPOST_AGENTS",
        "AGENTPOST_URL",
        "AGENTPOST_KEY",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AGENTPOST_HOME", str(home))
    monkeypatch.setenv("AGENTPOST_CONFIG", str(tmp_path / "no-config.toml"))
    # Claude Code's own settings of the developer (`~/.claude.json`) name no test's post office.
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude-config"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex-home"))  # nor Codex's
    return home
