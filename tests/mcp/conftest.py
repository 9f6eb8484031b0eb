"""Fixtures for the end-to-end tests of `agentpost mcp` (the harness is `tests/stdio_agents.py`).

`revision` runs every end-to-end test twice: with the 2025-11-25 initialize handshake
(`Client(mode="legacy")`) and with 2026-07-28 (the default mode, negotiated through
`server/discover`). `agents` starts real server processes on the test's one database file.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from agentpost.config import Settings
from agentpost.services import PostOffice
from backends import (  # noqa: F401 - fixtures, registered by being imported here
    backend,
    clock,
    database_url,
    fresh_database_url,
    fresh_pg_url,
    office,
    open_office,
    pg_session_database,
    sqlite_template,
)
from service_process import service  # noqa: F401 - a fixture, registered by being imported
from stdio_agents import LEGACY, MODERN, Agents, Ledger


@pytest.fixture(params=[LEGACY, MODERN])
def revision(request: pytest.FixtureRequest) -> str:
    """The MCP protocol revision every client of the test speaks."""
    return str(request.param)


@pytest.fixture
async def agents(revision: str, tmp_path: Path) -> AsyncIterator[Agents]:
    """Start `agentpost mcp` processes with `await agents.start(name)`; all stop at the end.

    Afterwards no server may have logged a traceback (a tool's unexpected exception, a crash).
    """
    async with anyio.create_task_group() as group:
        started = Agents(group, revision, tmp_path)
        try:
            yield started
        finally:
            started.stop_all()
    for agent in started.tried:
        assert "Traceback" not in agent.stderr(), f"{agent} logged:\n{agent.stderr()}"


@pytest.fixture
async def ledger(isolated_home: Path) -> AsyncIterator[Ledger]:
    """The test's post office opened in this process, to look at what no tool shows."""
    opened = await PostOffice.open(Settings())
    try:
        yield Ledger(opened)
    finally:
        await opened.aclose()
