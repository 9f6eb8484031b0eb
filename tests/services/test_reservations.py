"""File reservations: who may claim which paths of a project, for how long, and when a claim
lapses. On both databases, with the store's clock moved by the test."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Awaitable
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from account_helpers import self_registered
from agentpost.domain.errors import ErrorCode
from agentpost.domain.models import Caller, Trust
from agentpost.domain.reservations import (
    MAX_LIVE,
    MAX_PATHS,
    Budget,
    Reservation,
    ReserveResult,
    Tracked,
)
from agentpost.services import PostOffice
from agentpost.services.local_identity import LocalContext, this_host
from backends import FakeClock, OpenOffice, refused_without_change, session_caller, snapshot

pytestmark = pytest.mark.anyio


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def paths(found: list[Reservation]) -> list[tuple[str, str]]:
    """(agent, path) of each, sorted: reservations made at one instant have no order."""
    return sorted((r.agent, r.path) for r in found)


async def held(office: PostOffice, caller: Caller) -> list[tuple[str, str]]:
    return paths(await office.reservations.reservations(caller))


Pair = tuple[Caller, Caller]


@pytest.fixture
async def pair(office: PostOffice) -> Pair:
    """alice and bob, each with a live local session in project shop."""
    return await session_caller(office, "alice"), await session_caller(office, "bob")


# -- reserving ------------------------------------------------------------------------------------


async def test_an_exclusive_reservation_refuses_an_overlapping_one_of_another_agent(
    office: PostOffice,
    pair: Pair,
) -> None:
    alice, bob = pair
    mine = await office.reservations.reserve(alice, ["src/**"], reason="parser rewrite")
    assert [(r.path, r.exclusive, r.reason) for r in mine.granted] == [
        ("src/**", True, "parser rewrite")
    ]
    assert mine.granted[0].expires_at == office.store.clock() + 3600

    theirs = await office.reservations.reserve(bob, ["src/a/b.py"], exclusive=False)
    assert theirs.granted == []
    [conflict] = theirs.conflicts
    assert (conflict.path, conflict.holder, conflict.exclusive, conflict.held) == (
        "src/a/b.py",
        "alice",
        True,
        "src/**",
    )
    assert conflict.expires_at == mine.granted[0].expires_at
    assert await held(office, bob) == [("alice", "src/**")]


async def test_a_call_grants_the_paths_that_conflict_with_nobody_and_lists_the_rest(
    office: PostOffice,
    pair: Pair,
) -> None:
    alice, bob = pair
    await office.reservations.reserve(alice, ["src/*"])
    result = await office.reservations.reserve(bob, ["docs/*", "src/main.py", "README.md"])
    assert [r.path for r in result.granted] == ["docs/*", "README.md"]
    assert [(c.path, c.holder) for c in result.conflicts] == [("src/main.py", "alice")]


async def test_paths_reserved_in_one_call_are_listed_in_the_order_asked(
    office: PostOffice, pair: Pair
) -> None:
    alice, _bob = pair
    asked = ["zeta.py", "alpha.py", "src/**", "docs/*", "mid.txt", "b.py", "a/b/c.py"]
    await office.reservations.reserve(alice, asked)  # all at one instant of the clock
    assert [r.path for r in await office.reservations.reservations(alice)] == asked


async def test_a_file_named_in_nfd_and_in_nfc_is_one_file_to_reserve(
    office: PostOffice, pair: Pair
) -> None:
    """macOS writes `é` as `e` and a combining accent: the claims of two agents on one
    file must meet however each spelled it."""
    alice, bob = pair
    [mine] = (await office.reservations.reserve(alice, ["src/cafe\u0301.py"])).granted
    assert mine.path == "src/caf\u00e9.py"
    theirs = await office.reservations.reserve(bob, ["src/caf\u00e9.py"])
    assert [(c.path, c.holder) for c in theirs.conflicts] == [("src/caf\u00e9.py", "alice")]
    released = await office.reservations.release_reservations(alice, paths="src/cafe\u0301.py")
    assert [r.id for r in released.reservations] == [mine.id]


async def test_shared_reservations_coexist(office: PostOffice, pair: Pair) -> None:
    alice, bob = pair
    await office.reservations.reserve(alice, ["src/**"], exclusive=False)
    result = await office.reservations.reserve(bob, ["src/a.py"], exclusive=False)
    assert [r.path for r in result.granted] == ["src/a.py"]
    assert await held(office, alice) == [("alice", "src/**"), ("bob", "src/a.py")]


async def test_a_conflict_names_its_holders_trust_as_a_listing_does(
    open_office: OpenOffice,
) -> None:
    """A self-registered agent's claim came back as a colleague's: the listing marked its
    holder untrusted, the conflict that kept another agent off the same files did not."""
    office = await open_office(open_registration=True)
    drifter, _ = await self_registered(office, "drifter", project="shop")
    alice = await session_caller(office, "alice")
    await office.reservations.reserve(drifter, ["src/**"])
    theirs = await office.reservations.reserve(alice, ["src/a.py"])
    assert [(c.holder, c.trust) for c in theirs.conflicts] == [("drifter", Trust.UNTRUSTED)]
    assert theirs.conflicts[0].to_dict()["trust"] == "untrusted"
    bob = await session_caller(office, "bob")
    await office.reservations.reserve(bob, ["b.py"])
    assert [c.trust for c in (await office.reservations.reserve(alice, ["b.py"])).conflicts] == [
        Trust.VERIFIED
    ]


async def test_an_exclusive_request_conflicts_with_anothers_shared_reservation(
    office: PostOffice,
    pair: Pair,
) -> None:
    alice, bob = pair
    await office.reservations.reserve(alice, ["src/a.py"], exclusive=False)
    result = await office.reservations.reserve(bob, ["src"])
    assert [(c.holder, c.exclusive) for c in result.conflicts] == [("alice", False)]


async def test_an_agents_own_overlapping_reservations_never_conflict(office: PostOffice) -> None:
    alice = await session_caller(office, "alice")
    await office.reservations.reserve(alice, ["src/**"])
    result = await office.reservations.reserve(alice, ["src/a.py", "src"])
    assert result.conflicts == []
    assert len(result.granted) == 2


async def test_disjoint_paths_of_two_agents_are_both_granted(
    office: PostOffice, pair: Pair
) -> None:
    alice, bob = pair
    await office.reservations.reserve(alice, ["docs/*"])
    assert (await office.reservations.reserve(bob, ["src/*"])).conflicts == []


async def test_reserving_a_held_path_again_renews_and_updates_it_in_place(
    office: PostOffice, clock: FakeClock
) -> None:
    alice = await session_caller(office, "alice")
    first = (await office.reservations.reserve(alice, ["./src/a.py"], ttl_s=60)).granted[0]
    clock.advance(30)
    again = await office.reservations.reserve(
        alice, ["src/a.py"], exclusive=False, ttl_s=600, reason="now only reading"
    )
    [renewed] = again.granted
    assert renewed.id == first.id
    assert (renewed.exclusive, renewed.reason) == (False, "now only reading")
    assert renewed.expires_at == clock.now + 600
    [listed] = await office.reservations.reservations(alice)
    assert listed == renewed


async def test_two_agents_racing_for_one_path_get_it_once(office: PostOffice) -> None:
    callers = [await session_caller(office, f"agent{i}") for i in range(6)]
    winners: list[str] = []

    async def race(caller: Caller) -> None:
        if (await office.reservations.reserve(caller, ["src/app.py"])).granted:
            winners.append(caller.agent)

    async with anyio.create_task_group() as group:
        for caller in callers:
            group.start_soon(race, caller)
    assert len(winners) == 1
    assert await held(office, callers[0]) == [(winners[0], "src/app.py")]


async def test_bad_paths_ttls_and_reasons_are_refused_without_change(office: PostOffice) -> None:
    alice = await session_caller(office, "alice")
    await office.reservations.reserve(alice, ["docs/*"])
    for call in (
        office.reservations.reserve(alice, ["/etc/passwd"]),
        office.reservations.reserve(alice, ["src/a.py", "../outside.py"]),
        office.reservations.reserve(alice, []),
        office.reservations.reserve(alice, ["src/a.py"], ttl_s=0),
        office.reservations.renew_reservations(alice, ttl_s=-5),
        office.reservations.release_reservations(alice, paths=["/abs"]),
        office.reservations.reservations(alice, path="../x"),
    ):
        await refused_without_change(office, ErrorCode.INVALID_ARGUMENT, call)
    await refused_without_change(  # text over its limit, as README's table says
        office,
        ErrorCode.TOO_LARGE,
        office.reservations.reserve(alice, ["src/a.py"], reason="x" * 1001),
    )


async def test_an_agent_with_no_session_around_is_refused_a_claim_that_would_lapse_at_once(
    office: PostOffice, clock: FakeClock
) -> None:
    """A reservation lives only while a session of its agent does: one granted to an agent with
    none (the command line's `--as`, or the person at it) would have protected nothing."""
    alice = await session_caller(office, "alice")
    await office.presence.end_session(alice.session_id or "")
    clock.advance(10 * office.settings.offline_after_s)
    refused = await refused_without_change(
        office,
        ErrorCode.INVALID_ARGUMENT,
        office.reservations.reserve(Caller("alice"), ["src/a.py"]),
    )
    assert "alice has none" in refused.message
    await session_caller(office, "alice")  # a session of hers around: the claim is hers to hold
    granted = await office.reservations.reserve(Caller("alice"), ["src/a.py"])
    assert [r.path for r in granted.granted] == ["src/a.py"]


async def test_an_agent_holds_at_most_max_live_reservations_and_more_changes_nothing(
    office: PostOffice, clock: FakeClock
) -> None:
    """One agent could hold any number of live reservations, and every other agent's reserve
    was then checked against all of them."""
    alice = await session_caller(office, "alice")
    assert MAX_LIVE == 2 * MAX_PATHS
    first = [f"a/{n}.py" for n in range(MAX_PATHS)]
    await office.reservations.reserve(alice, first)
    await office.reservations.reserve(alice, [f"b/{n}.py" for n in range(MAX_PATHS)])
    refused = await refused_without_change(
        office, ErrorCode.CONFLICT, office.reservations.reserve(alice, ["c.py", "a/0.py"])
    )
    assert refused.details == {"limit": MAX_LIVE}
    elsewhere = await session_caller(office, "alice", project="bank")  # in every project
    await refused_without_change(
        office, ErrorCode.CONFLICT, office.reservations.reserve(elsewhere, ["c.py"])
    )
    # At the limit, reserving what one holds renews it; a released one makes room.
    clock.advance(10)
    renewed = await office.reservations.reserve(alice, first)
    assert {r.expires_at for r in renewed.granted} == {clock.now + 3600}
    await office.reservations.release_reservations(alice, paths=["a/0.py"])
    assert [r.path for r in (await office.reservations.reserve(alice, ["c.py"])).granted] == [
        "c.py"
    ]


async def test_expired_reservations_leave_room_under_the_limit(
    office: PostOffice, clock: FakeClock
) -> None:
    alice = await session_caller(office, "alice")
    await office.reservations.reserve(alice, [f"a/{n}" for n in range(MAX_PATHS)], ttl_s=60)
    await office.reservations.reserve(alice, [f"b/{n}" for n in range(MAX_PATHS)])
    clock.advance(61)
    await office.presence.heartbeat(alice.session_id or "")
    granted = (
        await office.reservations.reserve(alice, [f"c/{n}" for n in range(MAX_PATHS)])
    ).granted
    assert len(granted) == MAX_PATHS


async def test_a_caller_with_no_project_is_told_how_to_name_one(office: PostOffice) -> None:
    nobody = await office.presence.ensure_agent("nobody")
    session = await office.presence.open_http_session(nobody, host="laptop")  # no project
    here = replace(nobody, session_id=session.id)
    refused = await refused_without_change(
        office, ErrorCode.INVALID_ARGUMENT, office.reservations.reserve(here, ["src/a.py"])
    )
    assert "AGENTPOST_PROJECT" in refused.message


async def test_projects_keep_their_reservations_apart(office: PostOffice) -> None:
    alice = await session_caller(office, "alice", project="shop")
    bob = await session_caller(office, "bob", project="bank")
    await office.reservations.reserve(alice, ["src/**"])
    assert (await office.reservations.reserve(bob, ["src/a.py"])).conflicts == []
    assert await held(office, bob) == [("bob", "src/a.py")]
    shop = await office.reservations.reservations(bob, project="shop")
    assert paths(shop) == [("alice", "src/**")]


# -- listing --------------------------------------------------------------------------------------


async def test_listing_with_a_path_shows_the_reservations_that_overlap_it(
    office: PostOffice,
    pair: Pair,
) -> None:
    alice, bob = pair
    await office.reservations.reserve(alice, ["src/**", "docs/guide.md"])
    await office.reservations.reserve(bob, ["tests/*"], exclusive=False)
    found = await office.reservations.reservations(bob, path="src/a/b.py")
    assert paths(found) == [("alice", "src/**")]
    assert paths(await office.reservations.reservations(bob, path="docs")) == [
        ("alice", "docs/guide.md")
    ]
    assert await office.reservations.reservations(bob, path="bench/x.py") == []


# -- lapsing --------------------------------------------------------------------------------------


async def test_a_reservation_ends_at_its_ttl(
    office: PostOffice, pair: Pair, clock: FakeClock
) -> None:
    alice, bob = pair
    await office.reservations.reserve(alice, ["src/a.py"], ttl_s=120)
    clock.advance(10)
    await office.presence.heartbeat(alice.session_id or "")
    await office.presence.heartbeat(bob.session_id or "")
    assert (await office.reservations.reserve(bob, ["src/a.py"])).conflicts != []
    clock.advance(110)
    await office.presence.heartbeat(alice.session_id or "")
    await office.presence.heartbeat(bob.session_id or "")
    assert [r.path for r in (await office.reservations.reserve(bob, ["src/a.py"])).granted] == [
        "src/a.py"
    ]


async def test_reservations_lapse_45_s_after_the_agents_last_session_ended(
    office: PostOffice, clock: FakeClock
) -> None:
    alice = await session_caller(office, "alice")
    await office.reservations.reserve(alice, ["src/**"])
    await office.presence.end_session(alice.session_id or "")
    clock.advance(44)
    bob = await session_caller(office, "bob")
    assert paths(await office.reservations.reservations(bob)) == [("alice", "src/**")]
    assert (await office.reservations.reserve(bob, ["src/a.py"])).conflicts != []
    clock.advance(2)
    assert await office.reservations.reservations(bob) == []
    assert (await office.reservations.reserve(bob, ["src/a.py"])).conflicts == []


async def test_one_live_session_keeps_all_of_its_agents_reservations(
    office: PostOffice, clock: FakeClock
) -> None:
    first = await session_caller(office, "alice")
    await office.reservations.reserve(first, ["src/**"])
    second = await session_caller(office, "alice")
    await office.presence.end_session(first.session_id or "")
    clock.advance(300)
    await office.presence.heartbeat(second.session_id or "")
    bob = await session_caller(office, "bob")
    assert (await office.reservations.reserve(bob, ["src/a.py"])).conflicts != []


async def test_reserve_names_the_other_sessions_that_keep_its_claims_and_when_they_lapse_unheard(
    office: PostOffice, clock: FakeClock
) -> None:
    offline_after_s = office.settings.offline_after_s
    first = await session_caller(office, "alice")
    alone = await office.reservations.reserve(first, ["src/**"])
    assert alone.other_sessions == []
    assert alone.lapse_unheard_at == clock.now + 2 * offline_after_s
    assert alone.lapses_with_caller()

    second = await session_caller(office, "alice")
    clock.advance(10)
    kept = await office.reservations.reserve(first, ["docs/**"])
    assert kept.other_sessions == [second.session_id]
    assert not kept.lapses_with_caller()
    as_agent = await office.reservations.reserve(Caller("alice"), ["lib/**"])
    assert sorted(as_agent.other_sessions or []) == sorted([first.session_id, second.session_id])

    await office.presence.end_session(second.session_id or "")
    last = await office.reservations.reserve(first, ["docs/**"])
    assert last.other_sessions == [], "an ended session keeps them no longer than the grace"
    assert last.lapse_unheard_at == clock.now + 2 * offline_after_s
    bob = await session_caller(office, "bob")
    clock.advance(2 * offline_after_s - 1)
    assert len(await office.reservations.reservations(bob)) == 3
    clock.advance(2)
    assert await office.reservations.reservations(bob) == [], "lapsed when the answer said"


async def test_a_silent_session_lets_its_reservations_lapse_45_s_after_it_went_offline(
    office: PostOffice, clock: FakeClock
) -> None:
    alice = await session_caller(office, "alice")
    await office.reservations.reserve(alice, ["src/**"])
    clock.advance(46)  # no heartbeat for 46 s: offline since 45 s
    bob = await session_caller(office, "bob")
    assert "alice" not in [p.name for p in await office.presence.who()]
    assert len(await office.reservations.reservations(bob)) == 1  # the grace, as for an end
    clock.advance(43)
    assert len(await office.reservations.reservations(bob)) == 1
    clock.advance(2)  # 91 s after the last heartbeat: 46 s after it went offline
    assert await office.reservations.reservations(bob) == []
    assert (await office.reservations.reserve(bob, ["src/a.py"])).conflicts == []


async def test_a_session_ended_after_it_fell_silent_lapses_from_when_it_went_offline(
    office: PostOffice, clock: FakeClock
) -> None:
    alice = await session_caller(office, "alice")
    await office.reservations.reserve(alice, ["src/**"])
    clock.advance(60)  # offline since 45 s; ended now
    await office.presence.end_session(alice.session_id or "")
    clock.advance(29)
    bob = await session_caller(office, "bob")
    assert len(await office.reservations.reservations(bob)) == 1
    clock.advance(2)  # 91 s: 46 s after it went offline, though only 31 s after it ended
    assert await office.reservations.reservations(bob) == []


async def test_a_dead_local_process_ends_its_session_and_its_reservations_lapse_45_s_later(
    office: PostOffice, clock: FakeClock
) -> None:
    crashed = await session_caller(office, "crashed", pid=dead_pid())
    await office.reservations.reserve(crashed, ["src/**"])
    bob = await session_caller(office, "bob")
    assert len(await office.reservations.reservations(bob)) == 1  # the death is noticed here
    assert (await office.presence.session(crashed.session_id or "")).ended_at == clock.now
    clock.advance(46)
    await office.presence.heartbeat(bob.session_id or "")
    assert await office.reservations.reservations(bob) == []


async def test_a_lapsed_reservation_stays_lapsed_when_its_agent_comes_back(
    office: PostOffice, clock: FakeClock
) -> None:
    alice = await session_caller(office, "alice")
    await office.reservations.reserve(alice, ["src/**"])
    await office.presence.end_session(alice.session_id or "")
    clock.advance(60)
    bob = await session_caller(office, "bob")
    assert (await office.reservations.reserve(bob, ["src/a.py"])).granted
    back = await session_caller(office, "alice")
    assert paths(await office.reservations.reservations(back)) == [("bob", "src/a.py")]


async def test_a_session_silent_past_the_grace_holds_what_its_own_call_reserves(
    office: PostOffice, pair: Pair, clock: FakeClock
) -> None:
    """A laptop waking from sleep: the clock moved past the grace, the session's next heartbeat
    is still seconds away, and its first call reserves. The call is the session's heartbeat:
    it neither releases the caller's own reservations nor grants what it does not hold."""
    alice, bob = pair
    await office.reservations.reserve(alice, ["src/a.py"])
    clock.advance(100)
    await office.presence.heartbeat(bob.session_id or "")
    assert [r.path for r in (await office.reservations.reserve(alice, ["src/b.py"])).granted] == [
        "src/b.py"
    ]
    assert not (await office.reservations.reserve(bob, ["src/b.py"])).granted
    assert await held(office, bob) == [("alice", "src/a.py"), ("alice", "src/b.py")]
    clock.advance(100)  # asleep again: waking, it renews one and releases the other
    await office.presence.heartbeat(bob.session_id or "")
    renewed = await office.reservations.renew_reservations(alice, ttl_s=600)
    assert sorted(r.path for r in renewed.reservations) == ["src/a.py", "src/b.py"]
    clock.advance(100)
    await office.presence.heartbeat(bob.session_id or "")
    released = await office.reservations.release_reservations(alice, paths=["src/a.py"])
    assert ([r.path for r in released.reservations], released.not_found) == (["src/a.py"], [])
    assert await held(office, bob) == [("alice", "src/b.py")]


async def reserve_while_sending(
    reserving: Awaitable[ReserveResult], sending: Awaitable[Any]
) -> tuple[ReserveResult, list[str]]:
    """Start a slow reserve, send 0.3 s into it: its result, and which of the two ended first."""
    done: list[str] = []
    result: list[ReserveResult] = []

    async def reserve() -> None:
        result.append(await reserving)
        done.append("reserve")

    async with anyio.create_task_group() as group:
        group.start_soon(reserve)
        await anyio.sleep(0.3)  # the slow work under way
        await sending
        done.append("send")
    return result[0], done


async def test_long_overlap_checks_hold_up_no_other_agent(
    office: PostOffice, pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deciding whether 100 globs of 1,024 characters overlap another agent's 100 takes half
    a minute; done on the event loop in the write transaction, every other agent of the post
    office waited as long (the service answered not even /health). Here each check is made
    slow instead of long, and another agent's mail must pass meanwhile."""
    from agentpost.domain import reservations as rules

    alice, bob = pair
    carol = await session_caller(office, "carol")
    pattern = "*?" * 500
    await office.reservations.reserve(alice, [f"{pattern}{n}" for n in range(20)])
    real = rules.overlaps

    def slow(
        a: str, b: str, tracked: Tracked = rules.no_tracked_files, budget: Budget | None = None
    ) -> bool:
        time.sleep(0.01)
        return real(a, b, tracked, budget)

    monkeypatch.setattr(rules, "overlaps", slow)
    decided, done = await reserve_while_sending(
        office.reservations.reserve(bob, [f"{pattern}x{n}" for n in range(10)]),  # for 2 s
        office.mailbox.send(carol, "alice", "still there?"),
    )
    assert done == ["send", "reserve"]  # the send did not wait for the checks
    assert not decided.granted
    assert {c.path for c in decided.conflicts} == {f"{pattern}x{n}" for n in range(10)}


async def test_globs_too_long_to_compare_within_the_budget_conflict_and_the_rest_is_decided(
    office: PostOffice, pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """100 globs of 1,024 characters against another agent's 100 took half a minute of checks
    on a worker thread every request shares. The checks now stop at a budget (made small
    here), the longest pairs last, and a pair it runs out on counts as overlapping."""
    from agentpost.services import reservations as service

    monkeypatch.setattr(service, "OVERLAP_BUDGET", 1000)
    alice, bob = pair
    long = "*?" * 500  # keeps the other's automaton alive to its last character
    await office.reservations.reserve(alice, [f"{long}a{n}" for n in range(3)] + ["docs/*"])
    result = await office.reservations.reserve(
        bob, [f"{long}b{n}" for n in range(3)] + ["src/a.py", "docs/x.md"]
    )
    assert [r.path for r in result.granted] == ["src/a.py"]
    assert {(c.path, c.holder) for c in result.conflicts} == {
        *((f"{long}b{n}", "alice") for n in range(3)),
        ("docs/x.md", "alice"),
    }
    assert [r.agent for r in await office.reservations.reservations(bob, path="src/a.py")] == [
        "bob"
    ]


async def test_listing_by_path_decides_the_short_pairs_before_the_budget_runs_out(
    office: PostOffice, pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`reservations(path=…)` spends the budget as `reserve` does, shortest pairs first: a
    short claim made after long ones is compared, not listed as overlapping unchecked."""
    from agentpost.services import reservations as service

    monkeypatch.setattr(service, "OVERLAP_BUDGET", 1000)
    alice, bob = pair
    long = "*?" * 500
    await office.reservations.reserve(alice, [f"{long}a{n}" for n in range(3)])
    await office.reservations.reserve(alice, ["docs/*", "src/*.py"])
    listed = await office.reservations.reservations(bob, path=f"{long}b")
    assert "docs/*" not in [r.path for r in listed]  # decided: it cannot match the text
    assert {r.path for r in listed} >= {f"{long}a{n}" for n in range(3)}  # undecided: listed


# -- renewing and releasing -----------------------------------------------------------------------


async def test_renewing_without_ids_renews_every_reservation_of_the_caller_in_the_project(
    office: PostOffice, pair: Pair, clock: FakeClock
) -> None:
    alice, bob = pair
    await office.reservations.reserve(alice, ["src/a.py", "src/b.py"], ttl_s=60)
    await office.reservations.reserve(bob, ["docs/*"], ttl_s=60)
    clock.advance(40)
    renewed = await office.reservations.renew_reservations(alice, ttl_s=600)
    assert sorted(r.path for r in renewed.reservations) == ["src/a.py", "src/b.py"]
    assert {r.expires_at for r in renewed.reservations} == {clock.now + 600}
    assert renewed.not_found == []
    await office.presence.heartbeat(alice.session_id or "")
    await office.presence.heartbeat(bob.session_id or "")
    clock.advance(30)  # past the first TTL: only the renewed ones are left
    assert await held(office, alice) == [("alice", "src/a.py"), ("alice", "src/b.py")]


async def test_renewing_without_a_ttl_keeps_each_reservations_own_ttl_from_now(
    office: PostOffice, clock: FakeClock
) -> None:
    """A day-long claim renewed without a ttl must not shrink to the default hour."""
    alice = await session_caller(office, "alice")
    [day] = (await office.reservations.reserve(alice, ["a"], ttl_s=86_400)).granted
    [minute] = (await office.reservations.reserve(alice, ["b"], ttl_s=60)).granted
    clock.advance(30)
    renewed = await office.reservations.renew_reservations(alice)
    expiry = {r.id: r.expires_at for r in renewed.reservations}
    assert expiry == {day.id: clock.now + 86_400, minute.id: clock.now + 60}
    await office.reservations.renew_reservations(alice, [minute.id], ttl_s=600)
    clock.advance(100)
    await office.presence.heartbeat(alice.session_id or "")
    [again] = (await office.reservations.renew_reservations(alice, [minute.id])).reservations
    assert again.expires_at == clock.now + 600  # the ttl it was last given
    listed = {r.id: r.expires_at for r in await office.reservations.reservations(alice)}
    assert listed == {day.id: clock.now - 100 + 86_400, minute.id: clock.now + 600}


async def test_renewing_by_id_renews_only_those_and_reports_the_rest(
    office: PostOffice, pair: Pair, clock: FakeClock
) -> None:
    alice, bob = pair
    a, b = (await office.reservations.reserve(alice, ["a", "b"], ttl_s=60)).granted
    [theirs] = (await office.reservations.reserve(bob, ["c"], ttl_s=60)).granted
    renewed = await office.reservations.renew_reservations(
        alice, [a.id, theirs.id, "r_nothing"], ttl_s=300
    )
    assert [r.id for r in renewed.reservations] == [a.id]
    assert renewed.not_found == [theirs.id, "r_nothing"]
    unchanged = {r.id: r.expires_at for r in await office.reservations.reservations(bob)}
    assert unchanged[theirs.id] == theirs.expires_at
    assert unchanged[b.id] == b.expires_at


async def test_an_expired_reservation_is_not_renewed(office: PostOffice, clock: FakeClock) -> None:
    alice = await session_caller(office, "alice")
    [gone] = (await office.reservations.reserve(alice, ["a"], ttl_s=10)).granted
    clock.advance(11)
    await office.presence.heartbeat(alice.session_id or "")
    renewed = await office.reservations.renew_reservations(alice, [gone.id])
    assert (renewed.reservations, renewed.not_found) == ([], [gone.id])


async def test_releasing_by_id_and_by_path_frees_them_for_others(
    office: PostOffice, pair: Pair
) -> None:
    alice, bob = pair
    a, _b, _c = (await office.reservations.reserve(alice, ["a", "b/", "c"])).granted
    done = await office.reservations.release_reservations(alice, ids=[a.id], paths=["./b"])
    assert sorted(r.path for r in done.reservations) == ["a", "b"]
    assert done.not_found == []
    result = await office.reservations.reserve(bob, ["a", "b", "c"])
    assert [r.path for r in result.granted] == ["a", "b"]
    assert [c.path for c in result.conflicts] == ["c"]


async def test_releasing_with_neither_ids_nor_paths_releases_all_of_yours(
    office: PostOffice,
    pair: Pair,
) -> None:
    alice, bob = pair
    await office.reservations.reserve(alice, ["a", "b"])
    await office.reservations.reserve(bob, ["c"])
    done = await office.reservations.release_reservations(alice)
    assert sorted(r.path for r in done.reservations) == ["a", "b"]
    assert await held(office, alice) == [("bob", "c")]


async def test_someone_elses_reservation_is_never_released_and_comes_back_not_found(
    office: PostOffice,
    pair: Pair,
) -> None:
    alice, bob = pair
    [theirs] = (await office.reservations.reserve(alice, ["src/**"])).granted
    done = await office.reservations.release_reservations(bob, ids=[theirs.id], paths=["src/**"])
    assert (done.reservations, done.not_found) == ([], [theirs.id, "src/**"])
    assert await held(office, bob) == [("alice", "src/**")]


async def test_reservations_that_ended_are_forgotten_once_past_the_retention(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    """Only live reservations are ever read: one released or expired stays in the store for
    the retention, as handled mail does, then goes; else reserving and releasing in a loop
    would grow the store without bound."""
    office = await open_office(retention_days=1)
    alice = await session_caller(office, "alice")
    (kept,) = (await office.reservations.reserve(alice, "src/kept.py", ttl_s=7 * 86_400)).granted
    await office.reservations.reserve(alice, "src/lapses.py", ttl_s=60)
    await office.reservations.reserve(alice, "src/released.py")
    await office.reservations.release_reservations(alice, paths="src/released.py")
    clock.advance(86_000)
    await office.mailbox.sweep()
    assert len((await snapshot(office.store))["reservations"]) == 3
    clock.advance(600)
    await office.mailbox.sweep()
    # Neither released nor expired: alice's next session makes it live again.
    assert [row[0] for row in (await snapshot(office.store))["reservations"]] == [kept.id]


async def test_reserving_again_forgets_the_agents_reservations_that_ended(
    office: PostOffice, pair: Pair, clock: FakeClock
) -> None:
    """Reserving and releasing in a loop, or letting short claims lapse, leaves an agent at
    most its live reservations and those that ended since it last reserved: each new claim
    forgets its ended ones, which nothing reads again."""
    alice, bob = pair
    await office.reservations.reserve(bob, "docs/bob.md")
    await office.reservations.release_reservations(bob)
    for i in range(3):
        await office.reservations.reserve(alice, f"src/{i}.py", ttl_s=60)
        await office.reservations.release_reservations(alice)
    await office.reservations.reserve(alice, "src/lapses.py", ttl_s=60)
    clock.advance(61)
    (kept,) = (await office.reservations.reserve(alice, "src/kept.py")).granted
    stored = {row[0]: row[2] for row in (await snapshot(office.store))["reservations"]}
    assert sorted(stored.values()) == ["alice", "bob"]  # bob's is his to forget
    assert kept.id in stored


# -- tracked files --------------------------------------------------------------------------------


def git_repository(root: Path, files: list[str]) -> Path:
    root.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name)
    subprocess.run(["git", "-C", str(root), "add", "."], check=True)
    return root


async def worktree_caller(office: PostOffice, name: str, worktree: Path) -> Caller:
    """A caller whose worktree is on this host: only there are tracked files read, so only
    such a caller's globs can overlap by a file git tracks (project shop)."""
    context = LocalContext(
        host=this_host(), pid=os.getpid(), project="shop", worktree=str(worktree), branch="main"
    )
    session = await office.presence.open_local_session(context, name=name)
    return Caller(session.agent, session.id)


async def test_two_globs_overlap_when_a_file_tracked_in_the_callers_worktree_matches_both(
    office: PostOffice, tmp_path: Path
) -> None:
    repo = git_repository(tmp_path / "shop", ["src/a/b.py", "docs/guide.md"])
    alice = await worktree_caller(office, "alice", repo)
    elsewhere = await session_caller(office, "bob")  # a worktree that is not on this host
    await office.reservations.reserve(alice, ["src/a/**"])
    # Bob's worktree is not here: the globs are compared by their text, which share nothing.
    assert (await office.reservations.reserve(elsewhere, ["**/*.py"])).granted
    await office.reservations.release_reservations(elsewhere)
    await office.reservations.release_reservations(alice)
    await office.reservations.reserve(elsewhere, ["src/a/**"])
    # Alice's worktree tracks src/a/b.py, which both globs match.
    result = await office.reservations.reserve(alice, ["**/*.py", "**/*.md"])
    assert [c.path for c in result.conflicts] == ["**/*.py"]
    assert [r.path for r in result.granted] == ["**/*.md"]


async def test_globs_overlap_by_a_tracked_file_in_a_worktree_whose_path_is_not_utf8(
    office: PostOffice, tmp_path: Path
) -> None:
    """The session shows the folder with U+FFFD, a path that is not there: git is asked in the
    folder itself, else no file is tracked and the two globs pass each other by."""
    root = Path(os.fsdecode(bytes(tmp_path) + b"/shop-\xff"))
    repo = git_repository(root, ["src/a/b.py"])
    context = LocalContext(
        host=this_host(),
        pid=os.getpid(),
        project="shop",
        worktree=os.fsencode(repo).decode("utf-8", "replace"),
        branch="main",
        folder=str(repo),
    )
    session = await office.presence.open_local_session(context, name="alice")
    alice = Caller(session.agent, session.id)
    bob = await session_caller(office, "bob")
    await office.reservations.reserve(bob, ["src/a/**"])
    result = await office.reservations.reserve(alice, ["**/*.py"])
    assert [c.path for c in result.conflicts] == ["**/*.py"]


async def test_matching_globs_against_a_large_worktrees_files_holds_up_nothing_else(
    office: PostOffice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a repository of 50,000 tracked files one glob takes seconds to match against them
    all: on the event loop, the agent's own server (its heartbeat, its push, the other tool
    calls) stood still as long. Here each match is made slow instead, on a few files."""
    from agentpost.domain import reservations as rules

    repo = git_repository(tmp_path / "shop", [f"src/m{n}.py" for n in range(60)])
    alice = await worktree_caller(office, "alice", repo)
    bob = await session_caller(office, "bob")
    await office.reservations.reserve(bob, ["src/**"])
    real = rules.matches

    def slow(pattern: str, path: str) -> bool:
        time.sleep(0.03)
        return real(pattern, path)

    monkeypatch.setattr(rules, "matches", slow)
    decided, done = await reserve_while_sending(
        office.reservations.reserve(alice, ["**/*.py"]),  # the matching takes 1.8 s
        office.mailbox.send(bob, "alice", "still there?"),
    )
    assert done == ["send", "reserve"]  # the send did not wait for the matching
    assert [c.path for c in decided.conflicts] == ["**/*.py"]


@pytest.mark.parametrize("elsewhere", [False, True], ids=["same-server", "another-process"])
async def test_a_glob_reserved_while_a_folder_is_being_reserved_still_conflicts_with_it(
    open_office: OpenOffice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, elsewhere: bool
) -> None:
    """Alice's `src` was once granted beside bob's exclusive `**/foo.py`: her call looked for
    globs before bob's commit, found none, and so compared the two without tracked files."""
    here = await open_office()
    there = await open_office() if elsewhere else here  # another `agentpost mcp` on the database
    repo = git_repository(tmp_path / "shop", ["src/foo.py"])
    alice = await worktree_caller(here, "alice", repo)
    bob = await worktree_caller(there, "bob", repo)
    # Between the read that decides whether git must be asked and the write that decides the
    # claim, bob's glob is committed: as any other request or process may do in that await.
    looked = here.reservations._tracked
    looked_once = anyio.Event()
    bobs: list[Reservation] = []

    async def bob_commits_once_alice_has_looked(*args: Any, **kwargs: Any) -> Tracked | None:
        found = await looked(*args, **kwargs)
        if not looked_once.is_set():
            looked_once.set()  # bob's own call looks too, on the same server
            bobs.extend((await there.reservations.reserve(bob, ["**/foo.py"])).granted)
        return found

    monkeypatch.setattr(here.reservations, "_tracked", bob_commits_once_alice_has_looked)
    result = await here.reservations.reserve(alice, ["src"])
    assert [r.path for r in bobs] == ["**/foo.py"]
    assert result.granted == []
    assert [(c.path, c.holder, c.held) for c in result.conflicts] == [("src", "bob", "**/foo.py")]
    assert paths(await here.reservations.live("shop")) == [("bob", "**/foo.py")]
