"""Harness for the end-to-end tests of `agentpost mcp`: real server processes, the SDK's client.

An `Agent` is one real `agentpost mcp` process spoken to by the SDK's own `Client` over stdio;
`Agents` starts them on the test's post office (one database file under AGENTPOST_HOME).
The fixtures that hand them out live in tests/mcp/conftest.py.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import mcp.types as types
import pytest
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.client import Client
from mcp.client.session import IncomingMessage
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.shared.subscriptions import ResourceUpdated

from agentpost.domain.models import SessionInfo
from agentpost.services import PostOffice

T = TypeVar("T")

LEGACY = "2025-11-25"
MODERN = "2026-07-28"
INBOX_URI = "agentpost://inbox"
AGENTPOST = Path(sys.executable).with_name("agentpost")
START_TIMEOUT_S = 60
"""Generous: a server process needs about a second of CPU to start, and CI may be busy."""
CALL_TIMEOUT_S = 60
WAKE_TIMEOUT_S = 20
"""How long a test waits for something that should happen within milliseconds."""


def server_command() -> tuple[str, list[str]]:
    """The console script next to this interpreter, as an MCP client would run it."""
    if AGENTPOST.exists():
        return str(AGENTPOST), ["mcp"]
    return sys.executable, ["-m", "agentpost.cli.entry", "mcp"]


async def gather(*awaitables: Awaitable[T]) -> list[T]:
    """Await all at once; the results in order (a process start costs about a second of CPU)."""
    results: dict[int, T] = {}

    async def one(index: int, awaitable: Awaitable[T]) -> None:
        results[index] = await awaitable

    async with anyio.create_task_group() as group:
        for index, awaitable in enumerate(awaitables):
            group.start_soon(one, index, awaitable)
    return [results[index] for index in range(len(awaitables))]


def text_of(result: types.CallToolResult) -> str:
    assert len(result.content) == 1, result.content
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def structured(result: types.CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None
    return result.structured_content


def ids(messages: list[dict[str, Any]]) -> list[str]:
    return [m["id"] for m in messages]


_OLDER = re.compile(r"^More may be older: `(\w+)` with (.+)\.$", re.MULTILINE)
_ARGUMENT = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^,]+)(?:, |$)')


def older_page_call(result: types.CallToolResult) -> tuple[str, dict[str, Any]] | None:
    """The call a page's text names for the page before it, as a model would make it from
    the text alone (None: the text names none)."""
    found = _OLDER.findall(text_of(result))
    if not found:
        return None
    [(tool, given)] = found
    arguments: dict[str, Any] = {}
    for name, raw in _ARGUMENT.findall(given):
        if raw.startswith('"'):
            arguments[name] = json.loads(raw)
        elif raw in ("true", "false"):
            arguments[name] = raw == "true"
        else:
            arguments[name] = int(raw) if raw.isdigit() else raw
    return tool, arguments


def receipt(sent: dict[str, Any], message_id: str, to: str) -> dict[str, Any]:
    """`to`'s receipt of `message_id` in a `sent` answer."""
    [message] = [m for m in sent["messages"] if m["id"] == message_id]
    [found] = [r for r in message["receipts"] if r["to"] == to]
    return dict(found)


class Agent:
    """One `agentpost mcp` process and the SDK client talking to it."""

    def __init__(self, requested: str | None, revision: str, log: Path) -> None:
        self.requested = requested
        self.revision = revision
        self.log = log
        self.name = ""
        self.session_id = ""
        self.first_answer: dict[str, Any] = {}
        """The structured answer to the session's first call (`whoami`, made at start)."""
        self.client: Client | None = None
        self._updates_in: MemoryObjectSendStream[str]
        self._updates: MemoryObjectReceiveStream[str]
        self._updates_in, self._updates = anyio.create_memory_object_stream[str](100)
        self._stop = anyio.Event()
        self._stopped = anyio.Event()

    def __repr__(self) -> str:
        return f"Agent({self.name or self.requested!r}, {self.revision})"

    @property
    def mcp(self) -> Client:
        assert self.client is not None, f"{self} is not running"
        return self.client

    # -- calling tools ------------------------------------------------------------------------

    async def result(self, tool: str, **arguments: Any) -> types.CallToolResult:
        """The raw tool result, refusals included."""
        with anyio.fail_after(CALL_TIMEOUT_S):
            return await self.mcp.call_tool(tool, arguments)

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """The structured answer of a call that must succeed."""
        result = await self.result(tool, **arguments)
        assert not result.is_error, f"{self} {tool}({arguments}) refused: {text_of(result)}"
        assert result.structured_content is not None
        return result.structured_content

    async def refused(self, tool: str, **arguments: Any) -> str:
        """The code of a call that must be refused: an MCP tool error whose text leads with it."""
        result = await self.result(tool, **arguments)
        text = text_of(result)
        assert result.is_error is True, f"{self} {tool}({arguments}) was accepted: {text}"
        match = re.match(r"([a-z_]+): \S", text)
        assert match is not None, f"the text does not start with a code: {text!r}"
        assert result.structured_content is not None
        assert result.structured_content["error"]["code"] == match.group(1)
        return match.group(1)

    async def mailbox_state(self) -> dict[str, Any]:
        """What a refused call must leave as it was: inbox (peeked), sent, channels, identity."""
        inbox = await self.call("inbox", unread_only=False, peek=True, limit=500)
        sent = await self.call("sent", limit=500)
        channels = await self.call("channels")
        me = await self.call("whoami")
        return {
            "inbox": [(m["id"], m["state"]) for m in inbox["messages"]],
            "unread": inbox["unread"],
            "sent": [
                (m["id"], [(r["to"], r["state"]) for r in m["receipts"]]) for m in sent["messages"]
            ],
            "channels": channels["channels"],
            "whoami": {k: v for k, v in me.items() if k != "urgent"},
        }

    # -- push ---------------------------------------------------------------------------------

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self._updates_in.send_nowait(str(message.params.uri))

    @asynccontextmanager
    async def inbox_updates(self) -> AsyncIterator[Callable[[], Awaitable[str]]]:
        """Subscribe to `agentpost://inbox` the way this revision does; yields `next_update()`.

        2025-11-25: `resources/subscribe`; updates arrive as notifications on the connection.
        2026-07-28: a `subscriptions/listen` stream, held open for the block.
        """
        if self.revision == LEGACY:
            with pytest.warns(MCPDeprecationWarning):
                await self.mcp.subscribe_resource(INBOX_URI)

            async def next_notification() -> str:
                return await self._updates.receive()

            yield next_notification
            return
        async with self.mcp.listen(resource_subscriptions=[INBOX_URI]) as subscription:
            assert subscription.honored.resource_subscriptions == [INBOX_URI]

            async def next_event() -> str:
                event = await anext(subscription)
                assert isinstance(event, ResourceUpdated), event
                return event.uri

            yield next_event

    # -- process lifetime ---------------------------------------------------------------------

    async def run(self, params: StdioServerParameters, *, task_status: TaskStatus[None]) -> None:
        mode = "legacy" if self.revision == LEGACY else "auto"
        try:
            with self.log.open("a") as errlog:
                async with Client(
                    stdio_client(params, errlog=errlog),
                    mode=mode,
                    read_timeout_seconds=CALL_TIMEOUT_S,
                    message_handler=self._on_message,
                ) as client:
                    assert client.protocol_version == self.revision
                    self.client = client
                    self.first_answer = await self.call("whoami")
                    self.name = self.first_answer["agent"]
                    self.session_id = self.first_answer["session_id"]
                    task_status.started()
                    await self._stop.wait()
        finally:
            self.client = None
            self._updates_in.close()
            self._updates.close()
            self._stopped.set()

    async def stop(self) -> None:
        """Close the server's stdin, as an MCP client does, and wait until the process is gone."""
        self._stop.set()
        await self._stopped.wait()

    def stderr(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


class Agents:
    """Starts `agentpost mcp` processes on the test's post office, and stops them at the end."""

    def __init__(self, group: TaskGroup, revision: str, tmp_path: Path) -> None:
        self.group = group
        self.revision = revision
        self.tmp_path = tmp_path
        self.desk = tmp_path / "desk"  # not a git repository: sessions here name their project
        self.desk.mkdir(exist_ok=True)
        self.running: list[Agent] = []
        self.tried: list[Agent] = []
        """Every agent a start was attempted for, in order (its stderr stays readable)."""

    def params(
        self,
        name: str | None,
        env: Mapping[str, str] | None,
        cwd: Path | None,
        project: str | None,
    ) -> StdioServerParameters:
        environ = dict(os.environ)  # AGENTPOST_HOME and AGENTPOST_CONFIG of this test
        if name is not None:
            environ["AGENTPOST_AGENT"] = name
        if project is not None:
            environ["AGENTPOST_PROJECT"] = project
        environ.update(env or {})
        command, args = server_command()
        return StdioServerParameters(command=command, args=args, env=environ, cwd=cwd or self.desk)

    async def start(
        self,
        name: str | None = None,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        project: str | None = "apollo",
    ) -> Agent:
        """A session named `name` (AGENTPOST_AGENT), or with None the name the server derives.

        `project` sets AGENTPOST_PROJECT; None leaves the project to the git context of `cwd`.
        """
        log = self.tmp_path / f"server-{len(self.tried) + 1}-{name or 'derived'}.stderr"
        agent = Agent(name, self.revision, log)
        self.tried.append(agent)
        with anyio.fail_after(START_TIMEOUT_S):
            await self.group.start(agent.run, self.params(name, env, cwd, project))
        self.running.append(agent)
        return agent

    async def start_many(self, *names: str, env: Mapping[str, str] | None = None) -> list[Agent]:
        """Several sessions, started at once."""
        return await gather(*(self.start(name, env=env) for name in names))

    def stop_all(self) -> None:
        for agent in self.running:
            agent._stop.set()


class Ledger:
    """The same post office opened in the test process, for what no tool shows."""

    def __init__(self, office: PostOffice) -> None:
        self.office = office

    async def session(self, session_id: str) -> SessionInfo:
        return await self.office.presence.session(session_id)


async def end_process(ledger: Ledger, agent: Agent, signum: int) -> None:
    """Signal the agent's server process (its pid is in its session) and wait until it exited."""
    pid = (await ledger.session(agent.session_id)).pid
    assert pid is not None
    exited = os.pidfd_open(pid)  # readable once the process has exited
    try:
        os.kill(pid, signum)
        with anyio.fail_after(WAKE_TIMEOUT_S):
            await anyio.wait_readable(exited)
    finally:
        os.close(exited)
