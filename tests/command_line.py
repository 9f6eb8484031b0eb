"""The installed `agentpost` script run as a person or a script runs it: locally on the test's
post office (conftest's isolated AGENTPOST_HOME, passed on through the environment), or against
a real `agentpost serve` with `--url/--key` (`Remote`). Identities are arranged in-process
through the services; every act and observation of a test goes through the command line."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentpost.cli.main import EXIT_CODES
from agentpost.config import Settings
from agentpost.domain.errors import ErrorCode
from agentpost.domain.models import Caller
from agentpost.services import PostOffice
from service_process import Service

AGENTPOST = Path(sys.executable).with_name("agentpost")
WAIT_S = 30


@pytest.fixture(autouse=True)
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run every command from a scratch folder, outside this repository's git context."""
    folder = tmp_path / "work"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def agentpost(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    assert AGENTPOST.exists(), f"the console script is not installed at {AGENTPOST}"
    return subprocess.run(
        [str(AGENTPOST), *args],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        env={**os.environ, **env},
    )


def agentpost_json(*args: str, **env: str) -> Any:
    done = agentpost(*args, "--json", **env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def arrange_async(*names: str, mail: tuple[str, str, str] | None = None) -> None:
    """Create these agents (and send `mail` = (sender, recipient, body)) through the services."""
    office = await PostOffice.open(Settings())
    try:
        for name in names:
            await office.presence.ensure_agent(name)
        if mail is not None:
            sender, to, body = mail
            await office.mailbox.send(Caller(sender), to, body)
    finally:
        await office.aclose()


def arrange(*names: str, mail: tuple[str, str, str] | None = None) -> None:
    anyio.run(partial(arrange_async, *names, mail=mail))


def refused(done: subprocess.CompletedProcess[str], code: str) -> None:
    """`done` is a refusal as the README promises: `error: <code>: …` and the code's status."""
    assert done.stderr.startswith(f"error: {code}: "), done.stderr
    assert done.returncode == EXIT_CODES[ErrorCode(code)]


def database(home: Path) -> list[str]:
    """Every row of the post office, as SQL: equal dumps mean nothing changed."""
    conn = sqlite3.connect(home / "agentpost.db")
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


class Remote:
    """The command line of one agent of the test's service."""

    def __init__(self, service: Service, key: str) -> None:
        self.url = service.url
        self.key = key

    async def run(self, *args: str, env: dict[str, str] | None = None) -> Any:
        """Run with `--url/--key` (or none, given `env`); the finished process."""
        where = [] if env else ["--url", self.url, "--key", self.key]
        with anyio.fail_after(WAIT_S):
            return await anyio.run_process(
                [str(AGENTPOST), *args, *where], check=False, env={**os.environ, **(env or {})}
            )

    async def json(self, *args: str, env: dict[str, str] | None = None) -> Any:
        done = await self.run(*args, "--json", env=env)
        assert done.returncode == 0, done.stderr.decode()
        return json.loads(done.stdout)
