"""The desk: one agent session's mailbox as the tools use it, wherever the post office is.

The MCP tools speak to a `Desk` and never learn where the post office lives: a local desk is the
services bound to one caller (`agentpost.mcp.desk.LocalDesk`), a remote desk is the Python client
bound to one key and session (`agentpost.client.desk.RemoteDesk`). So `agentpost mcp` serves the
same tools, with the same answers and the same refusals, on this machine's SQLite file or on a
service across the network. The methods are the tools' operations, with the caller implied:
neither implementation accepts a sender, so no argument can speak for someone else.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

from agentpost.domain.leadership import Leader
from agentpost.domain.models import (
    AckResult,
    ChannelInfo,
    Inbox,
    Message,
    Notices,
    Presence,
    SendResult,
    SentMessage,
    SessionInfo,
)
from agentpost.domain.requests import RequestAnswer
from agentpost.domain.reservations import Reservation, ReservationsChanged, ReserveResult
from agentpost.domain.tasks import Task, TaskRole, TaskStatusName

StatusName = Literal["active", "idle", "blocked", "done"]
PriorityName = Literal["normal", "urgent"]


class Desk(Protocol):
    """What one agent session can do with its mail. Refusals are `AgentpostError`s."""

    @property
    def agent(self) -> str:
        """The agent this desk speaks for (a local session may take another name)."""
        ...

    async def whoami(self) -> SessionInfo:
        """This session: its agent, project, branch, worktree, objective and status."""
        ...

    async def register(
        self,
        *,
        name: str | None = None,
        description: str | None = None,
        objective: str | None = None,
    ) -> None:
        """Take a name (only a local session may change it) and say what you are doing."""
        ...

    async def set_status(
        self, *, status: StatusName | None = None, objective: str | None = None
    ) -> None: ...

    async def who(
        self, project: str | None = None, include_offline: bool = False
    ) -> list[Presence]: ...

    async def send(
        self,
        to: str | list[str],
        body: str,
        *,
        subject: str | None = None,
        data: Any = None,
        thread_id: str | None = None,
        reply_to: str | None = None,
        priority: PriorityName = "normal",
        ttl_s: float | None = None,
        must_read: bool = False,
    ) -> SendResult: ...

    async def inbox(
        self,
        *,
        unread_only: bool = True,
        limit: int = 20,
        thread_id: str | None = None,
        urgent_only: bool = False,
        peek: bool = False,
        before: str | None = None,
    ) -> Inbox: ...

    async def wait(self, *, timeout_s: float = 60, thread_id: str | None = None) -> Inbox: ...

    async def ack(self, ids: Sequence[str]) -> AckResult: ...

    async def thread(
        self, thread_id: str, limit: int = 50, before: str | None = None
    ) -> list[Message]: ...

    async def sent(self, limit: int = 20, before: str | None = None) -> list[SentMessage]: ...

    async def search(
        self, query: str, limit: int = 20, before: str | None = None
    ) -> list[Message]: ...

    async def channels(self) -> list[ChannelInfo]: ...

    async def join(self, channel: str) -> ChannelInfo: ...

    async def leave(self, channel: str) -> str:
        """Leave a channel; the channel left, as `#name`."""
        ...

    async def read_channel(
        self, channel: str, limit: int = 20, before: str | None = None
    ) -> list[Message]: ...

    async def notices(self) -> Notices:
        """The unread count and urgent mail this session was not told of yet (each told once):
        what rides along on every tool answer."""
        ...

    # -- leadership (coordination) --------------------------------------------------------

    async def leader(self, project: str | None = None) -> Leader:
        """Who leads `project` (default: yours), under which term."""
        ...

    async def claim_leadership(self, project: str | None = None, force: bool = False) -> Leader:
        """Take the seat of your project; `force` is for the owner or a local session."""
        ...

    async def release_leadership(self, project: str | None = None) -> Leader:
        """Step down; the seat is free for the next eligible session."""
        ...

    # -- tasks and requests (coordination) --------------------------------------------------

    async def delegate(
        self,
        to: str,
        title: str,
        *,
        detail: str | None = None,
        priority: PriorityName = "normal",
        data: Any = None,
        due: float | None = None,
    ) -> Task:
        """Hand `to` a task; it arrives as a message of kind `task`."""
        ...

    async def tasks(
        self,
        role: TaskRole = "all",
        status: TaskStatusName | None = None,
        limit: int = 50,
        before: str | None = None,
    ) -> list[Task]:
        """Your tasks, newest first, each with its history (older than task `before`)."""
        ...

    async def task(self, task_id: str) -> Task:
        """One task you made or were given, with its history."""
        ...

    async def update_task(
        self, task_id: str, status: TaskStatusName, *, note: str | None = None, result: Any = None
    ) -> Task:
        """Move a task along its table; the other side is told."""
        ...

    async def request(
        self, to: str, question: str, *, data: Any = None, timeout_s: float = 60
    ) -> RequestAnswer:
        """Ask one agent and wait for the answer (or `timed_out`)."""
        ...

    async def respond(self, request_id: str, answer: str, *, data: Any = None) -> SendResult:
        """Answer a request sent to you, once."""
        ...

    async def check_request(self, request_id: str) -> RequestAnswer:
        """Your request's answer, if one came (after a timeout too)."""
        ...

    # -- reservations (coordination) --------------------------------------------------------

    async def reserve(
        self,
        paths: list[str],
        *,
        exclusive: bool = True,
        ttl_s: float = 3600,
        reason: str | None = None,
    ) -> ReserveResult:
        """Claim paths or globs of your project; per path granted, or listed with its
        conflicts."""
        ...

    async def renew_reservations(
        self, ids: list[str] | None = None, *, ttl_s: float | None = None
    ) -> ReservationsChanged:
        """Extend your live reservations (those of `ids`, else all in your project) by
        `ttl_s`, else by each one's own ttl."""
        ...

    async def release_reservations(
        self, *, paths: list[str] | None = None, ids: list[str] | None = None
    ) -> ReservationsChanged:
        """Give up your reservations (by path or id; with neither, all in your project)."""
        ...

    async def reservations(
        self, project: str | None = None, path: str | None = None
    ) -> list[Reservation]:
        """The live reservations of your project (or `project`); with `path`, those
        overlapping it."""
        ...
