"""Presence: who is at work, under which name, and when they count as gone."""

from __future__ import annotations

import subprocess
from typing import Any

import anyio
import pytest

from account_helpers import ADDRESS, keyed, owner
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.limits import QUOTED_CHARS
from agentpost.domain.models import Caller, Presence, Status
from agentpost.domain.reservations import MAX_LIVE, MAX_PATHS
from agentpost.services import PostOffice
from agentpost.services.presence import MAX_HTTP_SESSIONS, SILENT_FOR_S
from backends import (
    FakeClock,
    OpenOffice,
    disable_agent,
    hand_pid_on,
    local_context,
    refused_without_change,
    session_caller,
)
from processes import sleeping

pytestmark = pytest.mark.anyio


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


async def online(office: PostOffice, **options: Any) -> list[str]:
    return [p.name for p in await office.presence.who(**options) if p.online]


async def presence_of(office: PostOffice, name: str) -> Presence:
    (found,) = [p for p in await office.presence.who(include_offline=True) if p.name == name]
    return found


# -- names -------------------------------------------------------------------------------------


async def test_a_session_without_a_name_takes_project_and_branch(office: PostOffice) -> None:
    caller = await session_caller(office, None, project="shop", branch="feature/Login")
    assert caller.agent == "shop-feature-login"
    session = await office.presence.session(caller.session_id or "")
    assert (session.project, session.branch, session.worktree) == (
        "shop",
        "feature/Login",
        "/src/shop",
    )
    outside_git = await session_caller(office, None, project="notes", branch=None)
    assert outside_git.agent == "notes"


async def test_a_derived_name_gets_a_suffix_only_while_another_live_session_holds_it(
    office: PostOffice,
) -> None:
    first = await session_caller(office)
    second = await session_caller(office)
    third = await session_caller(office)
    assert [first.agent, second.agent, third.agent] == ["shop-main", "shop-main-2", "shop-main-3"]
    await office.presence.end_session(first.session_id or "")
    again = await session_caller(office)
    assert again.agent == "shop-main"


async def test_a_restarted_session_with_the_same_name_inherits_its_unread_mail(
    office: PostOffice,
) -> None:
    sender = await office.presence.ensure_agent("lead")
    before = await session_caller(office)
    await office.presence.end_session(before.session_id or "")
    await office.mailbox.send(sender, "shop-main", "while you were away")
    after = await session_caller(office)
    assert after.agent == "shop-main"
    assert after.session_id != before.session_id
    inbox = await office.mailbox.inbox(after)
    assert [m.body for m in inbox.messages] == ["while you were away"]


async def test_sessions_starting_at_once_each_get_a_name_of_their_own(
    office: PostOffice,
) -> None:
    names: list[str] = []

    async def start() -> None:
        names.append((await session_caller(office)).agent)

    async with anyio.create_task_group() as tg:
        for _ in range(6):
            tg.start_soon(start)
    assert sorted(names) == ["shop-main", *(f"shop-main-{n}" for n in range(2, 7))]


async def test_one_name_claimed_by_many_callers_at_once_is_one_agent(office: PostOffice) -> None:
    async with anyio.create_task_group() as tg:
        for _ in range(8):
            tg.start_soon(office.presence.ensure_agent, "popular")
    assert await office.presence.agent_names() == ["popular"]


async def test_a_session_whose_process_is_gone_frees_its_name_at_once(office: PostOffice) -> None:
    crashed = await session_caller(office, pid=dead_pid())
    assert crashed.agent == "shop-main"
    successor = await session_caller(office)
    assert successor.agent == "shop-main"  # no "-2": the holder is dead, not merely quiet


async def test_a_session_whose_process_is_gone_is_offline_at_once(office: PostOffice) -> None:
    await session_caller(office, "crashed", pid=dead_pid())
    await session_caller(office, "alive")
    assert await online(office) == ["alive"]
    gone = await presence_of(office, "crashed")
    assert not gone.online
    assert gone.sessions == 0


async def test_a_session_whose_pid_another_process_holds_now_is_ended(
    office: PostOffice,
) -> None:
    """Its process died unended (killed, crashed, the machine rebooted) and the system gave
    its pid to another process: that one runs, but is not the session's, whose reservations
    and name it kept."""
    with sleeping() as reused, sleeping() as own:
        gone = await session_caller(office, "gone", pid=reused.pid)
        kept = await session_caller(office, "kept", pid=own.pid)
        await hand_pid_on(office, gone)
        await office.presence.end_dead_local_sessions()
        assert (await office.presence.session(gone.session_id or "")).ended_at is not None
        assert (await office.presence.session(kept.session_id or "")).ended_at is None
        assert await online(office) == ["kept"]


async def test_a_session_whose_pid_another_process_holds_now_is_no_commands_session(
    office: PostOffice,
) -> None:
    """A command acts as the session its parent's other child opened: not as one whose pid
    merely came round to that child (after a reboot, an old row can name it)."""
    with sleeping() as server, sleeping() as command:
        caller = await session_caller(office, "alice", pid=server.pid)
        found = await office.presence.session_of_process(command.pid)
        assert found is not None
        assert found.id == caller.session_id
        await hand_pid_on(office, caller)
        assert await office.presence.session_of_process(command.pid) is None


async def test_a_session_disabling_ended_is_a_commands_session_when_asked_for(
    office: PostOffice, clock: FakeClock
) -> None:
    """Its `agentpost mcp` runs on after the owner disabled its agent: a command beside it is
    that agent's (for the command line to refuse), not the owner's; one that ended before is
    no one's."""
    with sleeping() as server, sleeping() as command, sleeping() as earlier:
        zed = await session_caller(office, "zed", pid=server.pid)
        await office.presence.end_session(
            (await session_caller(office, "zed", pid=earlier.pid)).session_id or ""
        )
        clock.advance(1)
        await office.admin.disable_agent(await owner(office), "zed")
        assert await office.presence.session_of_process(command.pid) is None
        found = await office.presence.session_of_process(command.pid, owner_ended_too=True)
        assert found is not None
        assert (found.agent, found.id) == ("zed", zed.session_id)


async def test_a_session_disabling_ended_stays_a_commands_session_once_the_agent_is_enabled(
    office: PostOffice, clock: FakeClock
) -> None:
    """Enabling the agent opens none of its ended sessions again: while the old `agentpost mcp`
    runs, a command beside it is that session's (for the command line to refuse as its calls
    are), never the owner's. One its own process ended is no one's, and once the old process
    exits, neither is the one disabling ended."""
    with sleeping() as server, sleeping() as command, sleeping() as closed:
        zed = await session_caller(office, "zed", pid=server.pid)
        await office.presence.end_session(  # as a process closing ends its own
            (await session_caller(office, "zed", pid=closed.pid)).session_id or ""
        )
        clock.advance(1)
        admin = await owner(office)
        await office.admin.disable_agent(admin, "zed")
        await office.admin.enable_agent(admin, "zed")
        assert await office.presence.session_of_process(command.pid) is None
        found = await office.presence.session_of_process(command.pid, owner_ended_too=True)
        assert found is not None
        assert (found.agent, found.id) == ("zed", zed.session_id)
        server.kill()
        server.wait()
        assert await office.presence.session_of_process(command.pid, owner_ended_too=True) is None


async def test_a_name_held_by_a_live_session_cannot_be_taken_by_another(
    office: PostOffice,
) -> None:
    holder = await session_caller(office, "lead")
    other = await session_caller(office, "dev")
    await refused_without_change(
        office, ErrorCode.CONFLICT, office.presence.rename_session(other, "lead")
    )
    await office.presence.end_session(holder.session_id or "")
    renamed = await office.presence.rename_session(other, "lead")
    assert (renamed.agent, renamed.session_id) == ("lead", other.session_id)
    assert (await office.presence.session(other.session_id or "")).agent == "lead"


async def test_a_session_that_takes_another_name_keeps_the_claims_it_held(
    office: PostOffice,
) -> None:
    """Its old name has no session left to keep them alive: they would lapse at once, with no
    word to the session, and another agent could take the files it is editing."""
    dev = await session_caller(office, "dev")
    other = await session_caller(office, "other")
    await office.reservations.reserve(dev, ["src/**"])
    renamed = await office.presence.rename_session(dev, "parser")
    [held] = await office.reservations.reservations(renamed)
    assert (held.agent, held.path) == ("parser", "src/**")
    taken = await office.reservations.reserve(other, ["src/app.py"])
    assert (taken.granted, [c.holder for c in taken.conflicts]) == ([], ["parser"])


async def test_claims_stay_with_a_name_another_of_its_sessions_still_holds(
    office: PostOffice,
) -> None:
    first = await session_caller(office, "dev")
    second = await session_caller(office, "dev")
    await office.reservations.reserve(first, ["src/**"])
    await office.presence.rename_session(second, "parser")
    [held] = await office.reservations.reservations(first)
    assert (held.agent, held.path) == ("dev", "src/**")


async def test_renaming_to_a_name_held_by_a_dead_process_succeeds(office: PostOffice) -> None:
    await session_caller(office, "lead", pid=dead_pid())
    other = await session_caller(office, "dev")
    assert (await office.presence.rename_session(other, "lead")).agent == "lead"


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("system", ErrorCode.FORBIDDEN),
        ("agentpost", ErrorCode.FORBIDDEN),
        ("Not A Name", ErrorCode.INVALID_ARGUMENT),
        ("trailing\n", ErrorCode.INVALID_ARGUMENT),
    ],
)
async def test_reserved_and_malformed_identities_are_refused(
    office: PostOffice, name: str, code: ErrorCode
) -> None:
    await refused_without_change(office, code, office.presence.ensure_agent(name))
    await refused_without_change(
        office, code, office.presence.open_local_session(local_context(), name=name)
    )


async def test_the_owner_is_an_identity_like_any_other(office: PostOffice) -> None:
    owner = await office.presence.ensure_agent("owner")
    assert owner == Caller("owner")
    assert await office.presence.agent_names() == ["owner"]


async def test_a_disabled_agent_cannot_come_back(office: PostOffice) -> None:
    await office.presence.ensure_agent("retired")
    await disable_agent(office.store, "retired")
    await refused_without_change(office, ErrorCode.GONE, office.presence.ensure_agent("retired"))
    await refused_without_change(
        office,
        ErrorCode.GONE,
        office.presence.open_local_session(local_context(), name="retired"),
    )


async def test_a_derived_name_skips_a_disabled_agent(office: PostOffice) -> None:
    await office.presence.ensure_agent("shop-main")
    await disable_agent(office.store, "shop-main")
    assert (await session_caller(office)).agent == "shop-main-2"


async def test_a_derived_name_skips_an_agent_a_stranger_registered_under_it(
    open_office: OpenOffice,
) -> None:
    """With registration open, anyone may take `shop-main` first: a session that only derived
    the name became that agent, and the stranger's key read its mail and spoke as it."""
    office = await open_office(open_registration=True)
    issued = await office.keys.self_register("shop-main", project="shop", ip=ADDRESS)
    local = await session_caller(office)
    assert local.agent == "shop-main-2"
    await office.mailbox.send(await office.presence.ensure_agent("owner"), local.agent, "plan")
    stranger = await office.keys.authenticate(issued.key, ip=ADDRESS)
    assert (await office.mailbox.inbox(stranger, unread_only=False)).messages == []


async def test_a_derived_name_skips_a_stranger_only_while_one_holds_a_key_unvouched(
    open_office: OpenOffice,
) -> None:
    """A local agent the owner stopped vouching for has no key for anyone to read its mail
    with: its sessions keep their name, and their words stay untrusted, as the vouch says."""
    office = await open_office(open_registration=True)
    admin = await owner(office)
    first = await session_caller(office)
    await office.presence.end_session(first.session_id or "")
    await office.admin.unvouch(admin, "shop-main")
    assert (await session_caller(office)).agent == "shop-main"

    issued = await office.keys.self_register("shop-dev", project="shop", ip=ADDRESS)
    await office.keys.revoke(admin, issued.id)  # nobody outside reads its mail any more
    assert (await session_caller(office, branch="dev")).agent == "shop-dev"


async def test_with_a_roster_a_session_may_only_take_a_name_on_it(
    open_office: OpenOffice,
) -> None:
    office = await open_office(agents=["shop-main", "lead"])
    assert (await session_caller(office)).agent == "shop-main"
    await refused_without_change(
        office,
        ErrorCode.FORBIDDEN,
        office.presence.open_local_session(local_context("blog")),
    )
    await refused_without_change(
        office,
        ErrorCode.FORBIDDEN,
        office.presence.open_local_session(local_context(), name="intruder"),
    )


async def test_with_a_roster_a_second_session_is_told_why_its_derived_name_is_refused(
    open_office: OpenOffice,
) -> None:
    """The person never chose `shop-main-2`: the refusal says that `shop-main` is in use
    and how to name the session instead."""
    office = await open_office(agents=["shop-main", "lead"])
    await session_caller(office)
    refused = await refused_without_change(
        office, ErrorCode.FORBIDDEN, office.presence.open_local_session(local_context())
    )
    assert "'shop-main' is in use" in refused.message, refused.message
    assert "AGENTPOST_AGENT" in refused.message, refused.message


# -- who ---------------------------------------------------------------------------------------


async def test_who_shows_each_online_agent_once_with_where_and_what(
    office: PostOffice, clock: FakeClock
) -> None:
    lead = await session_caller(office, "lead", project="shop", branch="main")
    await session_caller(office, "lead", project="shop", branch="main")  # a second window
    await session_caller(office, "dev", project="shop", branch="dev")
    await office.presence.ensure_agent("never-connected")
    listed = await office.presence.who()
    assert [p.name for p in listed] == ["dev", "lead"]  # once each, though heartbeats tie
    clock.advance(5)
    await office.presence.update_profile(
        lead, description="plans", objective="ship v2", status="blocked"
    )
    found = {p.name: p for p in await office.presence.who()}
    assert found["lead"].sessions == 2
    assert (found["dev"].project, found["dev"].branch, found["dev"].worktree) == (
        "shop",
        "dev",
        "/src/shop",
    )
    assert found["lead"].description == "plans"
    # the freshest session speaks for the agent
    assert (found["lead"].objective, found["lead"].status) == ("ship v2", Status.BLOCKED)
    assert (found["lead"].last_seen_s, found["dev"].last_seen_s) == (0, 5)


async def test_heartbeats_never_swap_which_of_an_agents_sessions_who_shows(
    office: PostOffice, clock: FakeClock
) -> None:
    """Two windows of one agent both heartbeat in the background: the one that last said what
    it is doing (else the newest) speaks for the agent, whichever beat last. It flipped
    between the two with every heartbeat."""
    first = await session_caller(office, "lead", branch="main")
    await office.presence.update_profile(first, objective="ship v2", status="blocked")
    clock.advance(1)
    second = await session_caller(office, "lead", branch="fix/parser")
    shown = []
    for beating in (first, second, first):
        clock.advance(5)
        await office.presence.heartbeat(beating.session_id or "")
        found = await presence_of(office, "lead")
        shown.append((found.branch, found.objective, found.sessions))
    assert shown == [("fix/parser", "", 2)] * 3  # the newest, not the freshest heartbeat
    clock.advance(5)
    await office.presence.update_profile(first, objective="ship v3")
    for beating in (second, first, second):
        clock.advance(5)
        await office.presence.heartbeat(beating.session_id or "")
        found = await presence_of(office, "lead")
        assert (found.branch, found.objective, found.status) == ("main", "ship v3", Status.BLOCKED)


async def test_who_can_include_offline_agents(office: PostOffice) -> None:
    await session_caller(office, "here")
    await office.presence.ensure_agent("never-connected")
    everyone = {p.name: p for p in await office.presence.who(include_offline=True)}
    assert sorted(everyone) == ["here", "never-connected"]
    assert not everyone["never-connected"].online
    assert everyone["never-connected"].last_seen_s is None


async def test_who_narrows_to_a_project(office: PostOffice) -> None:
    await session_caller(office, "lead", project="shop")
    await session_caller(office, "writer", project="blog")
    assert await online(office, project="shop") == ["lead"]
    assert await online(office, project="blog") == ["writer"]
    assert await online(office, project="nothing") == []


@pytest.mark.parametrize("project", ["Bad Name", ""])
async def test_who_refuses_a_project_no_project_could_be_named(
    office: PostOffice, project: str
) -> None:
    await session_caller(office, "lead", project="shop")
    await refused_without_change(
        office, ErrorCode.INVALID_ARGUMENT, office.presence.who(project=project)
    )


async def test_who_leaves_out_disabled_agents(office: PostOffice) -> None:
    await session_caller(office, "lead")
    await session_caller(office, "retired")
    await disable_agent(office.store, "retired")
    assert await online(office, include_offline=True) == ["lead"]


async def test_without_a_heartbeat_a_session_goes_offline_after_45_seconds(
    office: PostOffice, clock: FakeClock
) -> None:
    await session_caller(office, "quiet")
    assert office.settings.heartbeat_s == 15
    clock.advance(44.9)
    assert await online(office) == ["quiet"]
    clock.advance(0.1)
    assert await online(office) == []
    assert (await presence_of(office, "quiet")).last_seen_s == 45


async def test_a_keys_own_session_shows_no_status_its_agent_never_said(
    office: PostOffice, clock: FakeClock
) -> None:
    """The owner's commands over HTTP each open its admin key's own session, stored `active`
    by its opening: the owner, long gone, showed as active."""
    await owner(office)
    writer, _ = await keyed(office, "writer")
    await office.presence.update_profile(writer, status="blocked", objective="the parser")
    clock.advance(office.settings.offline_after_s + 60)
    gone = await presence_of(office, "owner")
    assert (gone.online, gone.status, gone.objective) == (False, Status.IDLE, "")
    assert gone.last_seen_s == office.settings.offline_after_s + 60
    said = await presence_of(office, "writer")  # what it said stays what it was doing
    assert (said.online, said.status, said.objective) == (False, Status.BLOCKED, "the parser")
    back = await owner(office)
    assert back.session_id is not None
    assert (await presence_of(office, "owner")).status is Status.IDLE


async def test_a_heartbeat_keeps_a_session_online(office: PostOffice, clock: FakeClock) -> None:
    caller = await session_caller(office, "steady")
    for _ in range(10):
        clock.advance(15)
        await office.presence.heartbeat(caller.session_id or "")
    assert await online(office) == ["steady"]


async def test_offline_after_is_configurable(open_office: OpenOffice, clock: FakeClock) -> None:
    office = await open_office(offline_after_s=5, heartbeat_s=1)
    await session_caller(office, "brief")
    clock.advance(5)
    assert await online(office) == []


async def test_an_offline_name_is_free_for_a_derived_session(
    office: PostOffice, clock: FakeClock
) -> None:
    await session_caller(office)
    clock.advance(45)
    assert (await session_caller(office)).agent == "shop-main"


async def test_an_ended_session_is_offline_at_once(office: PostOffice) -> None:
    caller = await session_caller(office, "leaving")
    await office.presence.end_session(caller.session_id or "")
    assert await online(office) == []
    assert (await office.presence.session(caller.session_id or "")).ended_at is not None


async def test_an_ended_session_never_speaks_for_an_agent_still_online(
    office: PostOffice, clock: FakeClock
) -> None:
    """The ended session is the freshest, yet the live one says where the agent is at work."""
    live = await session_caller(office, "lead", project="shop", branch="main")
    await office.presence.update_profile(live, objective="ship v2")
    clock.advance(5)
    done = await session_caller(office, "lead", project="blog", branch="old-post")
    await office.presence.update_profile(done, objective="finished", status="done")
    await office.presence.end_session(done.session_id or "")
    found = await presence_of(office, "lead")
    assert (found.online, found.sessions) == (True, 1)
    assert (found.project, found.branch, found.objective) == ("shop", "main", "ship v2")
    assert found.status is not Status.DONE


# -- profile -----------------------------------------------------------------------------------


async def test_an_unknown_status_is_refused(office: PostOffice) -> None:
    caller = await session_caller(office, "lead")
    error = await refused_without_change(
        office, ErrorCode.INVALID_ARGUMENT, office.presence.update_profile(caller, status="busy")
    )
    assert "active, idle, blocked, done" in error.message


async def test_an_overlong_objective_or_description_is_too_large_saying_by_how_much(
    office: PostOffice,
) -> None:
    """As an overlong subject or body says it: the limit and the size, in `details`."""
    caller = await session_caller(office, "lead")
    for field in ("objective", "description"):
        refused = await refused_without_change(
            office,
            ErrorCode.TOO_LARGE,
            office.presence.update_profile(caller, **{field: "x" * 2001}),
        )
        assert refused.details == {"limit": 2000, "size": 2001}
        assert refused.message == f"{field} is 2001 characters, over the limit of 2000 characters"


async def test_a_sessions_host_and_branch_are_one_line_each(office: PostOffice) -> None:
    """Each is shown on one line of `who` and of a leader's record: a line break in one would
    forge the lines after it."""
    alice = await session_caller(office, "alice")
    for fields in ({"host": "box\nbob online"}, {"host": "box", "branch": "main\rx"}):
        with pytest.raises(AgentpostError) as refused:
            await office.presence.open_http_session(alice, **fields)
        assert refused.value.code is ErrorCode.INVALID_ARGUMENT
        assert refused.value.message == f"{list(fields)[-1]} must be one line"
    await refused_without_change(
        office,
        ErrorCode.INVALID_ARGUMENT,
        office.presence.heartbeat_of(alice, alice.session_id or "", branch="a\nb"),
    )


async def test_asking_for_an_unknown_session_is_not_found(office: PostOffice) -> None:
    with pytest.raises(AgentpostError) as caught:
        await office.presence.session("s_unknown")
    assert caught.value.code is ErrorCode.NOT_FOUND


async def test_a_session_can_never_take_the_owners_name(office: PostOffice) -> None:
    await refused_without_change(
        office,
        ErrorCode.FORBIDDEN,
        office.presence.open_local_session(local_context(), name="owner"),
    )
    alice = await session_caller(office, "alice")
    await refused_without_change(
        office, ErrorCode.FORBIDDEN, office.presence.rename_session(alice, "owner")
    )
    assert (await office.presence.ensure_agent("owner")).agent == "owner"  # the CLI may


async def test_a_derived_name_that_is_a_reserved_word_takes_a_suffix(office: PostOffice) -> None:
    session = await office.presence.open_local_session(local_context("owner", None))
    assert session.agent == "owner-2"


async def test_register_checks_everything_before_it_renames(office: PostOffice) -> None:
    alice = await session_caller(office, "alice")
    refused = office.presence.register(alice, name="alicia", description="x" * 2001)
    await refused_without_change(office, ErrorCode.TOO_LARGE, refused)
    renamed = await office.presence.register(alice, name="alicia", objective="review")
    session = await office.presence.session(alice.session_id or "")
    assert (renamed.agent, session.agent, session.objective) == ("alicia", "alicia", "review")


# -- an open wait or stream is a heartbeat ----------------------------------------------------


async def test_a_long_wait_keeps_its_session_online(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    office = await open_office(heartbeat_s=0.05)
    alice = await session_caller(office, "alice")
    later = clock.advance(1000)  # long past offline_after_s, unless the wait beats
    found = await office.mailbox.wait(alice, timeout_s=0.3)
    assert found.timed_out
    assert (await office.presence.session(alice.session_id or "")).heartbeat_at == later
    assert [p.name for p in await office.presence.who()] == ["alice"]


async def test_an_open_event_stream_keeps_its_session_online(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    office = await open_office(heartbeat_s=0.05)
    alice = await session_caller(office, "alice")
    later = clock.advance(1000)
    with anyio.move_on_after(0.3):
        async for _ in office.events.follow(alice, 0, heartbeat_s=0.05):
            pass
    assert (await office.presence.session(alice.session_id or "")).heartbeat_at == later


async def test_many_waits_keep_every_session_online_with_batched_heartbeats(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    office = await open_office(heartbeat_s=0.05)
    callers = [await session_caller(office, f"agent-{n}") for n in range(20)]
    later = clock.advance(1000)
    # Forty beats' time: on a busy PostgreSQL 0.4 s once passed before every batch had landed.
    async with anyio.create_task_group() as group:
        for caller in callers:
            group.start_soon(lambda c=caller: office.mailbox.wait(c, timeout_s=2))
    for caller in callers:
        assert (await office.presence.session(caller.session_id or "")).heartbeat_at == later


async def test_last_seen_is_the_freshest_heartbeat_of_any_session_as_the_directory_says(
    office: PostOffice, clock: FakeClock
) -> None:
    """The live session says what the agent is doing; a later one that has ended still
    says when it was last seen."""
    lead = await session_caller(office, "lead", branch="main")
    clock.advance(10)
    later = await office.presence.open_http_session(Caller("lead", None), host="h", branch="fix")
    clock.advance(1)
    await office.presence.end_session(later.id)

    seen = await presence_of(office, "lead")
    assert (seen.online, seen.branch, seen.last_seen_s) == (True, "main", 1.0)
    [listed] = await office.directory.search(lead, "lead")
    assert listed.last_seen_s == seen.last_seen_s


# -- sessions over HTTP: how many one agent keeps ------------------------------------------------


async def http_sessions(office: PostOffice, caller: Caller, count: int) -> list[str]:
    return [
        (await office.presence.open_http_session(caller, host=f"h{n}")).id for n in range(count)
    ]


async def still_there(office: PostOffice, session_ids: list[str]) -> list[str]:
    kept = []
    for session_id in session_ids:
        try:
            await office.presence.session(session_id)
            kept.append(session_id)
        except AgentpostError:
            pass
    return kept


async def test_a_session_minted_past_the_limit_takes_the_place_of_the_longest_ended_one(
    office: PostOffice, clock: FakeClock
) -> None:
    alice = await office.presence.ensure_agent("alice")
    minted = await http_sessions(office, alice, MAX_HTTP_SESSIONS)
    clock.advance(SILENT_FOR_S)  # #0 is silent long enough too, but ended ones go first
    for session_id in minted[1:]:
        await office.presence.heartbeat(session_id)
    for session_id in (minted[7], minted[3]):  # #7 ended first: it goes first
        clock.advance(1)
        await office.presence.end_session(session_id)
    [newest] = await http_sessions(office, alice, 1)
    assert await still_there(office, [*minted, newest]) == [
        s for s in [*minted, newest] if s != minted[7]
    ]


async def test_a_session_silent_for_a_day_makes_room_and_one_silent_for_less_does_not(
    office: PostOffice, clock: FakeClock
) -> None:
    """A laptop asleep for an hour still finds its session; one gone for a day does not."""
    alice = await office.presence.ensure_agent("alice")
    minted = await http_sessions(office, alice, MAX_HTTP_SESSIONS)
    clock.advance(SILENT_FOR_S - 1)
    for session_id in minted[1:]:
        await office.presence.heartbeat(session_id)
    await refused_without_change(
        office, ErrorCode.CONFLICT, office.presence.open_http_session(alice, host="one-more")
    )
    clock.advance(1)
    [newest] = await http_sessions(office, alice, 1)
    assert await still_there(office, [*minted, newest]) == [*minted[1:], newest]


async def test_minting_while_every_session_over_http_is_in_use_is_refused_and_changes_nothing(
    office: PostOffice,
) -> None:
    alice = await office.presence.ensure_agent("alice")
    await http_sessions(office, alice, MAX_HTTP_SESSIONS)
    refused = await refused_without_change(
        office, ErrorCode.CONFLICT, office.presence.open_http_session(alice, host="one-more")
    )
    assert refused.details == {"limit": MAX_HTTP_SESSIONS}
    bob = await office.presence.ensure_agent("bob")
    assert await http_sessions(office, bob, 1)  # each agent's own limit


# -- sessions that ended long ago --------------------------------------------------------------


async def test_the_sweep_forgets_sessions_ended_past_the_retention_but_each_agents_last(
    office: PostOffice, clock: FakeClock
) -> None:
    """Every `agentpost mcp` start leaves a session; ended, they piled up for ever, and `who`
    looks at all of them (200,000 made it take seconds). Once ended for `retention_days` they
    go, but for each agent's last one, which still says when it was last seen."""
    old = [await session_caller(office, name) for name in ("alice", "alice", "bob")]
    for caller in old:
        await office.presence.end_session(caller.session_id or "")
    silent = await session_caller(office, "carol")  # never ended: its process was killed
    clock.advance(office.settings.retention_days * 86_400 + 1)
    recent = await session_caller(office, "alice")
    await office.presence.end_session(recent.session_id or "")
    await office.mailbox.sweep()
    kept = await still_there(office, [c.session_id or "" for c in [*old, silent, recent]])
    assert kept == [old[2].session_id, silent.session_id, recent.session_id]
    assert (await presence_of(office, "bob")).last_seen_s is not None


async def test_the_sweep_keeps_a_silent_local_session_whose_process_may_be_asleep(
    office: PostOffice, clock: FakeClock
) -> None:
    """A laptop closed for longer than `retention_days` (one day, set low) wakes its
    `agentpost mcp`, which beats the session it holds: deleted, it would answer for nobody.
    An HTTP session silent as long goes: its client mints another."""
    asleep = await session_caller(office, "alice")
    over_http, _ = await keyed(office, "bob")
    minted = await office.presence.open_http_session(over_http, host="build-7")
    clock.advance(office.settings.retention_days * 86_400 + 1)
    await session_caller(office, "alice")  # a later session of both: neither is the last
    await office.presence.open_http_session(over_http, host="build-8")
    await office.mailbox.sweep()
    assert await still_there(office, [asleep.session_id or "", minted.id]) == [asleep.session_id]
    await office.presence.heartbeat(asleep.session_id or "")  # it wakes
    assert (await office.presence.session(asleep.session_id or "")).heartbeat_at == clock.now


async def test_a_rename_that_would_hold_more_than_the_cap_of_claims_changes_nothing(
    office: PostOffice,
) -> None:
    """The name's own claims, still unreleased, come alive again with the session that takes
    it: with the session's own taken along, it would hold more than an agent may."""
    parser = await session_caller(office, "parser")
    await office.reservations.reserve(parser, [f"lib/{n}.py" for n in range(MAX_PATHS)])
    await office.presence.end_session(parser.session_id or "")
    dev = await session_caller(office, "dev")
    mine = [f"src/{n}.py" for n in range(MAX_PATHS)]
    await office.reservations.reserve(dev, mine)
    await office.reservations.reserve(dev, ["docs/index.md"])
    with pytest.raises(AgentpostError) as refused:
        await office.presence.rename_session(dev, "parser")
    assert refused.value.code is ErrorCode.CONFLICT
    assert refused.value.details == {"limit": MAX_LIVE}
    assert "release some first" in refused.value.message
    assert (await office.presence.session(dev.session_id or "")).agent == "dev"
    held = await office.reservations.reservations(dev)  # the project's, whoever holds them
    assert sorted(c.path for c in held if c.agent == "dev") == sorted([*mine, "docs/index.md"])
    assert len([c for c in held if c.agent == "parser"]) == MAX_PATHS


async def test_an_unknown_session_is_named_in_its_refusal_by_at_most_40_characters(
    office: PostOffice,
) -> None:
    dev = await session_caller(office, "dev")
    with pytest.raises(AgentpostError) as refused:
        await office.presence.end_session_of(dev, "s_" + "x" * 100_000)
    assert refused.value.code is ErrorCode.NOT_FOUND
    assert refused.value.details == {"session": "s_" + "x" * (QUOTED_CHARS - 2) + "…"}
    assert len(refused.value.message) < 100
