"""The local desk: the services bound to one caller, as the MCP tools use them.

`LocalDesk` is the `Desk` (agentpost.domain.desk) of a post office opened in this process; the
remote one is `agentpost.client.desk.RemoteDesk`. Who the caller is comes from a `CallerSource`:
fixed per stdio connection (`SessionCaller`, which `register` may rename), asked afresh on each
request over HTTP (`agentpost.mcp.http.RequestCaller`). Each operation asks the source to
admit its caller first: a stdio session whose agent the owner disabled has no key to be refused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from agentpost.domain.desk import PriorityName, StatusName
from agentpost.domain.leadership import Leader
from agentpost.domain.models import (
    AckResult,
    Caller,
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
from agentpost.services import PostOffice

_told: ContextVar[tuple[Caller, Notices] | None] = ContextVar("told_with_a_send", default=None)
"""The notices a `send` read and told in its own transaction, for the answer that carries it
(the tool asks `notices` next, in the same request's context): one transaction, not two."""


class CallerSource(Protocol):
    """Who is calling: fixed per stdio connection, asked per request over HTTP."""

    @property
    def caller(self) -> Caller: ...

    async def admitted(self) -> Caller:
        """The caller, refused if it may not act now (its agent disabled since it started)."""
        ...

    def rename(self, caller: Caller) -> None:
        """`register` took another name; refused where identity comes from a key."""


@dataclass
class SessionCaller:
    """A stdio connection's identity; `register` may move it to another name. No key stands
    behind it to be refused, so each call is first put to `admit` (`Admission.admit`)."""

    caller: Caller
    admit: Callable[[Caller], Awaitable[None]]

    async def admitted(self) -> Caller:
        caller = self.caller
        await self.admit(caller)
        return caller

    def rename(self, caller: Caller) -> None:
        self.caller = caller


class LocalDesk:
    """The services of `office`, each call made as the caller `callers` names at that moment."""

    def __init__(self, office: PostOffice, callers: CallerSource) -> None:
        self.office = office
        self.callers = callers

    @property
    def caller(self) -> Caller:
        return self.callers.caller

    @property
    def agent(self) -> str:
        return self.caller.agent

    async def _acting(self) -> Caller:
        """The caller of each operation, once its source admits it."""
        return await self.callers.admitted()

    async def whoami(self) -> SessionInfo:
        return await self.office.presence.session((await self._acting()).session_id or "")

    async def register(
        self,
        *,
        name: str | None = None,
        description: str | None = None,
        objective: str | None = None,
    ) -> None:
        renamed = await self.office.presence.register(
            await self._acting(), name=name, description=description, objective=objective
        )
        self.callers.rename(renamed)

    async def set_status(
        self, *, status: StatusName | None = None, objective: str | None = None
    ) -> None:
        await self.office.presence.update_profile(
            await self._acting(), status=status, objective=objective
        )

    async def who(
        self, project: str | None = None, include_offline: bool = False
    ) -> list[Presence]:
        await self._acting()
        return await self.office.presence.who(project, include_offline)

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
    ) -> SendResult:
        caller = await self._acting()
        sent, notices = await self.office.mailbox.send_with_notices(
            caller,
            to,
            body,
            subject=subject,
            data=data,
            thread_id=thread_id,
            reply_to=reply_to,
            priority=priority,
            ttl_s=ttl_s,
            must_read=must_read,
        )
        _told.set((caller, notices))
        return sent

    async def inbox(
        self,
        *,
        unread_only: bool = True,
        limit: int = 20,
        thread_id: str | None = None,
        urgent_only: bool = False,
        peek: bool = False,
        before: str | None = None,
    ) -> Inbox:
        return await self.office.mailbox.inbox(
            await self._acting(),
            unread_only=unread_only,
            limit=limit,
            thread_id=thread_id,
            urgent_only=urgent_only,
            peek=peek,
            before=before,
        )

    async def wait(self, *, timeout_s: float = 60, thread_id: str | None = None) -> Inbox:
        return await self.office.mailbox.wait(
            await self._acting(), timeout_s=timeout_s, thread_id=thread_id
        )

    async def ack(self, ids: Sequence[str]) -> AckResult:
        return await self.office.mailbox.ack(await self._acting(), ids)

    async def thread(
        self, thread_id: str, limit: int = 50, before: str | None = None
    ) -> list[Message]:
        return await self.office.history.thread(await self._acting(), thread_id, limit, before)

    async def sent(self, limit: int = 20, before: str | None = None) -> list[SentMessage]:
        return await self.office.history.sent(await self._acting(), limit, before)

    async def search(self, query: str, limit: int = 20, before: str | None = None) -> list[Message]:
        return await self.office.history.search(await self._acting(), query, limit, before)

    async def channels(self) -> list[ChannelInfo]:
        return await self.office.channels.overview(await self._acting())

    async def join(self, channel: str) -> ChannelInfo:
        return await self.office.channels.join(await self._acting(), channel)

    async def leave(self, channel: str) -> str:
        return str((await self.office.channels.leave(await self._acting(), channel))["left"])

    async def read_channel(
        self, channel: str, limit: int = 20, before: str | None = None
    ) -> list[Message]:
        return await self.office.channels.history(await self._acting(), channel, limit, before)

    async def notices(self) -> Notices:
        caller, told = self.caller, _told.get()  # after an admitted act, in its answer
        if told is not None:
            _told.set(None)  # told once: a later answer reads them afresh
            if told[0] == caller:
                return told[1]
        return await self.office.mailbox.notices(caller)

    # -- leadership (coordination) --------------------------------------------------------

    async def leader(self, project: str | None = None) -> Leader:
        return await self.office.leadership.leader(await self._acting(), project)

    async def claim_leadership(self, project: str | None = None, force: bool = False) -> Leader:
        return await self.office.leadership.claim(await self._acting(), project, force=force)

    async def release_leadership(self, project: str | None = None) -> Leader:
        return await self.office.leadership.release(await self._acting(), project)

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
        return await self.office.tasks.delegate(
            await self._acting(), to, title, detail, priority=priority, data=data, due=due
        )

    async def tasks(
        self,
        role: TaskRole = "all",
        status: TaskStatusName | None = None,
        limit: int = 50,
        before: str | None = None,
    ) -> list[Task]:
        return await self.office.tasks.tasks(await self._acting(), role, status, limit, before)

    async def task(self, task_id: str) -> Task:
        return await self.office.tasks.task(await self._acting(), task_id)

    async def update_task(
        self, task_id: str, status: TaskStatusName, *, note: str | None = None, result: Any = None
    ) -> Task:
        return await self.office.tasks.update_task(
            await self._acting(), task_id, status, note=note, result=result
        )

    async def request(
        self, to: str, question: str, *, data: Any = None, timeout_s: float = 60
    ) -> RequestAnswer:
        return await self.office.requests.request(
            await self._acting(), to, question, data, timeout_s
        )

    async def respond(self, request_id: str, answer: str, *, data: Any = None) -> SendResult:
        return await self.office.requests.respond(await self._acting(), request_id, answer, data)

    async def check_request(self, request_id: str) -> RequestAnswer:
        return await self.office.requests.check_request(await self._acting(), request_id)

    # -- reservations (coordination) --------------------------------------------------------

    async def reserve(
        self,
        paths: list[str],
        *,
        exclusive: bool = True,
        ttl_s: float = 3600,
        reason: str | None = None,
    ) -> ReserveResult:
        return await self.office.reservations.reserve(
            await self._acting(), paths, exclusive=exclusive, ttl_s=ttl_s, reason=reason
        )

    async def renew_reservations(
        self, ids: list[str] | None = None, *, ttl_s: float | None = None
    ) -> ReservationsChanged:
        return await self.office.reservations.renew_reservations(
            await self._acting(), ids, ttl_s=ttl_s
        )

    async def release_reservations(
        self, *, paths: list[str] | None = None, ids: list[str] | None = None
    ) -> ReservationsChanged:
        return await self.office.reservations.release_reservations(
            await self._acting(), paths=paths, ids=ids
        )

    async def reservations(
        self, project: str | None = None, path: str | None = None
    ) -> list[Reservation]:
        return await self.office.reservations.reservations(await self._acting(), project, path)
