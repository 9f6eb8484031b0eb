"""Leadership: who leads each project, claiming and releasing the seat, and failing over.

The seat is the lease `leader:<project>` (agentpost.store.leases): held while the holder's
session lives, claimed atomically by the store, with a term that grows with every new holder.
Every change of holder is announced on `#<project>` by `system`, in the claim's transaction, so
nobody learns of a leader the log does not show.

Failover needs no daemon: each eligible local session `stand`s for the seat in the background.
It sleeps until the seat may have changed (a commit, the holder's lease running out, or the
holder's process exiting, which Linux reports at once through a pidfd) and then claims it if
it is free; of several standing sessions the store lets exactly one win.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import anyio

from agentpost.config import Settings
from agentpost.domain.errors import AgentpostError, ErrorCode, forbidden, invalid, not_found
from agentpost.domain.leadership import (
    LEASE_PREFIX,
    Leader,
    check_vouched,
    lease_name,
    may_lead,
)
from agentpost.domain.models import Caller, Trust
from agentpost.domain.names import check_name
from agentpost.retries import RetryLog
from agentpost.services import accounts, addressing, seats
from agentpost.services.admin_gate import AdminGate
from agentpost.services.heartbeats import beat_asking
from agentpost.services.local_identity import origin_head, pid_alive, process_exit, this_host
from agentpost.services.mailbox import Mailbox
from agentpost.services.presence import PresenceService
from agentpost.services.seats import NOT_VOUCHED
from agentpost.store import agents as agent_rows
from agentpost.store import audit, leases
from agentpost.store.database import Connection, Row, Store

log = logging.getLogger(__name__)
_retries = RetryLog(log)

LAPSE_SLACK_S = 0.05
"""Looked at again this long after a lease should have lapsed, so it surely has."""

CLAIM_AFTER_MOVE_S = 30.0
"""A session over HTTP whose heartbeat moves it to another branch stands for the seat at most
once in this long (two heartbeats at the default `heartbeat_s`): a client flapping between
branches, or naming one on every heartbeat, would else cost a claim, a write transaction,
each time. A move within it is claimed for at the first heartbeat after it, so the branch the
session ends on still counts."""
ORIGIN_HEAD_FOR_S = 300.0
"""How long origin's HEAD, as git names it in a worktree, is taken as it was: eligibility is
asked at every claim, and git is a process each time. A project that moves its default
branch (`git remote set-head origin --auto` after a fetch) sees the new one lead within this
long, with no restart."""
MAX_WORKTREES_REMEMBERED = 256
"""Worktrees whose origin's HEAD is remembered; the one looked up longest ago goes first."""
MAX_MOVES_REMEMBERED = 10_000
"""Sessions whose last move is remembered for `CLAIM_AFTER_MOVE_S`; the oldest go first."""


@dataclass(slots=True)
class _Move:
    claimed_at: float
    """When a move last stood for the seat."""
    due: bool = False
    """Moved again since: stands at the first heartbeat past the window."""


def _process_gone(held: leases.Holding) -> bool:
    """The holder's session is of this host and its process has exited (its pid may name
    another process by now)."""
    return (
        held.host == this_host() and bool(held.pid) and not pid_alive(held.pid or 0, held.pid_start)
    )


_NOT_ELIGIBLE = (
    ErrorCode.CONFLICT,
    ErrorCode.FORBIDDEN,
    ErrorCode.INVALID_ARGUMENT,
    ErrorCode.NOT_FOUND,
    ErrorCode.UNAUTHENTICATED,
)


def _ended(session_id: str | None) -> AgentpostError:
    """A session that ended is one the service no longer knows, as its authentication says
    (`not_found` naming it): a remote client then mints another. `unauthenticated` would
    read as its key refused, and such a client gives up."""
    return not_found("this session has ended", session=session_id)


def _held_by(caller: Caller, project: str, before: leases.Holding | None) -> AgentpostError:
    """The answer to a claim of a seat another live session holds: one of the caller's own
    agent is named as such, as "carol leads" told to carol reads as if the claim had won."""
    holder = before.holder if before is not None and before.live else None
    term = before.term if before is not None else 0
    who = f"{holder} leads"
    if holder == caller.agent and before is not None:
        who = f"another session of yours ({before.session_id}) leads"
    return AgentpostError(
        ErrorCode.CONFLICT,
        f"{who} {project} (term {term}); the seat frees when that session stops",
        details={"leader": holder, "term": term},
    )


class Leadership:
    def __init__(
        self,
        store: Store,
        settings: Settings,
        mailbox: Mailbox,
        presence: PresenceService,
        gate: AdminGate,
    ) -> None:
        self.store = store
        self.settings = settings
        self._gate = gate
        self.mailbox = mailbox
        self.presence = presence
        presence.renamed = self._seat_follows_name
        self._heads: OrderedDict[str, tuple[float, str | None]] = OrderedDict()
        """Worktrees' origin's HEAD and when it was looked up, oldest first."""
        self._moves: OrderedDict[str, _Move] = OrderedDict()
        """Sessions over HTTP whose heartbeat moved them lately, oldest claim first."""

    @property
    def _ttl_s(self) -> float:
        return self.settings.offline_after_s

    # -- reading -----------------------------------------------------------------------------

    async def leader(self, caller: Caller, project: str | None = None) -> Leader:
        """The seat of `project` (default: the caller's own project)."""
        await self.presence.end_dead_local_sessions()

        def tx(conn: Connection) -> Leader:
            name = self._project(conn, caller, project)
            return self._seat(conn, name)

        return await self.store.read(tx)

    async def leaders(self) -> list[Leader]:
        """Every project's seat that was ever taken, by project."""
        await self.presence.end_dead_local_sessions()

        def tx(conn: Connection) -> list[Leader]:
            now = self.store.clock()
            found = leases.holdings(conn, LEASE_PREFIX, now=now, ttl_s=self._ttl_s)
            return [self._view(h.name.removeprefix(LEASE_PREFIX), h) for h in found]

        return await self.store.read(tx)

    # -- claiming and releasing --------------------------------------------------------------

    async def claim(
        self, caller: Caller, project: str | None = None, *, force: bool = False
    ) -> Leader:
        """Take the seat: `conflict` while another live session holds it (unless `force`, for
        the owner or a local session), `forbidden` for a session not on a leading branch or
        of an agent the owner has not vouched for."""
        if caller.session_id is None:
            raise invalid("leading takes a session: its heartbeat is what keeps the seat")
        check_vouched(caller)
        await self.presence.end_dead_local_sessions()
        session = await self.store.read(
            lambda conn: agent_rows.get_session(conn, caller.session_id or "")
        )
        if session is None or session.ended_at is not None:
            raise _ended(caller.session_id)
        eligible = await self._eligible(session)
        if force and session.transport != "stdio":
            # Force over HTTP is the owner's: an attempt without an admin key is audited.
            target = project or session.project
            await self._gate.require(caller, "force_leadership", target)

        def checked(conn: Connection) -> str:
            # Asked again here: the session may have ended while its branch was looked at.
            self._check_not_ended(conn, caller)
            name = self._project(conn, caller, project)
            if name != session.project and not caller.admin:
                raise forbidden(
                    f"a session leads only its own project ({session.project or 'none'})",
                    project=name,
                )
            if not eligible:
                raise forbidden(
                    f"branch {session.branch or '(none)'} may not lead {name}: "
                    + self._eligibility_rule(),
                    branch=session.branch,
                )
            return name

        def look(conn: Connection) -> None:
            """What `tx` would refuse, in its order, found by a read: every session over HTTP
            stands for the seat as it opens, and a refusal found in the transaction took the
            write lock, for nothing, from every other writer."""
            name = checked(conn)
            check_vouched(accounts.as_stored_now(conn, caller))
            held = leases.holding(conn, lease_name(name), now=self.store.clock(), ttl_s=self._ttl_s)
            theirs = held is not None and held.live and held.session_id != caller.session_id
            if theirs and not force:
                raise _held_by(caller, name, held)

        def tx(conn: Connection) -> Leader:
            return self._take(conn, caller, checked(conn), force=force)

        await self.store.read(look)
        return await self.store.write(tx)

    def _left_free(self, conn: Connection, session_id: str) -> bool:
        """Whether the session's project has a seat someone held and nobody holds now, and the
        session has not stood aside."""
        session = agent_rows.get_session(conn, session_id)
        if session is None or not session.project or leases.stands_aside(conn, session_id):
            return False
        held = leases.holding(
            conn, lease_name(session.project), now=self.store.clock(), ttl_s=self._ttl_s
        )
        return held is not None and not held.live

    def _stands_aside(self, conn: Connection, caller: Caller) -> bool:
        """A session that released the seat, or was minted aside, stands no more until it
        claims again, or its own standing would take back at once what it gave up: its word is
        kept in the store (`leases.stand_aside`), so every replica, and a restarted one, keeps
        it."""
        sid = caller.session_id
        return sid is not None and leases.stands_aside(conn, sid)

    async def claim_if_eligible(self, caller: Caller) -> Leader | None:
        """What a session minted over HTTP does with `auto_lead` when it opens, and when its
        heartbeat moves it to another branch (a local session stands afresh then): take its
        project's seat when it is free and the session may lead; None (and nothing changed)
        otherwise, whatever went wrong. A session that stepped down takes it no more, as a
        standing one does not, until it claims again.

        Opening is not throttled as a move is (`CLAIM_AFTER_MOVE_S`): each session opens once,
        and one opened as its leader's session ended must take the seat then, not a window
        later. A client opening sessions in a loop pays a write for each open anyway, and a
        claim that cannot succeed is refused by a read (`claim`)."""
        if not self.settings.auto_lead:
            return None
        try:
            if await self.store.read(lambda conn: self._stands_aside(conn, caller)):
                return None
            return await self.claim(caller)
        except AgentpostError as err:
            # Not eligible: the seat is held or the session may not lead (conflict,
            # forbidden), it has no project (invalid_argument), or it ended meanwhile.
            if err.code not in _NOT_ELIGIBLE:
                # The session exists already: its opener must learn its id, seat or not.
                log.warning("a new session could not stand for leader: %s", err)
            return None

    async def stand_aside(self, caller: Caller) -> None:
        """The caller's session takes no free seat by itself, as one that stepped down, until
        it claims one: a client minting again the session of one that stepped down (its old
        one ended from outside) keeps its word, whichever replica its requests reach."""
        if (sid := caller.session_id) is not None:
            now = self.store.clock()
            await self.store.write(
                lambda conn: leases.stand_aside(conn, self.store.dialect, sid, caller.agent, now)
            )

    async def heartbeat_of(
        self, caller: Caller, session_id: str, *, branch: str | None = None
    ) -> None:
        """Keep one of the caller's sessions online (`PresenceService.heartbeat_of`); one
        moved to another branch than the store held stands afresh (`claim_if_eligible`), as a
        local session does at a checkout, at most once in `CLAIM_AFTER_MOVE_S`. So does one
        whose project's seat was left free (its leader fell silent, ended or stepped down), as
        a local session's standing does: else over HTTP the seat failed over to nobody."""
        moved = await self.presence.heartbeat_of(caller, session_id, branch=branch)
        if not moved and self.settings.auto_lead:
            moved = await self.store.read(lambda conn: self._left_free(conn, session_id))
        now = self.store.clock()
        last = self._moves.get(session_id)
        if last is None and not moved:
            return
        if last is not None and now - last.claimed_at < CLAIM_AFTER_MOVE_S:
            last.due = last.due or moved
            return
        if last is not None and not (last.due or moved):
            del self._moves[session_id]  # nothing moved since its last claim
            return
        self._moves.pop(session_id, None)
        self._moves[session_id] = _Move(now)
        while len(self._moves) > MAX_MOVES_REMEMBERED:
            self._moves.popitem(last=False)
        await self.claim_if_eligible(replace(caller, session_id=session_id))

    async def release(self, caller: Caller, project: str | None = None) -> Leader:
        """Step down. A caller whose session does not hold the seat (its release sent again
        after the answer was lost, say) is answered the seat as it stands, `released` false:
        it leads nothing, as it asked, and nothing changes."""

        def tx(conn: Connection) -> Leader:
            name = self._project(conn, caller, project)
            now = self.store.clock()
            beat_asking(conn, caller.session_id, now)
            before = self._seat(conn, name)
            mine = before.leader is not None and before.session_id == caller.session_id
            if not mine:
                return replace(before, released=False)
            leases.stand_aside(conn, self.store.dialect, caller.session_id or "", caller.agent, now)
            leases.release(
                conn,
                lease_name(name),
                now=self.store.clock(),
                session_ids=[caller.session_id or ""],
            )
            self._announce(
                conn,
                caller,
                name,
                f"{caller.agent} stepped down as leader of {name} (term {before.term}); "
                "the seat is free.",
                leader=None,
                term=before.term,
                previous=caller.agent,
            )
            return replace(self._seat(conn, name), released=True)

        # The word to stand aside commits with the release: standing that wakes on the
        # commit reads both at once, and never retakes the seat.
        return await self.store.write(tx)

    # -- standing for the seat ---------------------------------------------------------------

    async def stand(self, caller_now: Callable[[], Caller]) -> None:
        """Claim the seat of the caller's project whenever it is free; runs until cancelled.

        `caller_now` names the caller afresh each round (a stdio session may take another
        name). Returns at once for a session that may not lead. A busy store is waited out.
        """
        session_id = caller_now().session_id
        if session_id is None:
            return
        session = await self.store.read(lambda conn: agent_rows.get_session(conn, session_id))
        if session is None or session.project is None:
            return
        if not await self._eligible(session):
            return
        project: str = session.project
        while True:
            version = self.store.version
            try:
                seat = await self._claim_if_free(caller_now(), project)
            except AgentpostError as err:
                if err.code in (ErrorCode.UNAUTHENTICATED, ErrorCode.NOT_FOUND):
                    return  # the session has ended (its agent disabled, say): it stands no more
                if err.code is ErrorCode.FORBIDDEN:  # its agent is not vouched for: till it is
                    await self.store.wait_changed(version, None)
                    continue
                _retries.failed(f"standing for leader of {project}", err)
                await anyio.sleep(err.retry_after_s or 1)  # a send rate's window: its end
                continue
            _retries.recovered(f"standing for leader of {project}")
            await self._until_seat_may_change(seat, version)

    async def _claim_if_free(
        self, caller: Caller, project: str
    ) -> tuple[Leader, leases.Holding | None]:
        """The seat after claiming it if it was free; and its holding when someone else has it.

        Looked at with a read first: standing sessions wake on every commit, and taking the
        write lock for nothing would have them contend with every writer. Only a holder whose
        local process is gone costs more: its session is ended here, and the seat looked at again.
        """
        name = lease_name(project)

        def look(conn: Connection) -> leases.Holding | None:
            return leases.holding(conn, name, now=self.store.clock(), ttl_s=self._ttl_s)

        def aside(conn: Connection) -> tuple[bool, leases.Holding | None]:
            return self._stands_aside(conn, caller), look(conn)

        def vouched(conn: Connection) -> None:
            check_vouched(accounts.as_stored(conn, caller))

        stood_aside, held = await self.store.read(aside)
        if held is not None and held.live and _process_gone(held):
            await self.presence.end_dead_local_sessions(held.holder)
            stood_aside, held = await self.store.read(aside)
        if stood_aside or (held is not None and held.live):
            mine = held is None or not held.live or held.session_id == caller.session_id
            return self._view(project, held), None if mine else held
        # An agent not vouched for is refused by a read: its standing wakes on every commit.
        await self.store.read(vouched)
        try:
            seat = await self.store.write(
                lambda conn: self._take(conn, caller, project, force=False)
            )
        except AgentpostError as err:
            if err.code is not ErrorCode.CONFLICT:
                raise
            held = await self.store.read(look)  # another session won the race
            return self._view(project, held), held
        return seat, None

    async def _until_seat_may_change(
        self, seat: tuple[Leader, leases.Holding | None], version: int
    ) -> None:
        """Sleep until a commit, the holder's lease running out or its process exiting."""
        leader, held = seat
        timeout = None
        if held is not None and leader.expires_at is not None:
            timeout = max(0.0, leader.expires_at - self.store.clock()) + LAPSE_SLACK_S
        async with anyio.create_task_group() as group:

            async def on_commit() -> None:
                await self.store.wait_changed(version, timeout)
                group.cancel_scope.cancel()

            async def on_exit(pid: int, start: str | None) -> None:
                await process_exit(pid, start)
                group.cancel_scope.cancel()

            group.start_soon(on_commit)
            if held is not None and held.pid and held.host == this_host():
                group.start_soon(on_exit, held.pid, held.pid_start)

    # -- inside a transaction ----------------------------------------------------------------

    def _take(self, conn: Connection, caller: Caller, project: str, *, force: bool) -> Leader:
        # Vouched for now, not when its request began: write transactions take turns, so an
        # unvouch that committed first is seen here, and one that follows frees this seat.
        check_vouched(accounts.as_stored_now(conn, caller))
        # An ended session holds no lease: seated, it would lapse at once, and a standing one
        # would take it back, announced under a new term, again and again.
        self._check_not_ended(conn, caller)
        now = self.store.clock()
        # A session silent past the lease (a laptop waking) keeps its own seat and term,
        # rather than take it again, lapsed at once, on every commit till it beats.
        beat_asking(conn, caller.session_id, now)
        name = lease_name(project)
        before = leases.holding(conn, name, now=now, ttl_s=self._ttl_s)
        term = leases.claim(
            conn,
            self.store.dialect,
            name,
            holder=caller.agent,
            session_id=caller.session_id or "",
            now=now,
            ttl_s=self._ttl_s,
            force=force,
        )
        if term is None:
            raise _held_by(caller, project, before)
        leases.stand_again(conn, caller.session_id or "")
        if before is not None and before.live and before.session_id != caller.session_id:
            # A live holder put out of the seat: kept in the audit log as the owner's acts are.
            audit.record(
                conn,
                at=now,
                actor=caller.agent,
                action="leader.forced",
                target=project,
                ip=caller.ip,
                detail={"previous": before.holder, "term": term},
            )
        if before is None or not before.live or before.session_id != caller.session_id:
            previous = before.holder if before is not None else None
            text = f"{caller.agent} now leads {project} (term {term})"
            if previous is not None:
                text += f", taking over from {previous}"
            self._announce(
                conn, caller, project, text + ".", leader=caller.agent, term=term, previous=previous
            )
        return self._seat(conn, project)

    def _seat_follows_name(self, conn: Connection, caller: Caller, previous: str) -> None:
        """A session that took the name of an agent the owner has not vouched for (one that
        registered itself) leads no more, as when a vouch is withdrawn: it would lead as that
        agent. Freed rather than the rename refused: a session stands for a free seat as it
        opens, so a `register` that names the agent, its first act, would be refused for a
        seat it never asked for. A vouched-for name keeps the session's seats, and each
        project hears who leads it now (the same holder: the term stays)."""
        now = self.store.clock()
        if accounts.as_stored_now(conn, caller).trust is Trust.VERIFIED:
            seats.tell_renamed(conn, self.mailbox, caller, previous, now=now, ttl_s=self._ttl_s)
        else:
            seats.unseat(
                conn, self.mailbox, caller.agent, now=now, ttl_s=self._ttl_s, reason=NOT_VOUCHED
            )

    @staticmethod
    def _check_not_ended(conn: Connection, caller: Caller) -> None:
        session = agent_rows.get_session(conn, caller.session_id or "")
        if session is None or session.ended_at is not None:
            raise _ended(caller.session_id)

    def _announce(
        self,
        conn: Connection,
        caller: Caller,
        project: str,
        text: str,
        *,
        leader: str | None,
        term: int,
        previous: str | None,
    ) -> None:
        """Tell #<project> of the caller's change of the seat. The notice reaches every member,
        as a broadcast does, so it counts against the caller's send rate as one would: over
        it, the change is refused (`rate_limited`) with its transaction, rather than let a loop
        of claims and releases fill every member's inbox."""
        addressing.count_act(conn, self.store, self.settings, caller, "a change of the seat")
        seats.tell(conn, self.mailbox, project, text, leader=leader, term=term, previous=previous)

    def _seat(self, conn: Connection, project: str) -> Leader:
        held = leases.holding(conn, lease_name(project), now=self.store.clock(), ttl_s=self._ttl_s)
        return self._view(project, held)

    def _view(self, project: str, held: leases.Holding | None) -> Leader:
        if held is None:
            return Leader(project, None, 0, None, None, None, None)
        if not held.live:
            return Leader(project, None, held.term, None, None, None, None)
        expires = None if held.heartbeat_at is None else held.heartbeat_at + self._ttl_s
        return Leader(
            project, held.holder, held.term, held.acquired_at, held.session_id, held.branch, expires
        )

    def _project(self, conn: Connection, caller: Caller, project: str | None) -> str:
        if project is not None:
            return check_name(project, "project")
        if caller.session_id is not None:
            session = agent_rows.get_session(conn, caller.session_id)
            if session is not None and session.project:
                return str(session.project)
        agent = agent_rows.get_agent(conn, caller.agent)
        if agent is not None and agent.project:
            return str(agent.project)
        raise invalid(
            "you have no project: run `agentpost mcp` inside the repository, set "
            "AGENTPOST_PROJECT, or give your agent a project (`update_profile`, PATCH /v1/me)",
        )

    async def _eligible(self, session: Row[Any]) -> bool:
        head = None
        folder = self.presence.folder(session.id, session.worktree)
        if folder and session.host == this_host() and self.settings.leader_branches is None:
            head = await self._origin_head(folder)
        return may_lead(
            session.branch, origin_head=head, leader_branches=self.settings.leader_branches
        )

    async def _origin_head(self, folder: str) -> str | None:
        now = self.store.clock()
        known = self._heads.get(folder)
        if known is not None and now - known[0] < ORIGIN_HEAD_FOR_S:
            return known[1]
        head = await anyio.to_thread.run_sync(origin_head, folder)
        self._heads.pop(folder, None)
        self._heads[folder] = (now, head)
        while len(self._heads) > MAX_WORKTREES_REMEMBERED:
            self._heads.popitem(last=False)
        return head

    def _eligibility_rule(self) -> str:
        if self.settings.leader_branches is not None:
            return f"only {', '.join(self.settings.leader_branches)} may (config leader_branches)"
        return "only the project's default branch may (origin's HEAD, else main or master)"
