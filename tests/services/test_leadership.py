"""Leadership: one leader per project, a term that grows with every holder, and failover."""

from __future__ import annotations

import logging
import os
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from account_helpers import ADDRESS, keyed, owner, self_registered
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.leadership import Leader
from agentpost.domain.models import Caller, Kind, Trust
from agentpost.services import PostOffice, leadership
from agentpost.services.local_identity import detect, this_host
from backends import (
    FakeClock,
    OpenOffice,
    agents,
    hand_pid_on,
    refused_without_change,
    seat_directly,
    session_caller,
)
from git_repo import git, make_repo
from processes import sleeping

pytestmark = pytest.mark.anyio


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


async def announcements(office: PostOffice, reader: Caller) -> list[tuple[str, dict[str, object]]]:
    found = await office.mailbox.inbox(reader, limit=50)
    return [(m.body, m.data) for m in found.messages if m.kind is Kind.SYSTEM]


async def led_by(office: PostOffice, caller: Caller, name: str) -> Leader:
    """The seat once `name` holds it: looked at again after each commit, for 10 s at most."""
    with anyio.fail_after(10):
        while True:
            version = office.store.version
            seat = await office.leadership.leader(caller)
            if seat.leader == name:
                return seat
            await office.store.wait_changed(version, 1)


async def test_the_first_session_on_the_default_branch_leads_with_term_one(
    office: PostOffice,
) -> None:
    alice = await session_caller(office, "alice")
    watcher = await session_caller(office, "watcher", branch="feature-x")
    seat = await office.leadership.claim(alice)
    assert (seat.project, seat.leader, seat.term, seat.session_id) == (
        "shop",
        "alice",
        1,
        alice.session_id,
    )
    assert seat.expires_at is not None
    assert seat.since is not None
    assert await office.leadership.leader(watcher) == seat
    (body, data), *_ = await announcements(office, watcher)
    assert body == "alice now leads shop (term 1)."
    assert data == {
        "event": "leader.changed",
        "project": "shop",
        "leader": "alice",
        "term": 1,
        "previous": None,
    }


async def test_claiming_a_seat_another_live_session_holds_is_a_conflict(
    office: PostOffice,
) -> None:
    alice = await session_caller(office, "alice")
    bob = await session_caller(office, "bob")
    await office.leadership.claim(alice)
    err = await refused_without_change(office, ErrorCode.CONFLICT, office.leadership.claim(bob))
    assert err.details == {"leader": "alice", "term": 1}


async def test_a_claim_refused_for_a_seat_of_the_callers_own_agent_says_it_is_another_session(
    office: PostOffice,
) -> None:
    """A second window of carol was told "carol leads shop": its own name, as if it led."""
    first = await session_caller(office, "carol")
    second = await session_caller(office, "carol")
    await office.leadership.claim(first)
    err = await refused_without_change(office, ErrorCode.CONFLICT, office.leadership.claim(second))
    assert err.message == (
        f"another session of yours ({first.session_id}) leads shop (term 1); "
        "the seat frees when that session stops"
    )
    assert err.details == {"leader": "carol", "term": 1}


async def test_a_caller_without_a_project_is_told_how_to_get_one_wherever_it_speaks_from(
    office: PostOffice,
) -> None:
    """It was told to name one or set AGENTPOST_PROJECT: an agent over HTTP sets no
    environment, and a project named in a claim is refused (a session leads only its own)."""
    (drifter,) = await agents(office, "drifter")
    for attempt in (office.leadership.leader(drifter), office.leadership.release(drifter)):
        err = await refused_without_change(office, ErrorCode.INVALID_ARGUMENT, attempt)
        assert "give your agent a project (`update_profile`, PATCH /v1/me)" in err.message


async def test_claiming_again_keeps_the_term_and_announces_nothing(office: PostOffice) -> None:
    alice = await session_caller(office, "alice")
    await office.leadership.claim(alice)
    before = await announcements(office, alice)
    again = await office.leadership.claim(alice)
    assert (again.leader, again.term) == ("alice", 1)
    assert await announcements(office, alice) == before[len(before) :]


async def test_a_session_off_the_default_branch_may_not_lead(office: PostOffice) -> None:
    feature = await session_caller(office, "feat", branch="feature-x")
    err = await refused_without_change(
        office, ErrorCode.FORBIDDEN, office.leadership.claim(feature)
    )
    assert "default branch" in err.message
    master = await session_caller(office, "old", project="legacy", branch="master")
    assert (await office.leadership.claim(master)).leader == "old"


def clone_with_default_branch(tmp_path: Path, folder: bytes, default: str) -> Path:
    """A clone at `tmp_path/folder` of a repository whose default branch is `default` (so the
    clone's origin/HEAD names it), with `main` checked out besides."""
    origin = tmp_path / "origin"
    make_repo(origin, branch=default)
    clone = Path(os.fsdecode(bytes(tmp_path) + b"/" + folder))
    subprocess.run(["git", "clone", "-q", str(origin), clone], check=True, capture_output=True)
    git(clone, "branch", "main")
    return clone


@pytest.mark.parametrize("folder", [b"shop", b"shop-\xff"], ids=["utf8", "not-utf8"])
async def test_origins_head_names_the_default_branch_wherever_the_worktree_lies(
    office: PostOffice, tmp_path: Path, folder: bytes
) -> None:
    """A folder whose name is not UTF-8 is shown with U+FFFD, a path that is not there: git is
    asked in the folder itself, else `trunk` could not lead and `main` could."""
    clone = clone_with_default_branch(tmp_path, folder, "trunk")
    trunk = detect(clone)
    git(clone, "checkout", "-q", "main")
    main = detect(clone)
    assert (trunk.branch, main.branch, trunk.project) == ("trunk", "main", "shop")
    on_main = await office.presence.open_local_session(main, name="on-main")
    await refused_without_change(
        office,
        ErrorCode.FORBIDDEN,
        office.leadership.claim(Caller(on_main.agent, on_main.id)),
    )
    on_trunk = await office.presence.open_local_session(trunk, name="on-trunk")
    seat = await office.leadership.claim(Caller(on_trunk.agent, on_trunk.id))
    assert seat.leader == "on-trunk"


async def test_leader_branches_in_config_choose_who_may_lead(open_office: OpenOffice) -> None:
    office = await open_office(leader_branches=["develop"])
    develop = await session_caller(office, "dev", branch="develop")
    main = await session_caller(office, "main-agent", branch="main")
    await refused_without_change(office, ErrorCode.FORBIDDEN, office.leadership.claim(main))
    assert (await office.leadership.claim(develop)).leader == "dev"


async def test_a_session_leads_only_its_own_project(office: PostOffice) -> None:
    alice = await session_caller(office, "alice")
    await refused_without_change(
        office, ErrorCode.FORBIDDEN, office.leadership.claim(alice, "other")
    )


async def test_when_the_holder_stops_the_next_claim_gets_a_greater_term(
    office: PostOffice,
) -> None:
    alice = await session_caller(office, "alice")
    bob = await session_caller(office, "bob")
    await office.leadership.claim(alice)
    await office.presence.end_session(alice.session_id or "")
    assert (await office.leadership.leader(bob)).leader is None
    assert (await office.leadership.leader(bob)).term == 1  # the last term stays on show
    seat = await office.leadership.claim(bob)
    assert (seat.leader, seat.term) == ("bob", 2)
    bodies = [body for body, _ in await announcements(office, bob)]
    assert bodies[-1] == "bob now leads shop (term 2), taking over from alice."


async def test_a_holder_whose_process_died_leads_no_more(office: PostOffice) -> None:
    ghost = await session_caller(office, "ghost", pid=dead_pid())
    await seat_directly(office, ghost)
    bob = await session_caller(office, "bob")
    assert (await office.leadership.leader(bob)).leader is None
    assert (await office.leadership.claim(bob)).term == 2


async def test_a_holder_whose_pid_another_process_holds_now_leads_no_more(
    office: PostOffice,
) -> None:
    """The seat freed when the holder's process died: not when its pid was given to another
    process meanwhile, which runs but is not the holder's."""
    with sleeping() as holder:
        ghost = await session_caller(office, "ghost", pid=holder.pid)
        await seat_directly(office, ghost)
        bob = await session_caller(office, "bob")
        assert (await office.leadership.leader(bob)).leader == "ghost"  # its own process runs
        await hand_pid_on(office, ghost)
        assert (await office.leadership.leader(bob)).leader is None
        assert (await office.leadership.claim(bob)).term == 2


async def test_heartbeats_renew_the_lease_and_silence_lets_it_lapse(
    office: PostOffice, clock: FakeClock
) -> None:
    alice = await session_caller(office, "alice")
    bob = await session_caller(office, "bob")
    seat = await office.leadership.claim(alice)
    clock.advance(30)
    await office.presence.heartbeat(alice.session_id or "")
    clock.advance(30)
    renewed = await office.leadership.leader(bob)
    assert renewed.leader == "alice"
    assert renewed.expires_at is not None
    assert seat.expires_at is not None
    assert renewed.expires_at == seat.expires_at + 30
    await refused_without_change(office, ErrorCode.CONFLICT, office.leadership.claim(bob))
    clock.advance(16)  # 46 s since alice's last heartbeat
    assert (await office.leadership.leader(bob)).leader is None
    await office.presence.heartbeat(bob.session_id or "")
    assert (await office.leadership.claim(bob)).term == 2


async def test_release_frees_the_seat_and_says_so(office: PostOffice) -> None:
    alice = await session_caller(office, "alice")
    bob = await session_caller(office, "bob")
    await office.leadership.claim(alice)
    free = await office.leadership.release(alice)
    assert (free.leader, free.term) == (None, 1)
    bodies = [body for body, _ in await announcements(office, bob)]
    assert bodies[-1] == "alice stepped down as leader of shop (term 1); the seat is free."
    assert (await office.leadership.claim(bob)).term == 2


async def test_a_holder_silent_past_its_lease_may_still_step_down(
    office: PostOffice, clock: FakeClock
) -> None:
    """Waking from sleep before its next heartbeat, a local leader asks to step down: told
    it leads nobody, it would lead again with that heartbeat (and its standing go on)."""
    alice = await session_caller(office, "alice")
    bob = await session_caller(office, "bob")
    await office.leadership.claim(alice)
    clock.advance(60)
    await office.presence.heartbeat(bob.session_id or "")
    assert (await office.leadership.release(alice)).leader is None
    await office.presence.heartbeat(alice.session_id or "")
    assert (await office.leadership.leader(bob)).leader is None
    bodies = [body for body, _ in await announcements(office, bob)]
    assert bodies[-1] == "alice stepped down as leader of shop (term 1); the seat is free."


async def test_a_release_by_a_session_that_does_not_lead_changes_nothing_and_says_so(
    office: PostOffice,
) -> None:
    """A client sending a release again, its first answer lost on the way, was told
    `conflict` ("you do not lead"), as if stepping down had failed. As releasing reservations
    one no longer holds, it succeeds: the seat as it stands, `released` false, no notice."""
    alice = await session_caller(office, "alice")
    bob = await session_caller(office, "bob")
    await office.leadership.claim(alice)
    not_bobs = await office.leadership.release(bob)
    assert (not_bobs.leader, not_bobs.term, not_bobs.released) == ("alice", 1, False)
    first = await office.leadership.release(alice)
    assert (first.leader, first.term, first.released) == (None, 1, True)
    again = await office.leadership.release(alice)
    assert (again.leader, again.term, again.released) == (None, 1, False)
    assert "released" not in (await office.leadership.leader(bob)).to_dict()
    assert [body for body, _ in await announcements(office, bob)] == [
        "alice now leads shop (term 1).",
        "alice stepped down as leader of shop (term 1); the seat is free.",
    ]


async def test_a_local_session_may_force_the_seat_and_the_term_grows(
    office: PostOffice,
) -> None:
    alice = await session_caller(office, "alice")
    bob = await session_caller(office, "bob")
    await office.leadership.claim(alice)
    seat = await office.leadership.claim(bob, force=True)
    assert (seat.leader, seat.term) == ("bob", 2)
    assert (await office.leadership.leader(alice)).leader == "bob"
    assert await forced_seats(office) == [("bob", "shop", {"previous": "alice", "term": 2})]


async def forced_seats(office: PostOffice) -> list[tuple[str, str | None, dict[str, object]]]:
    found = await office.admin.audit_log(Caller("owner", admin=True), action="leader.forced")
    return [(e.actor, e.target, e.detail) for e in found]


async def test_force_on_a_free_seat_or_ones_own_is_no_takeover_and_is_not_audited(
    office: PostOffice,
) -> None:
    alice = await session_caller(office, "alice")
    await office.leadership.claim(alice, force=True)
    await office.leadership.claim(alice, force=True)
    assert await forced_seats(office) == []


async def test_force_over_http_is_for_the_owner_only(office: PostOffice) -> None:
    alice = await session_caller(office, "alice")
    await office.leadership.claim(alice)
    remote = await office.presence.ensure_agent("remote")
    session = await office.presence.open_http_session(
        remote, host="elsewhere", project="shop", branch="main"
    )
    caller = Caller("remote", session.id, ip=ADDRESS)
    with pytest.raises(AgentpostError) as caught:
        await office.leadership.claim(caller, force=True)
    assert caught.value.code is ErrorCode.FORBIDDEN
    assert (await office.leadership.leader(alice)).leader == "alice"
    owner = Caller("remote", session.id, admin=True, ip=ADDRESS)
    assert (await office.leadership.claim(owner, force=True)).leader == "remote"
    # Both kept as the owner's acts are: the attempt without an admin key, and the takeover.
    audited = await office.admin.audit_log(Caller("owner", admin=True), actor="remote")
    assert [(e.actor, e.action, e.target, e.ip, e.detail) for e in audited] == [
        ("remote", "leader.forced", "shop", ADDRESS, {"previous": "alice", "term": 2}),
        ("remote", "admin.refused", "shop", ADDRESS, {"act": "force_leadership"}),
    ]


async def test_of_many_simultaneous_claims_exactly_one_wins(office: PostOffice) -> None:
    callers = [await session_caller(office, f"agent-{i}") for i in range(8)]
    outcomes: list[str] = []

    async def claim(caller: Caller) -> None:
        try:
            await office.leadership.claim(caller)
            outcomes.append("won")
        except AgentpostError as err:
            outcomes.append(err.code.value)

    async with anyio.create_task_group() as group:
        for caller in callers:
            group.start_soon(claim, caller)
    assert sorted(outcomes) == ["conflict"] * 7 + ["won"]
    assert (await office.leadership.leader(callers[0])).term == 1


async def test_a_standing_session_takes_the_seat_when_the_holder_stops(
    office: PostOffice,
) -> None:
    alice = await session_caller(office, "alice")
    bob = await session_caller(office, "bob")
    await office.leadership.claim(alice)
    async with anyio.create_task_group() as group:
        group.start_soon(office.leadership.stand, lambda: bob)
        await anyio.sleep(0.2)
        assert (await office.leadership.leader(bob)).leader == "alice"
        await office.presence.end_session(alice.session_id or "")
        await led_by(office, bob, "bob")
        group.cancel_scope.cancel()
    assert (await office.leadership.leader(bob)).term == 2


async def test_a_standing_session_takes_the_seat_of_a_holder_whose_pid_another_holds_now(
    office: PostOffice,
) -> None:
    """It waited for the holder's pid to exit: once that pid is another process's, for a
    process that was never the holder's, until the holder's lease ran out."""
    with sleeping() as holder:
        ghost = await session_caller(office, "ghost", pid=holder.pid)
        bob = await session_caller(office, "bob")
        await seat_directly(office, ghost)
        await hand_pid_on(office, ghost)
        async with anyio.create_task_group() as group:
            group.start_soon(office.leadership.stand, lambda: bob)
            await led_by(office, bob, "bob")
            group.cancel_scope.cancel()
    assert (await office.leadership.leader(bob)).term == 2


async def test_a_standing_session_whose_session_ends_stops_standing_and_announces_nothing(
    office: PostOffice,
) -> None:
    """Disabling an agent ends its sessions while a local process of it may still run: its
    standing must stop, not take the seat back under a new term on every commit, each time
    telling `#<project>` it leads while the seat shows nobody."""
    admin = await owner(office)
    alice = await session_caller(office, "alice")
    watcher = await session_caller(office, "watcher", branch="feature-x")
    stood_down = anyio.Event()

    async def standing() -> None:
        await office.leadership.stand(lambda: alice)
        stood_down.set()

    async with anyio.create_task_group() as group:
        group.start_soon(standing)
        await led_by(office, watcher, "alice")
        await office.admin.disable_agent(admin, "alice")
        with anyio.move_on_after(5):
            await stood_down.wait()
        group.cancel_scope.cancel()
    assert stood_down.is_set()
    seat = await office.leadership.leader(watcher)
    assert (seat.leader, seat.term) == (None, 1)
    # The disabling tells the seat is free; the standing session tells nothing more.
    assert [body for body, _ in await announcements(office, watcher)] == [
        "alice now leads shop (term 1).",
        "alice no longer leads shop (term 1): the owner disabled it. The seat is free.",
    ]


async def test_a_standing_session_silent_past_its_lease_keeps_its_seat_and_term(
    office: PostOffice, clock: FakeClock
) -> None:
    """A laptop waking from sleep: the wall clock moved past the lease, the session's next
    heartbeat is still seconds away, and the first commit wakes its standing. It must take
    its seat back once, as it was, not again under a new term on every commit till it beats."""
    alice = await session_caller(office, "alice")
    watcher = await session_caller(office, "watcher", branch="feature-x")
    async with anyio.create_task_group() as group:
        group.start_soon(office.leadership.stand, lambda: alice)
        await led_by(office, watcher, "alice")
        clock.advance(60)
        await office.presence.heartbeat(watcher.session_id or "")  # anyone's commit
        seat = await led_by(office, watcher, "alice")
        await anyio.sleep(0.3)  # time enough for standing to loop, were it to
        group.cancel_scope.cancel()
    assert seat.term == (await office.leadership.leader(watcher)).term == 1
    assert [body for body, _ in await announcements(office, watcher)] == [
        "alice now leads shop (term 1)."
    ]


async def test_a_local_session_of_an_unvouched_agent_stands_for_the_seat_once_vouched(
    open_office: OpenOffice,
) -> None:
    """Standing waits for a change rather than retry a refusal every second; the vouch is one."""
    office = await open_office(open_registration=True, auto_lead=False)
    await office.keys.self_register("drifter", project="shop", ip=ADDRESS)
    local = await session_caller(office, "drifter", project="shop", branch="main")
    async with anyio.create_task_group() as group:
        group.start_soon(office.leadership.stand, lambda: local)
        await anyio.sleep(0.3)
        assert (await office.leadership.leader(local)).leader is None
        await office.admin.vouch(await owner(office), "drifter")
        await led_by(office, local, "drifter")
        group.cancel_scope.cancel()


async def test_an_unvouched_standing_session_takes_no_write_lock_as_mail_flows(
    open_office: OpenOffice, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It wakes on every commit of the file while the seat is free; a refusal it can read
    must not cost every writer a turn of the lock."""
    office = await open_office(open_registration=True, auto_lead=False)
    await office.keys.self_register("drifter", project="shop", ip=ADDRESS)
    local = await session_caller(office, "drifter", project="shop", branch="main")
    alice = await session_caller(office, "alice", project="shop", branch="feature-x")
    tried: list[str] = []
    take = office.leadership._take

    def counted_take(*args: Any, **kwargs: Any) -> Any:
        tried.append("take")
        return take(*args, **kwargs)

    monkeypatch.setattr(office.leadership, "_take", counted_take)
    async with anyio.create_task_group() as group:
        group.start_soon(office.leadership.stand, lambda: local)
        for n in range(10):
            await office.mailbox.send(alice, "alice", f"note {n}")
            await anyio.sleep(0.02)
        group.cancel_scope.cancel()
    assert tried == []
    assert (await office.leadership.leader(alice)).leader is None


async def test_a_session_that_may_not_lead_does_not_stand(office: PostOffice) -> None:
    feature = await session_caller(office, "feat", branch="feature-x")
    with anyio.fail_after(5):
        await office.leadership.stand(lambda: feature)  # returns at once
    assert (await office.leadership.leader(feature)).leader is None


async def test_leaders_lists_every_project_seat(office: PostOffice) -> None:
    alice = await session_caller(office, "alice")
    olga = await session_caller(office, "olga", project="ops")
    await office.leadership.claim(alice)
    await office.leadership.claim(olga)
    assert [(s.project, s.leader) for s in await office.leadership.leaders()] == [
        ("ops", "olga"),
        ("shop", "alice"),
    ]


async def test_a_session_that_stepped_down_stands_no_more_until_it_claims_again(
    office: PostOffice,
) -> None:
    alice = await session_caller(office, "alice")
    async with anyio.create_task_group() as group:
        group.start_soon(office.leadership.stand, lambda: alice)
        await led_by(office, alice, "alice")
        await office.leadership.release(alice)
        await anyio.sleep(0.3)  # time enough for standing to take it back, were it to
        assert (await office.leadership.leader(alice)).leader is None
        group.cancel_scope.cancel()


async def test_a_release_by_a_session_that_does_not_lead_leaves_it_standing(
    office: PostOffice,
) -> None:
    """ "Nothing changed" means nothing: a standing session whose release found no seat of its
    own still takes the seat once it is free."""
    alice = await session_caller(office, "alice")
    bob = await session_caller(office, "bob")
    await office.leadership.claim(alice)
    async with anyio.create_task_group() as group:
        group.start_soon(office.leadership.stand, lambda: bob)
        assert (await office.leadership.release(bob)).released is False
        await office.leadership.release(alice)
        await led_by(office, bob, "bob")
        group.cancel_scope.cancel()


async def test_a_session_that_takes_another_name_keeps_its_seat_and_term_and_says_so(
    office: PostOffice,
) -> None:
    """The project hears who leads it now: its channel's last word named the old name."""
    first = await session_caller(office, None)  # auto-named shop-main, as a fresh session is
    watcher = await session_caller(office, "watcher", branch="feature-x")
    await office.leadership.claim(first)
    renamed = await office.presence.register(first, name="alice")
    seat = await office.leadership.leader(renamed)
    assert (seat.leader, seat.term) == ("alice", 1)
    body, data = (await announcements(office, watcher))[-1]
    assert data == {
        "event": "leader.changed",
        "project": "shop",
        "leader": "alice",
        "term": 1,
        "previous": "shop-main",
    }
    assert body == "shop-main is now alice, and leads shop still (term 1)."
    assert (await office.leadership.claim(renamed)).term == 1  # still its own, not a new term
    assert (await office.leadership.release(renamed)).leader is None


async def test_a_session_that_takes_a_self_registered_agents_name_gives_up_its_seat(
    open_office: OpenOffice,
) -> None:
    """Trust is the name's: a leader renamed to a stranger's name would lead as an agent the
    owner has not vouched for. The seat is freed and announced, as when a vouch is withdrawn."""
    office = await open_office(open_registration=True, auto_lead=False)
    await office.keys.self_register("drifter", project="shop", ip=ADDRESS)
    first = await session_caller(office, None)
    watcher = await session_caller(office, "watcher", branch="feature-x")
    await office.leadership.claim(first)

    renamed = await office.presence.register(first, name="drifter")
    seat = await office.leadership.leader(watcher)
    assert (seat.leader, seat.term) == (None, 1)
    body, data = (await announcements(office, watcher))[-1]
    assert data == {
        "event": "leader.changed",
        "project": "shop",
        "leader": None,
        "term": 1,
        "previous": "drifter",
    }
    assert "not vouched" in body
    await refused_without_change(office, ErrorCode.FORBIDDEN, office.leadership.claim(renamed))


async def test_a_session_flapping_between_branches_claims_at_most_once_a_window(
    office: PostOffice, clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each heartbeat that moves a session over HTTP to another branch stands for the seat
    afresh: a client flapping between branches, or naming one on every heartbeat, cost a claim
    (a write transaction) each time, and git in the worktree it names when that is here. A
    move within the window is still claimed for, at the first heartbeat after it."""
    make_repo(tmp_path / "shop")
    holder = await session_caller(office, "holder")
    await office.leadership.claim(holder)
    alice, _ = await keyed(office, "alice", project="shop")
    session = await office.presence.open_http_session(
        alice, host=this_host(), project="shop", worktree=str(tmp_path / "shop"), branch="x"
    )
    alice = replace(alice, session_id=session.id)
    claims: list[str | None] = []
    claim = office.leadership.claim
    gits: list[str] = []
    origin_head = leadership.origin_head

    async def counted_claim(caller: Caller, *args: Any, **kwargs: Any) -> Leader:
        claims.append(caller.session_id)
        return await claim(caller, *args, **kwargs)

    def counted_git(worktree: str) -> str | None:
        gits.append(worktree)
        return origin_head(worktree)

    monkeypatch.setattr(office.leadership, "claim", counted_claim)
    monkeypatch.setattr(leadership, "origin_head", counted_git)

    for branch in ["main", "feature-x"] * 5 + ["main"]:
        await office.leadership.heartbeat_of(alice, session.id, branch=branch)
        await office.leadership.heartbeat_of(alice, session.id, branch=branch)  # no move
    assert (len(claims), len(gits)) == (1, 1)

    await office.leadership.release(holder)
    clock.advance(leadership.CLAIM_AFTER_MOVE_S)
    await office.leadership.heartbeat_of(alice, session.id)  # the move to main is claimed for
    assert len(claims) == 2
    assert (await office.leadership.leader(alice)).leader == "alice"
    await office.leadership.heartbeat_of(alice, session.id)
    assert len(claims) == 2


async def test_a_session_over_http_takes_the_seat_its_silent_leader_left_at_its_heartbeat(
    office: PostOffice, clock: FakeClock
) -> None:
    """Failover over HTTP: a remote-backed stdio session claimed only as it opened or moved,
    so once the leader's machine (or the replica its connection was on) died, the seat stayed
    free with every other session on main heartbeating on."""
    sessions = {}
    for name in ("alice", "bob"):
        caller, _ = await keyed(office, name, project="shop")
        opened = await office.presence.open_http_session(
            caller, host="elsewhere", project="shop", branch="main"
        )
        sessions[name] = replace(caller, session_id=opened.id)
        await office.leadership.claim_if_eligible(sessions[name])  # as minting does
    alice, bob = sessions["alice"], sessions["bob"]
    assert bob.session_id is not None
    await office.leadership.heartbeat_of(bob, bob.session_id)
    seat = await office.leadership.leader(bob)
    assert (seat.leader, seat.session_id) == ("alice", alice.session_id)

    clock.advance(office.settings.offline_after_s + 1)  # alice heartbeats no more
    await office.leadership.heartbeat_of(bob, bob.session_id)
    seat = await office.leadership.leader(bob)
    assert (seat.leader, seat.session_id, seat.term) == ("bob", bob.session_id, 2)


async def test_a_session_that_ends_while_its_claim_looks_at_its_branch_takes_no_seat(
    office: PostOffice, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The branch is looked at outside the claim's transaction (git may be slow): a session
    that ended meanwhile must not be seated, nor announced."""
    alice = await session_caller(office, "alice")
    watcher = await session_caller(office, "watcher", branch="feature-x")
    looked = office.leadership._eligible

    async def ending_meanwhile(*args: object) -> bool:
        assert alice.session_id is not None
        await office.presence.end_session(alice.session_id)
        return await looked(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(office.leadership, "_eligible", ending_meanwhile)
    with pytest.raises(AgentpostError) as refused:
        await office.leadership.claim(alice)
    # As authentication answers for a session it no longer knows: a remote client mints
    # another on this, where `unauthenticated` would read as its key refused.
    assert (refused.value.code, refused.value.details) == (
        ErrorCode.NOT_FOUND,
        {"session": alice.session_id},
    )
    assert (await office.leadership.leader(watcher)).leader is None
    assert await announcements(office, watcher) == []


async def test_a_session_without_a_project_stands_for_no_seat_and_logs_nothing(
    office: PostOffice, caplog: pytest.LogCaptureFixture
) -> None:
    """Every `register` over HTTP by an agent with no project came with a warning in the
    service's log, though nothing was wrong: such a session has no seat to stand for."""
    alice, _key = await keyed(office, "alice")
    with caplog.at_level(logging.WARNING, logger="agentpost"):
        assert await office.leadership.claim_if_eligible(alice) is None
    assert [r.getMessage() for r in caplog.records] == []


async def test_claims_and_releases_count_against_the_send_rate_as_their_notices_reach_all(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    """Each claim and release posts a notice to every member of #<project>, and counted
    against no rate: an agent that claimed and released in a loop filled its colleagues'
    inboxes past `send_rate_per_minute` (full, they then refused direct mail). A claim that
    changes nothing posts nothing and counts nothing."""
    clock.now -= clock.now % 60  # every step below falls in one minute's window
    office = await open_office(send_rate_per_minute=3)
    alice = await session_caller(office, "alice")
    bob = await session_caller(office, "bob", branch="feature-x")
    await office.leadership.claim(alice)
    await office.leadership.claim(alice)  # the seat is alice's already
    await office.leadership.release(alice)
    await office.mailbox.send(alice, "bob", "one more send")
    err = await refused_without_change(
        office, ErrorCode.RATE_LIMITED, office.leadership.claim(alice)
    )
    assert err.retry_after_s is not None
    assert len(await announcements(office, bob)) == 2
    clock.advance(60)
    await office.leadership.claim(alice)
    await office.leadership.release(alice)
    assert len(await announcements(office, bob)) == 2


async def test_an_agent_the_owner_has_not_vouched_for_may_not_lead_until_vouched(
    open_office: OpenOffice,
) -> None:
    """A stranger that registered itself could take a free seat (on its own session's word
    that it was on main) and then delegate as the project's leader."""
    office = await open_office(open_registration=True)
    drifter, key = await self_registered(office, "drifter", project="shop", branch="main")
    assert drifter.trust is Trust.UNTRUSTED
    err = await refused_without_change(
        office, ErrorCode.FORBIDDEN, office.leadership.claim(drifter)
    )
    assert "vouch" in err.message
    assert await office.leadership.claim_if_eligible(drifter) is None
    assert (await office.leadership.leader(drifter)).leader is None
    await office.admin.vouch(await owner(office), "drifter")
    vouched = await office.keys.authenticate(key, ip=ADDRESS, session=drifter.session_id)
    assert (await office.leadership.claim(vouched)).leader == "drifter"
