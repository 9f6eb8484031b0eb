"""Advisory file reservations: reserve, renew, release and list claims on paths of a project.

Every decision is made in one write transaction, on the store's clock, against the project's
live reservations (store.reservations says what live is), so two agents racing for one path
cannot both get it. A call is decided path by path: the paths that conflict with nobody are
granted, the others come back with what they conflict with.

Git's list of tracked files is read outside the transaction (git may be slow, and the write
lock is every writer's), and only when a glob is involved. Another agent's glob can be
committed between that read and the transaction, so the transaction asks again on its own
view: finding the list missing after all, it changes nothing, and `reserve` reads the list and
tries once more.

Whether two patterns overlap is also worked out before the transaction, against the view just
read, and for long patterns on a worker thread: a call's 100 globs of 1,024 characters against
another agent's would take half a minute of checks, which in the transaction, on the event
loop, would hold up the whole post office. The transaction checks only reservations made since.
Each of the two has a budget of characters to read (`OVERLAP_BUDGET` on the thread,
`OFF_LOOP_FROM` in the transaction); a pair left undecided when it runs out counts as
overlapping (domain.reservations.overlaps says why that is safe).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, TypeVar

import anyio.to_thread

from agentpost.config import Settings
from agentpost.domain.errors import invalid
from agentpost.domain.ids import reservation_id
from agentpost.domain.models import Caller
from agentpost.domain.names import check_name
from agentpost.domain.reservations import (
    DEFAULT_TTL_S,
    OVERLAP_BUDGET,
    Budget,
    Conflict,
    Listed,
    Reservation,
    ReservationsChanged,
    ReserveResult,
    Tracked,
    check_ids,
    check_paths,
    check_reason,
    check_room,
    check_ttl,
    conflicts_with,
    is_glob,
    no_tracked_files,
    normalise_path,
    overlapping,
    tracked_matcher,
)
from agentpost.services import accounts
from agentpost.services.heartbeats import beat_asking
from agentpost.services.presence import PresenceService
from agentpost.services.worktree_files import local_worktree, tracked_files
from agentpost.store import agents as agent_rows
from agentpost.store import reservations as rows
from agentpost.store.database import Connection, Store

T = TypeVar("T")

NO_PROJECT = (
    "reservations belong to a project, and this session has none: run `agentpost mcp` inside "
    "the repository, set AGENTPOST_PROJECT, or give your agent a project"
)

NO_SESSION = (
    "a reservation holds only while a session of its agent is live, and {agent} has none: "
    "reserve from the agent's own session (its MCP tools, or a command its client runs)"
)


@dataclass(frozen=True, slots=True)
class _Place:
    """Where the caller works: its project, its worktree, and the live reservations there."""

    project: str
    session_id: str | None
    host: str | None
    worktree: str | None
    """The caller's session's, when it works in this project."""
    folder: str | None
    """The same worktree where git is asked (presence.folder): its real name on this host."""
    held: list[Reservation]


class _TrackedNotRead(Exception):
    """Raised inside reserve's transaction to roll it back: another agent's glob arrived after
    the caller decided it needed no tracked files, and without them the two claims could both
    be granted though a tracked file lies in both."""


def _globs_involved(paths: Sequence[str], held: Iterable[Reservation], agent: str) -> bool:
    """Whether tracked files can make the caller's paths overlap others' claims: they only
    ever do where one side is a glob (domain.reservations.overlaps)."""
    theirs = (r.path for r in held if r.agent != agent)
    return any(is_glob(p) for p in [*paths, *theirs])


OFF_LOOP_FROM = 20_000
"""Characters to run through in overlap checks (about a microsecond each) from which they are
worked out on a worker thread: 100 globs of 1,024 characters against as many of another
agent's would take half a minute, which on the event loop, or in the write transaction, would
hold up every agent of the post office for as long. Also the budget of the checks made in the
transaction, of reservations made since those worked out before it."""


def _cost(paths: Sequence[str], held: Sequence[Reservation], agent: str) -> int:
    theirs = [len(r.path) for r in held if r.agent != agent]
    return len(paths) * sum(theirs) + len(theirs) * sum(len(p) for p in paths)


async def _off_loop_if_long(
    paths: Sequence[str],
    held: Sequence[Reservation],
    agent: str,
    tracked: Tracked,
    work: Callable[[], T],
) -> T:
    """`work` (overlap checks of `paths` against `held`) right here when short, else on a
    worker thread; always there with a worktree's tracked files, each glob matched against
    every one of them (a few seconds in a repository of 50,000 files)."""
    if tracked is no_tracked_files and _cost(paths, held, agent) < OFF_LOOP_FROM:
        return work()
    return await anyio.to_thread.run_sync(work)


def _kept_alive(
    conn: Connection, agent: str, session_id: str | None, now: float, offline_after_s: float
) -> tuple[list[str], float]:
    """The agent's sessions online besides `session_id`, and when its claims lapse if none of
    its sessions is heard from again: what a caller cannot see of how long its claims hold, as
    a command over HTTP, whose key's own session goes offline once it ends."""
    around = rows.sessions_around(conn, agent, now, offline_after_s)
    others = [id_ for id_, offline_at in around if id_ != session_id and offline_at > now]
    last = max((offline_at for _, offline_at in around), default=now - offline_after_s)
    return others, last + offline_after_s


class Reservations:
    def __init__(self, store: Store, settings: Settings, presence: PresenceService) -> None:
        self.store = store
        self.settings = settings
        self.presence = presence

    # -- where the caller is ----------------------------------------------------------------------

    def _place_tx(self, conn: Connection, caller: Caller, project: str | None) -> _Place:
        session = agent_rows.get_session(conn, caller.session_id) if caller.session_id else None
        own = session.project if session is not None else None
        if own is None:
            agent = agent_rows.get_agent(conn, caller.agent)
            own = agent.project if agent is not None else None
        if project is None and own is None:
            raise invalid(NO_PROJECT)
        chosen = project or own or ""
        here = session if session is not None and chosen == session.project else None
        now = self.store.clock()
        return _Place(
            project=chosen,
            session_id=caller.session_id,
            host=None if here is None else here.host,
            worktree=None if here is None else here.worktree,
            folder=None if here is None else self.presence.folder(here.id, here.worktree),
            held=rows.live(conn, chosen, now, self.settings.offline_after_s),
        )

    async def _place(self, caller: Caller, project: str | None = None) -> _Place:
        # A local session whose process is gone is offline at once, as `who` says.
        await self.presence.end_dead_local_sessions()
        return await self.store.read(lambda conn: self._place_tx(conn, caller, project))

    async def _tracked(
        self, place: _Place, paths: Sequence[str], agent: str, *, whatever_is_held: bool = False
    ) -> Tracked | None:
        """The worktree's tracked files, when the worktree is here and a glob is involved in
        what `place` holds (or `whatever_is_held`). None when they could have been read but no
        glob asked for them: a later view with a glob needs them read (see reserve)."""
        worktree = local_worktree(place.host, place.folder)
        if worktree is None:
            return no_tracked_files  # the first overlap rule alone, whatever is held
        if not whatever_is_held and not _globs_involved(paths, place.held, agent):
            return None
        return tracked_matcher(await tracked_files(worktree))

    # -- the operations ---------------------------------------------------------------------------

    async def reserve(
        self,
        caller: Caller,
        paths: Sequence[str] | str,
        *,
        exclusive: bool = True,
        ttl_s: float = DEFAULT_TTL_S,
        reason: str | None = None,
    ) -> ReserveResult:
        """Claim paths (or globs) of the caller's project for `ttl_s`. Reserving a path the
        caller already holds renews it and takes the new `exclusive` and `reason`."""
        wanted = check_paths(paths)
        ttl = check_ttl(ttl_s)
        why = check_reason(reason)
        offline_after_s = self.settings.offline_after_s
        if caller.session_id is None and not await self.store.read(
            lambda conn: rows.agent_around(conn, caller.agent, self.store.clock(), offline_after_s)
        ):  # granted, the claim would protect nothing: it lapses with no session around
            raise invalid(NO_SESSION.format(agent=caller.agent))
        place = await self._place(caller)

        def tx(
            conn: Connection, known: Tracked | None, looked: dict[str, dict[str, bool]]
        ) -> ReserveResult:
            now = self.store.clock()
            beat_asking(conn, place.session_id, now)
            rows.release_lapsed(conn, place.project, now, offline_after_s)
            held = rows.live(conn, place.project, now, offline_after_s)
            if known is None and _globs_involved(wanted, held, caller.agent):
                raise _TrackedNotRead
            tracked = no_tracked_files if known is None else known
            mine = {r.path: r for r in held if r.agent == caller.agent}
            on_loop = Budget(OFF_LOOP_FROM)  # for reservations made since `looked`
            trust = accounts.as_stored(conn, caller).trust  # as listings show it: the agent's
            granted: list[Reservation] = []
            added: list[Reservation] = []
            conflicts: list[Conflict] = []
            for path in wanted:
                blocking = conflicts_with(
                    caller.agent, path, exclusive, held, tracked, looked.get(path), on_loop
                )
                if blocking:
                    conflicts.extend(
                        Conflict(path, r.agent, r.exclusive, r.expires_at, r.path, r.trust)
                        for r in blocking
                    )
                    continue
                values: dict[str, Any] = {
                    "exclusive": exclusive,
                    "reason": why,
                    "expires_at": now + ttl,
                    "ttl_s": ttl,
                    "worktree": place.worktree,
                }
                if path in mine:
                    rows.change(conn, mine[path].id, session_id=place.session_id, **values)
                    granted.append(replace(mine[path], **values))
                    continue
                new = Reservation(
                    id=reservation_id(now),
                    project=place.project,
                    agent=caller.agent,
                    path=path,
                    created_at=now,
                    trust=trust,
                    **values,
                )
                added.append(new)
                granted.append(new)
            if added:
                check_room(rows.live_count(conn, caller.agent, now, offline_after_s), len(added))
                rows.forget_ended_of(conn, caller.agent, now)
            for new in added:
                rows.add(conn, new, place.session_id)
            others, lapse = _kept_alive(conn, caller.agent, place.session_id, now, offline_after_s)
            return ReserveResult(granted, conflicts, others, lapse)

        async def looked_at(tracked: Tracked) -> dict[str, dict[str, bool]]:
            # The overlaps with what was held a moment ago, worked out before the write
            # transaction: in it, only those with reservations made since are left to check.
            return await _off_loop_if_long(
                wanted,
                place.held,
                caller.agent,
                tracked,
                partial(
                    overlapping, caller.agent, wanted, place.held, tracked, Budget(OVERLAP_BUDGET)
                ),
            )

        guessed = await self._tracked(place, wanted, caller.agent)
        looked = await looked_at(no_tracked_files if guessed is None else guessed)
        try:
            return await self.store.write(partial(tx, known=guessed, looked=looked))
        except _TrackedNotRead:
            pass
        # Read them this time whatever is held, so the transaction cannot find them missing
        # again: one retry is enough, however many globs come and go meanwhile.
        read = await self._tracked(place, wanted, caller.agent, whatever_is_held=True)
        assert read is not None
        looked = await looked_at(read)
        return await self.store.write(partial(tx, known=read, looked=looked))

    async def renew_reservations(
        self,
        caller: Caller,
        ids: Sequence[str] | None = None,
        *,
        ttl_s: float | None = None,
    ) -> ReservationsChanged:
        """Move the caller's live reservations' expiry to `ttl_s` from now (without one, each
        one's own ttl, the last it was given): those of `ids` (in any project), or every one in
        the caller's project. An expired or released one is not renewed (someone else may hold
        its paths by now): reserve it again."""
        chosen_ids = None if ids is None else check_ids(ids)
        ttl = None if ttl_s is None else check_ttl(ttl_s)
        place = await self._place(caller)

        def tx(conn: Connection) -> ReservationsChanged:
            now = self.store.clock()
            beat_asking(conn, place.session_id, now)
            found, missing = self._own(conn, caller, place.project, chosen_ids, now)
            renewed: list[Reservation] = []
            for r in found:
                own = r.own_ttl(now) if ttl is None else ttl
                rows.change(conn, r.id, expires_at=now + own, ttl_s=own)
                renewed.append(replace(r, expires_at=now + own, ttl_s=own))
            return ReservationsChanged(renewed, missing)

        return await self.store.write(tx)

    async def release_reservations(
        self,
        caller: Caller,
        *,
        paths: Sequence[str] | str | None = None,
        ids: Sequence[str] | None = None,
    ) -> ReservationsChanged:
        """Give up the caller's own reservations: those of `ids` (in any project), those of
        `paths` (as reserved, in the caller's project), or, with neither, all of them in the
        caller's project. Another agent's are never touched: they come back in `not_found`."""
        chosen_paths = None if paths is None else check_paths(paths)
        chosen_ids = None if ids is None else check_ids(ids)
        place = await self._place(caller)

        def tx(conn: Connection) -> ReservationsChanged:
            now = self.store.clock()
            beat_asking(conn, place.session_id, now)
            released: list[Reservation] = []
            missing: list[str] = []
            if chosen_ids is not None:
                found, missing = self._own(conn, caller, place.project, chosen_ids, now)
                released.extend(found)
            if chosen_paths is not None:
                mine = self._own(conn, caller, place.project, None, now)[0]
                by_path = {r.path: r for r in mine}
                released.extend(by_path[p] for p in chosen_paths if p in by_path)
                missing.extend(p for p in chosen_paths if p not in by_path)
            if chosen_ids is None and chosen_paths is None:
                released = self._own(conn, caller, place.project, None, now)[0]
            released = list({r.id: r for r in released}.values())
            rows.release(conn, [r.id for r in released], now)
            return ReservationsChanged(released, missing)

        return await self.store.write(tx)

    def _own(
        self,
        conn: Connection,
        caller: Caller,
        project: str,
        ids: list[str] | None,
        now: float,
    ) -> tuple[list[Reservation], list[str]]:
        """The caller's live reservations: every one in `project`, or those of `ids` in any
        project, with the ids that named none of them."""
        offline_after_s = self.settings.offline_after_s
        if ids is None:
            return rows.live(conn, project, now, offline_after_s, agent=caller.agent), []
        mine = {r.id: r for r in rows.live(conn, None, now, offline_after_s, agent=caller.agent)}
        return [mine[i] for i in ids if i in mine], [i for i in ids if i not in mine]

    async def reservations(
        self, caller: Caller, project: str | None = None, path: str | None = None
    ) -> Listed:
        """The live reservations of the caller's project (or of `project`), oldest first; with
        `path`, those that overlap it. They name the project: the caller's, where it reserves,
        when it named none."""
        if project is not None:
            check_name(project, "project")
        wanted = None if path is None else normalise_path(path)
        place = await self._place(caller, project)
        if wanted is None:
            return Listed(place.project, place.held)
        # `place.held` is the view the tracked files were asked for: nothing can be missing.
        tracked = await self._tracked(place, [wanted], "")
        if tracked is None:
            tracked = no_tracked_files
        budget = Budget(OVERLAP_BUDGET)

        def overlapping_it() -> Listed:
            # As `reserve` spends it: shortest pairs first (no agent is "own" here).
            found = overlapping("", [wanted], place.held, tracked, budget)[wanted]
            return Listed(place.project, (r for r in place.held if found[r.id]))

        return await _off_loop_if_long([wanted], place.held, "", tracked, overlapping_it)

    async def live(self, project: str) -> list[Reservation]:
        """Every live reservation of `project`: what the commit guard holds staged files to."""
        check_name(project, "project")
        await self.presence.end_dead_local_sessions()
        now = self.store.clock()
        return await self.store.read(
            lambda conn: rows.live(conn, project, now, self.settings.offline_after_s)
        )
