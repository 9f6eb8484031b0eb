"""`RemoteDesk`: the `Desk` of one session on a remote service, over `AsyncClient`.

What `agentpost mcp --url … --key …` serves its tools from. The session is a handle minted for
this process (`open_session`, with the worktree and branch it runs in), so `who` shows it like a
local session, and ended when the process ends; minted by the first call that reaches the
service, so a desk may be made while the service is down. What the REST API leaves to the client:

- the piggyback's urgent previews: the unread urgent mail is looked up with each answer and each
  message is told once per session (the local desk keeps that cursor in the store);
- the session's own record for `whoami`, kept from what this desk set;
- a session the service no longer knows (ended from outside, or deleted once the agent had
  too many): the call that hears so mints a new one with the same worktree, branch, status
  and objective, and is made once more on it, as a restarted process would start over.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar, cast

import anyio

from agentpost.client.async_client import AsyncClient
from agentpost.domain.desk import PriorityName, StatusName
from agentpost.domain.errors import AgentpostError, ErrorCode, forbidden
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
    Status,
)
from agentpost.domain.names import check_name
from agentpost.domain.requests import RequestAnswer
from agentpost.domain.reservations import Reservation, ReservationsChanged, ReserveResult
from agentpost.domain.tasks import Task, TaskRole, TaskStatusName

URGENT_PREVIEWS = 20
"""Urgent messages told per answer, oldest first, as a local session tells them."""
MAX_INBOX_PAGE = 500
"""The most an inbox page holds (the service refuses more)."""
AGENT_UNKNOWN = "(the agent of this key: the post office has not answered yet)"
"""The name said before the service was first reached."""

T = TypeVar("T")


class RemoteDesk:
    """A session of the key's agent on the service `client` speaks to. Its session is minted
    by the first call that reaches the service (see `connect`): until then each call is
    refused as the client refuses it (`unavailable` while the service is down). A `project`
    given becomes the agent's project, as a local session's does."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        project: str | None = None,
        worktree: str | None = None,
        branch: str | None = None,
        objective: str | None = None,
    ) -> None:
        self.client = client
        self._session: SessionInfo | None = None  # until the service is first reached
        self._project = project  # as asked for at the start: a new session asks the same
        self._where = (worktree, branch, objective)
        self._minted: str | None = None  # minted, not yet read back
        self._told: set[str] = set()
        self._renewing = anyio.Lock()
        self._refused: AgentpostError | None = None
        self._stepped_down = False  # released the seat, and claimed none since

    @classmethod
    async def open(cls, client: AsyncClient, **where: str | None) -> RemoteDesk:
        """A desk whose session is minted now (`where`: as for the constructor)."""
        desk = cls(client, **where)
        await desk.connect()
        return desk

    @property
    def connected(self) -> bool:
        """Whether the service has been reached and this desk has its session."""
        return self._session is not None

    async def connect(self) -> SessionInfo:
        """This desk's session: minted now, unless the service was reached before."""
        if self._session is not None:
            return self._session
        async with self._renewing:
            if self._session is None:
                self._session = await self._unless_refused(self._mint)
        return self._session

    async def _mint(self) -> SessionInfo:
        worktree, branch, objective = self._where
        if self._minted is None:  # a session minted whose agent was not read yet is kept
            self._minted = await self.client.open_session(
                project=self._project, worktree=worktree, branch=branch, objective=objective
            )
            self.client.session = self._minted
        me = await self.client.me()
        now = time.time()
        return SessionInfo(
            id=self._minted,
            agent=me.name,
            transport="http",
            host=socket.gethostname(),
            pid=None,
            project=me.project,
            worktree=worktree,
            branch=branch,
            objective=objective or "",
            status=Status.ACTIVE,
            started_at=now,
            heartbeat_at=now,
            ended_at=None,
        )

    @property
    def session_id(self) -> str | None:
        return None if self._session is None else self._session.id

    def is_lost(self, err: AgentpostError, session_id: str) -> bool:
        """Whether `err` says the service no longer knows the session `session_id`."""
        return err.code is ErrorCode.NOT_FOUND and err.details.get("session") == session_id

    async def keep_session(self, call: Callable[[], Awaitable[T]]) -> T:
        """`call`, on this desk's session (minted first if the service was never reached);
        when the service answers that the session is gone, once more on a new session (a
        refusal of that one is the caller's: no loop of new sessions).

        Once the service has refused the key (revoked, or its agent disabled), every later
        call is refused here with that answer: each request with it would be one more failed
        authentication, and a few more lock this machine's address out, for every agent and
        the owner."""
        lost = (await self.connect()).id
        try:
            return await self._unless_refused(call)
        except AgentpostError as err:
            if not self.is_lost(err, lost):
                raise
        await self._unless_refused(lambda: self.renew(lost))
        return await self._unless_refused(call)

    async def _unless_refused(self, call: Callable[[], Awaitable[T]]) -> T:
        if self._refused is not None:
            raise self._refused
        try:
            return await call()
        except AgentpostError as err:
            if err.code is ErrorCode.UNAUTHENTICATED:
                self._refused = err
            raise

    async def renew(self, lost: str) -> None:
        """Speak for a new session in place of `lost`, with its worktree, branch, status and
        objective; once, however many calls heard of the loss at the same time."""
        async with self._renewing:
            old = self._session
            if old is None or old.id != lost:
                return  # another call has renewed it meanwhile
            session_id = await self.client.open_session(
                project=self._project,
                worktree=old.worktree,
                branch=old.branch,
                objective=old.objective or None,
                auto_lead=not self._stepped_down,  # else it took back the seat it gave up
            )
            self.client.session = session_id
            now = time.time()
            self._session = replace(
                old, id=session_id, status=Status.ACTIVE, started_at=now, heartbeat_at=now
            )
            if old.status is not Status.ACTIVE:
                await self.client.update_me(status=cast(StatusName, old.status.value))
                self._session = replace(self._session, status=old.status)

    @property
    def agent(self) -> str:
        return AGENT_UNKNOWN if self._session is None else self._session.agent

    async def heartbeat(self, branch: str | None = None) -> None:
        """Alive; on `branch` now, if given and moved (a session minted again keeps it)."""
        session = await self.connect()
        moved = None if branch == session.branch else branch
        await self.keep_session(lambda: self.client.heartbeat(self._mine().id, branch=moved))
        self._session = replace(
            self._mine(), heartbeat_at=time.time(), branch=moved or self._mine().branch
        )

    def _mine(self) -> SessionInfo:
        assert self._session is not None, "connected first"
        return self._session

    async def close(self) -> None:
        """End the session: it shows offline at once (one the service no longer knows is no
        more to end, nor is one of a refused key, nor one never minted)."""
        if self._refused is not None or self._session is None:
            return
        session_id = self._session.id
        try:
            await self.client.end_session(session_id)
        except AgentpostError as err:
            if not self.is_lost(err, session_id):
                raise

    async def whoami(self) -> SessionInfo:
        await self.heartbeat()  # and so a revoked key is told here, not only on the next send
        return self._mine()

    async def register(
        self,
        *,
        name: str | None = None,
        description: str | None = None,
        objective: str | None = None,
    ) -> None:
        await self.connect()
        # A name no agent could have is refused as a local session refuses it.
        if name is not None and check_name(name) != self.agent:
            raise forbidden(f"this session speaks for {self.agent!r}, the agent of its key")
        await self.set_profile(description=description, objective=objective)

    async def set_status(
        self, *, status: StatusName | None = None, objective: str | None = None
    ) -> None:
        await self.set_profile(status=status, objective=objective)

    async def set_profile(
        self,
        *,
        description: str | None = None,
        status: StatusName | None = None,
        objective: str | None = None,
    ) -> None:
        await self.keep_session(
            lambda: self.client.update_me(
                description=description, status=status, objective=objective
            )
        )
        if status is not None:
            self._session = replace(self._mine(), status=Status(status))
        if objective is not None:
            self._session = replace(self._mine(), objective=objective)

    async def who(
        self, project: str | None = None, include_offline: bool = False
    ) -> list[Presence]:
        return await self.keep_session(
            lambda: self.client.who(project, include_offline=include_offline)
        )

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
        return await self.keep_session(
            lambda: self.client.send(
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
        )

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
        return await self.keep_session(
            lambda: self.client.inbox(
                unread_only=unread_only,
                limit=limit,
                thread_id=thread_id,
                urgent_only=urgent_only,
                peek=peek,
                before=before,
            )
        )

    async def wait(self, *, timeout_s: float = 60, thread_id: str | None = None) -> Inbox:
        return await self.keep_session(lambda: self.client.wait(timeout_s, thread_id=thread_id))

    async def ack(self, ids: Sequence[str]) -> AckResult:
        return await self.keep_session(lambda: self.client.ack(ids))

    async def thread(
        self, thread_id: str, limit: int = 50, before: str | None = None
    ) -> list[Message]:
        return await self.keep_session(
            lambda: self.client.thread(thread_id, limit=limit, before=before)
        )

    async def sent(self, limit: int = 20, before: str | None = None) -> list[SentMessage]:
        return await self.keep_session(lambda: self.client.sent(limit=limit, before=before))

    async def search(self, query: str, limit: int = 20, before: str | None = None) -> list[Message]:
        return await self.keep_session(
            lambda: self.client.search(query, limit=limit, before=before)
        )

    async def channels(self) -> list[ChannelInfo]:
        return await self.keep_session(lambda: self.client.channels())

    async def join(self, channel: str) -> ChannelInfo:
        return await self.keep_session(lambda: self.client.join_channel(channel))

    async def leave(self, channel: str) -> str:
        return await self.keep_session(lambda: self.client.leave_channel(channel))

    async def read_channel(
        self, channel: str, limit: int = 20, before: str | None = None
    ) -> list[Message]:
        return await self.keep_session(
            lambda: self.client.channel_history(channel, limit=limit, before=before)
        )

    async def notices(self) -> Notices:
        """The unread count, and the unread urgent mail this session has not been shown yet.

        What was told is the oldest of the unread urgent mail (new mail only comes after it),
        so one page as long as that, and the previews after it, holds everything to tell."""
        page = min(MAX_INBOX_PAGE, len(self._told) + URGENT_PREVIEWS)
        found = await self.keep_session(
            lambda: self.client.inbox(urgent_only=True, peek=True, limit=page)
        )
        fresh = [m for m in found.messages if m.id not in self._told][:URGENT_PREVIEWS]
        # Mail read since is no longer unread and never will be again: only these need keeping.
        still_unread = {m.id for m in found.messages}
        self._told = (self._told & still_unread) | {m.id for m in fresh}
        return Notices(found.unread, fresh)

    # -- leadership (coordination) --------------------------------------------------------

    async def leader(self, project: str | None = None) -> Leader:
        return await self.keep_session(lambda: self.client.leader(project=project))

    async def claim_leadership(self, project: str | None = None, force: bool = False) -> Leader:
        seat = await self.keep_session(
            lambda: self.client.claim_leadership(project=project, force=force)
        )
        self._stepped_down = False
        return seat

    async def release_leadership(self, project: str | None = None) -> Leader:
        seat = await self.keep_session(lambda: self.client.release_leadership(project=project))
        self._stepped_down = self._stepped_down or seat.released is True
        return seat

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
        return await self.keep_session(
            lambda: self.client.delegate(
                to, title, detail=detail, priority=priority, data=data, due=due
            )
        )

    async def tasks(
        self,
        role: TaskRole = "all",
        status: TaskStatusName | None = None,
        limit: int = 50,
        before: str | None = None,
    ) -> list[Task]:
        return await self.keep_session(
            lambda: self.client.tasks(role, status=status, limit=limit, before=before)
        )

    async def task(self, task_id: str) -> Task:
        return await self.keep_session(lambda: self.client.task(task_id))

    async def update_task(
        self, task_id: str, status: TaskStatusName, *, note: str | None = None, result: Any = None
    ) -> Task:
        return await self.keep_session(
            lambda: self.client.update_task(task_id, status, note=note, result=result)
        )

    async def request(
        self, to: str, question: str, *, data: Any = None, timeout_s: float = 60
    ) -> RequestAnswer:
        return await self.keep_session(
            lambda: self.client.request(to, question, data=data, timeout_s=timeout_s)
        )

    async def respond(self, request_id: str, answer: str, *, data: Any = None) -> SendResult:
        return await self.keep_session(lambda: self.client.respond(request_id, answer, data=data))

    async def check_request(self, request_id: str) -> RequestAnswer:
        return await self.keep_session(lambda: self.client.check_request(request_id))

    # -- reservations (coordination) --------------------------------------------------------

    async def reserve(
        self,
        paths: list[str],
        *,
        exclusive: bool = True,
        ttl_s: float = 3600,
        reason: str | None = None,
    ) -> ReserveResult:
        return await self.keep_session(
            lambda: self.client.reserve(paths, exclusive=exclusive, ttl_s=ttl_s, reason=reason)
        )

    async def renew_reservations(
        self, ids: list[str] | None = None, *, ttl_s: float | None = None
    ) -> ReservationsChanged:
        return await self.keep_session(lambda: self.client.renew_reservations(ids, ttl_s=ttl_s))

    async def release_reservations(
        self, *, paths: list[str] | None = None, ids: list[str] | None = None
    ) -> ReservationsChanged:
        return await self.keep_session(
            lambda: self.client.release_reservations(paths=paths, ids=ids)
        )

    async def reservations(
        self, project: str | None = None, path: str | None = None
    ) -> list[Reservation]:
        return await self.keep_session(lambda: self.client.reservations(project=project, path=path))
