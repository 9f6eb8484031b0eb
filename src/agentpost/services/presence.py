"""Agents, sessions and presence: who is at work, where, on what.

A session is one live connection of an agent. Local sessions carry their pid: one whose process
is gone is offline at once, whatever its last heartbeat said.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio

from agentpost.config import Settings
from agentpost.domain.errors import AgentpostError, ErrorCode, forbidden, invalid, not_found
from agentpost.domain.ids import session_id as new_session_id
from agentpost.domain.limits import check_text, is_one_line, quoted, too_large
from agentpost.domain.models import (
    Caller,
    Presence,
    SessionInfo,
    Status,
    Trust,
    check_session_status,
)
from agentpost.domain.names import POST_OFFICE, RESERVED, SYSTEM, check_name
from agentpost.domain.reservations import check_claims_taken_along
from agentpost.retries import RetryLog
from agentpost.services.accounts import check_identity, check_project
from agentpost.services.heartbeats import Heartbeat
from agentpost.services.local_identity import LocalContext, pid_alive, this_host
from agentpost.services.waiting import held_watch
from agentpost.store import agents as rows
from agentpost.store import keys as key_rows
from agentpost.store import notes
from agentpost.store import reservations as claims
from agentpost.store.database import Connection, Row, Store

log = logging.getLogger(__name__)
_retries = RetryLog(log)

MAX_SUFFIX = 99
MAX_HOST = 255
MAX_HTTP_SESSIONS = 100
"""Sessions over HTTP one agent keeps (minted by `register` or `POST /v1/sessions`, and one per
key): minting another deletes the one that ended longest ago, else one silent for
`SILENT_FOR_S`; with none of those, it is refused. Else a key could mint sessions until the
store fills."""
SILENT_FOR_S = 86_400.0
"""How long a session over HTTP not ended may be silent before it counts as gone, to make room:
a laptop asleep for the night still finds its session in the morning."""


def _check_text(
    value: str | None, what: str, limit: int = 2000, *, one_line: bool = False
) -> str | None:
    """`one_line`: a name of a thing (a host, a branch), shown on one line of `who` and of a
    leader's record, where a line break would forge the lines after it."""
    if value is None:
        return None
    if len(value) > limit:
        raise too_large(what, len(value), limit, "characters")
    check_text(value, what)
    if one_line and not is_one_line(value):
        raise invalid(f"{what} must be one line")
    return value


class PresenceService:
    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self._folders: dict[str, str] = {}  # of local sessions opened here: LocalContext.folder
        self.renamed: Callable[[Connection, Caller, str], None] | None = None
        """What else a rename does, in its transaction, to the caller under its new name:
        leadership's seat follows the name's trust (set by `Leadership`, above this module)."""

    def folder(self, session_id: str | None, worktree: str | None) -> str | None:
        """Where git is asked about a session's worktree (the store's text may hold U+FFFD)."""
        return self._folders.get(session_id or "", worktree)

    # -- identities -------------------------------------------------------------------------

    def _check_identity(self, name: str, *, session: bool = True) -> None:
        check_identity(self.settings, name, session=session)

    def ensure_agent_tx(self, conn: Connection, name: str, project: str | None = None) -> None:
        row = rows.get_agent(conn, name)
        if row is None:
            rows.create_agent(conn, name, now=self.store.clock(), project=project)
        elif row.disabled_at is not None:
            raise AgentpostError(ErrorCode.GONE, f"agent {name!r} is disabled")

    async def ensure_agent(self, name: str) -> Caller:
        """The identity the CLI acts as: created on first use, checked against the roster."""
        self._check_identity(name, session=False)
        await self.store.write(lambda conn: self.ensure_agent_tx(conn, name))
        return Caller(agent=name)

    async def existing_agent(self, name: str) -> Caller:
        """An identity that already exists (a read needs no new agent); `not_found` else."""
        self._check_identity(name, session=False)
        row = await self.store.read(lambda conn: rows.get_agent(conn, name))
        if row is None:
            raise not_found(f"no agent named {name!r}", name=name)
        if row.disabled_at is not None:
            raise AgentpostError(ErrorCode.GONE, f"agent {name!r} is disabled")
        return Caller(agent=name)

    # -- sessions ----------------------------------------------------------------------------

    async def session_of_process(
        self, pid: int, *, owner_ended_too: bool = False
    ) -> notes.LiveSession | None:
        """The session a local process acts for (a command an agent runs, the commit guard's
        `git commit`): the live stdio session of this host started by the same parent as one of
        the process's ancestors, as Claude Code starts both `agentpost mcp` and the commands it
        runs (the hook's lookup, agentpost.store.notes); None when there is none. It carries the
        session's project, the one it reserves in, which the client's settings may have named
        for the server alone. `owner_ended_too`: also one that disabling its agent ended, whose
        process runs on (the agent enabled again or not), so a command of that agent is refused
        as its rather than taken for the owner's; one its own process ended is no one's."""
        now, host = self.store.clock(), this_host()

        def look(conn: Connection) -> list[Row[Any]]:
            found = rows.live_sessions(conn, now, self.settings.offline_after_s)
            return found + rows.sessions_the_owner_ended(conn) if owner_ended_too else found

        found = await self.store.read(look)
        here = [
            notes.LiveSession(
                s.agent, int(s.pid), float(s.started_at), s.project, s.id, s.pid_start
            )
            for s in found
            if s.transport == "stdio" and s.host == host and s.pid
        ]
        here.sort(key=lambda s: s.started_at, reverse=True)
        return notes.session_of_this_process(here, pid)

    async def end_dead_local_sessions(self, agent: str | None = None) -> None:
        """End live-looking sessions of this host whose process is gone, or whose pid another
        process holds now."""
        now = self.store.clock()
        host = this_host()
        live = await self.store.read(
            lambda conn: rows.live_sessions(conn, now, self.settings.offline_after_s, agent=agent)
        )
        dead = [
            s.id for s in live if s.host == host and s.pid and not pid_alive(s.pid, s.pid_start)
        ]
        if dead:
            await self.store.write(lambda conn: rows.end_sessions(conn, dead, self.store.clock()))

    async def open_local_session(
        self, context: LocalContext, *, name: str | None = None, objective: str = ""
    ) -> SessionInfo:
        """Register this process as a session: the given name, or one derived from git."""
        derived = name is None
        base = context.derived_name if name is None else name
        if not derived:  # a derived name is checked suffix by suffix, reserved ones skipped
            self._check_identity(base)
        await self.end_dead_local_sessions()
        # Read as it opens: the process at its pid now is the session's.
        pid_start = notes.process_start(context.pid)

        def tx(conn: Connection) -> SessionInfo:
            now = self.store.clock()
            chosen = base
            if derived:
                chosen = self._free_derived_name(conn, base, now)
            self.ensure_agent_tx(conn, chosen, context.project)
            rows.update_agent(conn, chosen, project=context.project)
            session = SessionInfo(
                id=new_session_id(now),
                agent=chosen,
                transport="stdio",
                host=context.host,
                pid=context.pid,
                project=context.project,
                worktree=context.worktree,
                branch=context.branch,
                objective=objective,
                status=Status.ACTIVE,
                started_at=now,
                heartbeat_at=now,
                ended_at=None,
            )
            # The urgent cursor starts at 0: unread urgent mail waiting for a restarted agent is
            # previewed on its first call, like mail that arrives later.
            rows.open_session(conn, session, derived_name=derived, pid_start=pid_start)
            return session

        opened = await self.store.write(tx)
        self._folders[opened.id] = context.folder or context.worktree
        return opened

    async def open_http_session(
        self,
        caller: Caller,
        *,
        host: str,
        project: str | None = None,
        worktree: str | None = None,
        branch: str | None = None,
        objective: str | None = None,
        description: str | None = None,
    ) -> SessionInfo:
        """A new session of an authenticated agent over HTTP (`register`): a handle the client
        names on later requests, so each of its processes shows up on its own. A project
        given here becomes the agent's project, as a local session's does; a description,
        the agent's description."""
        _check_text(host, "host", MAX_HOST, one_line=True)
        _check_text(description, "description")
        _check_text(worktree, "worktree")
        _check_text(branch, "branch", MAX_HOST, one_line=True)
        _check_text(objective, "objective")
        if project is not None:
            check_name(project, "project")

        def tx(conn: Connection) -> SessionInfo:
            now = self.store.clock()
            row = rows.get_agent(conn, caller.agent)
            if row is None:
                raise AgentpostError(ErrorCode.UNAUTHENTICATED, f"no agent {caller.agent!r}")
            if row.disabled_at is not None:
                raise AgentpostError(ErrorCode.GONE, f"agent {caller.agent!r} is disabled")
            if not rows.make_room_for_http_session(
                conn, caller.agent, MAX_HTTP_SESSIONS, SILENT_FOR_S, now
            ):
                raise AgentpostError(
                    ErrorCode.CONFLICT,
                    f"{caller.agent} has {MAX_HTTP_SESSIONS} sessions over HTTP in use: end "
                    "one first (DELETE /v1/sessions/{id})",
                    details={"limit": MAX_HTTP_SESSIONS},
                )
            if project is not None:
                rows.update_agent(conn, caller.agent, project=project)
            if description is not None:
                rows.update_agent(conn, caller.agent, description=description)
            session = http_session(
                new_session_id(now),
                caller.agent,
                host=host or "-",
                project=project or row.project,
                now=now,
                worktree=worktree,
                branch=branch,
                objective=objective or "",
            )
            rows.open_session(conn, session, derived_name=False)
            return session

        return await self.store.write(tx)

    def _free_derived_name(self, conn: Connection, base: str, now: float) -> str:
        live = {s.agent for s in rows.live_sessions(conn, now, self.settings.offline_after_s)}
        for n in range(1, MAX_SUFFIX + 1):
            candidate = base if n == 1 else f"{base[:60]}-{n}"
            if candidate in live or candidate in RESERVED:
                continue
            existing = rows.get_agent(conn, candidate)
            if existing is None or (
                existing.disabled_at is None and not _a_strangers(conn, existing)
            ):
                check_identity(self.settings, candidate, taken=None if n == 1 else base)
                return candidate
        raise AgentpostError(
            ErrorCode.CONFLICT, f"every name from {base!r} to -{MAX_SUFFIX} is live"
        )

    async def rename_session(self, caller: Caller, name: str) -> Caller:
        """Move the caller's session to another agent name (refused while someone holds it)."""
        self._check_identity(name)
        if caller.session_id is None:
            raise invalid("only a session can take a name")
        await self.end_dead_local_sessions(name)

        def tx(conn: Connection) -> None:
            now = self.store.clock()
            session = rows.get_session(conn, caller.session_id or "")
            if session is not None and session.transport != "stdio" and name != caller.agent:
                # A key's sessions speak for the key's agent: no other name, ever.
                raise forbidden(f"this session speaks for {caller.agent!r}, the agent of its key")
            if name != caller.agent:
                holders = rows.live_sessions(conn, now, self.settings.offline_after_s, agent=name)
                if holders:
                    raise AgentpostError(
                        ErrorCode.CONFLICT, f"{name!r} is held by another live session"
                    )
            project = session.project if session is not None else None
            self.ensure_agent_tx(conn, name, project)
            rows.update_agent(conn, name, project=project)
            rows.update_session(
                conn,
                caller.session_id or "",
                agent=name,
                derived_name=False,
                urgent_cursor=0,
            )
            if name != caller.agent:
                claims.follow_name(conn, caller.agent, name, now, self.settings.offline_after_s)
                held = claims.live_count(conn, name, now, self.settings.offline_after_s)
                check_claims_taken_along(held, name)
            if self.renamed is not None and name != caller.agent:
                self.renamed(conn, renamed, caller.agent)

        renamed = Caller(agent=name, session_id=caller.session_id, trust=caller.trust)
        await self.store.write(tx)
        return renamed

    async def register(
        self,
        caller: Caller,
        *,
        name: str | None = None,
        description: str | None = None,
        objective: str | None = None,
    ) -> Caller:
        """Take a name and set the profile; everything is checked first, so a refusal changes
        nothing. Returns the caller under its (possibly new) name."""
        _check_text(description, "description")
        _check_text(objective, "objective")
        if name is not None and name != caller.agent:
            caller = await self.rename_session(caller, name)
        await self.update_profile(caller, description=description, objective=objective)
        return caller

    async def update_profile(
        self,
        caller: Caller,
        *,
        description: str | None = None,
        objective: str | None = None,
        status: str | None = None,
    ) -> None:
        await self.store.write(
            self.profile_change(caller, description=description, objective=objective, status=status)
        )

    def profile_change(
        self,
        caller: Caller,
        *,
        description: str | None = None,
        objective: str | None = None,
        status: str | None = None,
    ) -> Callable[[Connection], None]:
        """The write `update_profile` makes, every value checked now: a caller that changes
        more in the same transaction (`Directory.update_profile`) checks all of it before
        anything is written, so a refusal changes nothing."""
        _check_text(description, "description")
        _check_text(objective, "objective")
        checked = None if status is None else check_session_status(status)

        def tx(conn: Connection) -> None:
            if description is not None:
                rows.update_agent(conn, caller.agent, description=description)
            now = self.store.clock()
            values: dict[str, Any] = {"heartbeat_at": now}
            if objective is not None:
                values.update(objective=objective, said_at=now)
            if checked is not None:
                values.update(status=checked.value, said_at=now)
            if caller.session_id is not None:
                rows.update_session(conn, caller.session_id, **values)

        return tx

    async def heartbeat(self, session_id: str, *, branch: str | None = None) -> None:
        """The session is alive; `branch`, if given, is the one its worktree has checked out now
        (a local session's process looks at every heartbeat)."""
        values: dict[str, Any] = {} if branch is None else {"branch": branch}
        await self.store.write(
            lambda conn: rows.update_session(
                conn, session_id, heartbeat_at=self.store.clock(), **values
            )
        )

    async def end_session(self, session_id: str) -> None:
        self._folders.pop(session_id, None)
        ended = [session_id]
        await self.store.write(lambda conn: rows.end_sessions(conn, ended, self.store.clock()))

    def _own_session(self, conn: Connection, caller: Caller, session_id: str) -> Row[Any]:
        """A session of the caller's own; another agent's is as unknown as a missing one."""
        row = rows.get_session(conn, session_id) if isinstance(session_id, str) else None
        if row is None or row.agent != caller.agent:
            raise not_found(
                f"no session {quoted(session_id)!r} of yours", session=quoted(session_id)
            )
        return row

    @asynccontextmanager
    async def held_open(
        self,
        caller: Caller,
        session_now: Callable[[], str | None] | None = None,
        *,
        counted: bool = False,
    ) -> AsyncIterator[None]:
        """While inside, the caller's session heartbeats as if it made requests: an open
        stream (an MCP subscription) keeps its agent online with no request of its own. Once
        its key no longer stands, the next beat ends what is inside with `unauthenticated`;
        when the process stops, it ends with `unavailable`, to be opened again elsewhere.
        `session_now`, if given, names the session the stream speaks for at each beat (None:
        still the caller's). A `counted` stream is one of the agent's waits held open
        (`max_open_waits`): refused `rate_limited` before it opens when they are all taken,
        as an event stream is; a stream a client may open without end must be.
        Revoking the key or disabling the agent wakes it (`wakeups.rouse`), so it ends at once,
        as a REST stream does, not at its next beat."""
        ended: AgentpostError | None = None
        # Woken by the agent's news and by a change of its standing. A following watch is not
        # one of the agent's waits (`Store.watching`): only a counted stream takes one.
        news = (
            held_watch(self.store, caller, self.settings.max_open_waits)
            if counted
            else self.store.watch_following(lambda: caller.agent)
        )

        async def keep() -> None:
            nonlocal ended
            if caller.session_id is None:
                return
            beat = Heartbeat(self.store, caller, self.settings.heartbeat_s)
            while True:
                await news.wait(beat.timeout(None) or self.settings.heartbeat_s)
                if session_now is not None:
                    beat.follow(session_now())
                try:
                    await beat.beat()
                except AgentpostError as err:
                    if err.code is ErrorCode.UNAUTHENTICATED:  # its key was revoked: it ends
                        ended = err
                        group.cancel_scope.cancel()
                        return
                    _retries.failed("a held-open stream's heartbeat", err)  # busy
                else:
                    _retries.recovered("a held-open stream's heartbeat")

        async def stop() -> None:
            nonlocal ended
            await self.store.until_stopping()
            ended = AgentpostError(ErrorCode.UNAVAILABLE, "the server is stopping; open it again")
            group.cancel_scope.cancel()

        with news:
            async with anyio.create_task_group() as group:
                group.start_soon(keep)
                group.start_soon(stop)
                try:
                    yield
                finally:
                    group.cancel_scope.cancel()
        if ended is not None:
            raise ended

    async def heartbeat_of(
        self, caller: Caller, session_id: str, *, branch: str | None = None
    ) -> bool:
        """Keep one of the caller's live sessions online (over HTTP, by handle); `branch`, as
        for `heartbeat`: a remote-backed stdio session's worktree may check out another.
        Whether that moved the session to another branch."""
        values = (
            {}
            if branch is None
            else {"branch": _check_text(branch, "branch", MAX_HOST, one_line=True)}
        )

        def tx(conn: Connection) -> bool:
            session = self._own_session(conn, caller, session_id)
            if session.ended_at is not None:
                raise not_found(
                    f"session {quoted(session_id)!r} has ended", session=quoted(session_id)
                )
            rows.update_session(conn, session_id, heartbeat_at=self.store.clock(), **values)
            return branch is not None and branch != session.branch

        return await self.store.write(tx)

    async def end_session_of(self, caller: Caller, session_id: str) -> None:
        """End one of the caller's sessions (again is fine): it shows offline at once."""

        def tx(conn: Connection) -> None:
            self._own_session(conn, caller, session_id)
            rows.end_sessions(conn, [session_id], self.store.clock())

        await self.store.write(tx)

    # -- reading presence -----------------------------------------------------------------------

    async def session(self, session_id: str) -> SessionInfo:
        row = await self.store.read(lambda conn: rows.get_session(conn, session_id))
        if row is None:
            raise not_found(f"no session {quoted(session_id)!r}")
        return _session_info(row)

    async def who(
        self, project: str | None = None, include_offline: bool = False
    ) -> list[Presence]:
        check_project(project)  # as the directory does: no project could have such a name
        await self.end_dead_local_sessions()
        now = self.store.clock()

        def tx(conn: Connection) -> tuple[list[Row[Any]], Counter[str]]:
            live = rows.live_sessions(conn, now, self.settings.offline_after_s)
            found = rows.presence_rows(conn, project, now, self.settings.offline_after_s)
            return found, Counter(s.agent for s in live)

        found, online = await self.store.read(tx)
        out = []
        for row in found:
            if row.name in (SYSTEM, POST_OFFICE):
                continue
            is_online = row.name in online
            if not (is_online or include_offline):
                continue
            # A session that said nothing (a key's own, which any request opens: each command
            # of the owner's over HTTP) was stored `active` by its opening, not by its agent:
            # shown as such, an owner long gone read as active.
            said = row.said_at is not None
            out.append(
                Presence(
                    name=row.name,
                    description=row.description,
                    project=row.project or row.agent_project,
                    branch=row.branch,
                    worktree=row.worktree,
                    objective=(row.objective if said else None) or "",
                    status=rows.status_of(row.status if said else None),
                    online=is_online,
                    last_seen_s=None
                    if row.last_seen is None
                    else round(max(0.0, now - row.last_seen), 1),
                    sessions=online[row.name],
                    trust=Trust(row.trust),
                )
            )
        return out

    async def agent_names(self) -> list[str]:
        names = await self.store.read(rows.enabled_agent_names)
        return [n for n in names if n not in (SYSTEM, POST_OFFICE)]


def _a_strangers(conn: Connection, agent: Row[Any]) -> bool:
    """An agent someone the owner has not vouched for holds a key to (one that registered
    itself over the service, say): a session that only derived this name must not become it,
    or that key's holder would read the session's mail and speak as it."""
    return agent.trust != Trust.VERIFIED and key_rows.holds_live_key(conn, agent.name)


def http_session(
    session_id: str,
    agent: str,
    *,
    host: str,
    project: str | None,
    now: float,
    worktree: str | None = None,
    branch: str | None = None,
    objective: str = "",
) -> SessionInfo:
    """A session over HTTP: no pid to watch, so only its heartbeat says it is alive."""
    return SessionInfo(
        id=session_id,
        agent=agent,
        transport="http",
        host=host,
        pid=None,
        project=project,
        worktree=worktree,
        branch=branch,
        objective=objective,
        status=Status.ACTIVE,
        started_at=now,
        heartbeat_at=now,
        ended_at=None,
    )


def _session_info(row: Row[Any]) -> SessionInfo:
    return SessionInfo(
        id=row.id,
        agent=row.agent,
        transport=row.transport,
        host=row.host,
        pid=row.pid,
        project=row.project,
        worktree=row.worktree,
        branch=row.branch,
        objective=row.objective,
        status=rows.status_of(row.status),
        started_at=row.started_at,
        heartbeat_at=row.heartbeat_at,
        ended_at=row.ended_at,
    )
