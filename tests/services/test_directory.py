"""The directory: searching the address book, one's own profile, blocks and usage."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from account_helpers import ADDRESS, keyed, keyed_agents, owner
from agentpost.domain.accounts import Usage
from agentpost.domain.errors import ErrorCode
from agentpost.domain.models import Caller
from agentpost.services import PostOffice
from backends import FakeClock, OpenOffice, refused_without_change, session_caller

pytestmark = pytest.mark.anyio


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


async def names(
    office: PostOffice, caller: Caller, query: str | None = None, **options: Any
) -> list[str]:
    return [a.name for a in await office.directory.search(caller, query, **options)]


@pytest.fixture
async def staff(office: PostOffice) -> Caller:
    """A few agents with profiles; returns one of them to search as."""
    reader, _ = await keyed(office, "reader")
    await keyed(office, "alice", description="Reviews Python code", project="shop")
    await keyed(office, "bob", description="Front end", project="blog", capabilities=["css"])
    await keyed(
        office, "carol", description="100% test coverage", capabilities=["Python", "pytest"]
    )
    return reader


# -- search ------------------------------------------------------------------------------------


async def test_search_matches_name_description_project_and_capabilities_in_any_case(
    office: PostOffice, staff: Caller
) -> None:
    assert await names(office, staff, "python") == ["alice", "carol"]
    assert await names(office, staff, "BLOG") == ["bob"]
    assert await names(office, staff, "css") == ["bob"]
    assert await names(office, staff, "car") == ["carol"]


async def test_every_word_of_a_query_must_match(office: PostOffice, staff: Caller) -> None:
    assert await names(office, staff, "python shop") == ["alice"]
    assert await names(office, staff, "python blog") == []


async def test_wildcards_in_a_query_are_taken_literally(office: PostOffice, staff: Caller) -> None:
    assert await names(office, staff, "100%") == ["carol"]
    assert await names(office, staff, "%") == ["carol"]
    assert await names(office, staff, "_") == []


async def test_search_folds_the_case_of_any_letter_not_only_ascii(
    office: PostOffice, staff: Caller
) -> None:
    await keyed(office, "dora", description="Backend ÉCOLE", capabilities=["café-review"])
    assert await names(office, staff, "école") == ["dora"]
    assert await names(office, staff, "CAFÉ") == ["dora"]


async def test_search_matches_words_not_how_capabilities_are_stored(
    office: PostOffice, staff: Caller
) -> None:
    """Capabilities are kept as a JSON list: its punctuation is no word of anyone's."""
    for punctuation in ("[", ",", '"', "]"):
        assert await names(office, staff, punctuation) == [], punctuation
    assert await names(office, staff, "python pytest") == ["carol"]


async def test_search_pages_after_matching(office: PostOffice, staff: Caller) -> None:
    assert await names(office, staff, "python", limit=1) == ["alice"]


async def test_without_a_query_the_directory_lists_everyone_enabled_by_name(
    office: PostOffice, staff: Caller
) -> None:
    admin = await owner(office)
    await office.admin.disable_agent(admin, "bob")
    assert await names(office, staff) == ["alice", "carol", "owner", "reader"]


async def test_search_narrows_to_a_project_and_pages(office: PostOffice, staff: Caller) -> None:
    assert await names(office, staff, project="shop") == ["alice"]
    assert await names(office, staff, limit=2) == ["alice", "bob"]


async def test_search_says_who_is_online_and_when_they_were_last_seen(
    office: PostOffice, clock: FakeClock
) -> None:
    reader, _ = await keyed(office, "reader")
    await keyed(office, "quiet")
    await office.presence.ensure_agent("never")  # no session ever
    clock.advance(60)
    await session_caller(office, "local", project="shop")
    found = {a.name: (a.online, a.last_seen_s) for a in await office.directory.search(reader)}
    assert found["local"] == (True, 0.0)
    assert found["quiet"] == (False, 60.0)
    assert found["never"] == (False, None)


async def test_a_local_session_whose_process_is_gone_is_offline_at_once(
    office: PostOffice,
) -> None:
    reader, _ = await keyed(office, "reader")
    await session_caller(office, "local", project="shop", pid=dead_pid())
    (local,) = await office.directory.search(reader, "local")
    assert local.online is False


@pytest.mark.parametrize(
    "options",
    [
        {"query": " ".join(["w"] * 11)},
        {"project": "Not A Project"},
        {"limit": 0},
        {"limit": 501},
    ],
)
async def test_a_bad_search_is_an_invalid_argument(
    office: PostOffice, options: dict[str, Any]
) -> None:
    (reader,) = await keyed_agents(office, "reader")
    await refused_without_change(
        office, ErrorCode.INVALID_ARGUMENT, office.directory.search(reader, **options)
    )


@pytest.mark.parametrize("query", ["x" * 101, "x " * 100 + "x"])
async def test_a_search_over_its_length_is_too_large_as_any_text_over_its_limit(
    office: PostOffice, query: str
) -> None:
    """It was `invalid_argument`, where a search of the mail over its length, a subject or a
    body over theirs, is `too_large`."""
    (reader,) = await keyed_agents(office, "reader")
    await refused_without_change(
        office, ErrorCode.TOO_LARGE, office.directory.search(reader, query)
    )


# -- one's own profile -------------------------------------------------------------------------


async def test_an_agent_reads_and_changes_its_own_profile(office: PostOffice) -> None:
    alice, _ = await keyed(office, "alice", description="new here")
    me = await office.directory.me(alice)
    assert (me.name, me.description, me.project, me.capabilities) == ("alice", "new here", None, [])
    changed = await office.directory.update_profile(
        alice, project="shop", capabilities=[" python ", "review", "python"]
    )
    assert (changed.description, changed.project, changed.capabilities) == (
        "new here",
        "shop",
        ["python", "review"],
    )
    assert await office.directory.me(alice) == changed
    cleared = await office.directory.update_profile(alice, description="", project="")
    assert (cleared.description, cleared.project) == ("", None)


async def test_a_new_project_moves_the_agent_into_its_channel(office: PostOffice) -> None:
    alice, bob = await keyed_agents(office, "alice", "bob")
    await office.directory.update_profile(alice, project="shop")
    await office.directory.update_profile(bob, project="shop")
    sent = await office.mailbox.send(alice, "#shop", "standup")
    assert sent.to == ["bob"]


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"description": "d" * 2001}, ErrorCode.TOO_LARGE),
        ({"project": "Shop Front"}, ErrorCode.INVALID_ARGUMENT),
        ({"capabilities": ["line\nbreak"]}, ErrorCode.INVALID_ARGUMENT),
        ({"capabilities": [3]}, ErrorCode.INVALID_ARGUMENT),
    ],
)
async def test_a_bad_profile_change_is_refused(
    office: PostOffice, changes: dict[str, Any], code: ErrorCode
) -> None:
    (alice,) = await keyed_agents(office, "alice")
    await refused_without_change(office, code, office.directory.update_profile(alice, **changes))


async def test_a_profile_change_may_say_what_the_session_is_doing(office: PostOffice) -> None:
    (alice,) = await keyed_agents(office, "alice")
    changed = await office.directory.update_profile(
        alice, project="shop", status="blocked", objective="waiting for review"
    )
    assert changed.project == "shop"
    (found,) = [p for p in await office.presence.who() if p.name == "alice"]
    assert (found.status.value, found.objective) == ("blocked", "waiting for review")


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"status": "done", "objective": "new", "description": "d" * 2001}, ErrorCode.TOO_LARGE),
        (
            {"status": "done", "objective": "new", "project": "Shop Front"},
            ErrorCode.INVALID_ARGUMENT,
        ),
        ({"status": "busy", "description": "fine", "project": "shop"}, ErrorCode.INVALID_ARGUMENT),
        ({"objective": "o" * 2001, "capabilities": ["python"]}, ErrorCode.TOO_LARGE),
    ],
)
async def test_a_profile_change_is_refused_whole_session_part_included(
    office: PostOffice, changes: dict[str, Any], code: ErrorCode
) -> None:
    (alice,) = await keyed_agents(office, "alice")
    await refused_without_change(office, code, office.directory.update_profile(alice, **changes))


# -- blocks ------------------------------------------------------------------------------------


async def test_an_agent_blocks_and_unblocks_senders_of_its_own(office: PostOffice) -> None:
    alice, _bob, _carol = await keyed_agents(office, "alice", "bob", "carol")
    assert await office.directory.block(alice, "carol") == ["carol"]
    assert await office.directory.block(alice, "bob") == ["bob", "carol"]
    assert await office.directory.block(alice, "bob") == ["bob", "carol"]  # once is enough
    assert await office.directory.unblock(alice, "carol") == ["bob"]
    assert await office.directory.unblock(alice, "carol") == ["bob"]
    assert await office.directory.blocked(alice) == ["bob"]
    entries = await office.admin.audit_log(await owner(office), actor="alice")
    assert [(e.action, e.detail["sender"]) for e in entries] == [
        ("block.removed", "carol"),
        ("block.added", "bob"),
        ("block.added", "carol"),
    ]


@pytest.mark.parametrize(
    ("agent", "code"),
    [
        ("alice", ErrorCode.INVALID_ARGUMENT),
        ("nobody", ErrorCode.NOT_FOUND),
        ("Bad Name", ErrorCode.INVALID_ARGUMENT),
        ("owner", ErrorCode.FORBIDDEN),
        ("system", ErrorCode.FORBIDDEN),
        ("agentpost", ErrorCode.FORBIDDEN),
    ],
)
async def test_an_agent_cannot_block_itself_nobody_the_owner_or_the_post_office(
    office: PostOffice, agent: str, code: ErrorCode
) -> None:
    (alice,) = await keyed_agents(office, "alice")
    await refused_without_change(office, code, office.directory.block(alice, agent))


async def test_blocks_and_unblocks_count_against_the_send_rate_as_each_is_audited(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    """Each block or unblock that changes something writes an audit row, which no sweep
    purges: counted against no rate, an agent that blocked and unblocked in a loop grew the
    store without end. One that changes nothing writes nothing and counts nothing."""
    clock.now -= clock.now % 60  # every step below falls in one minute's window
    office = await open_office(send_rate_per_minute=3)
    alice, _bob = await keyed_agents(office, "alice", "bob")
    await office.directory.block(alice, "bob")
    await office.directory.block(alice, "bob")  # blocked already
    await office.directory.unblock(alice, "bob")
    await office.mailbox.send(alice, "bob", "one more send")
    err = await refused_without_change(
        office, ErrorCode.RATE_LIMITED, office.directory.block(alice, "bob")
    )
    assert err.retry_after_s is not None
    assert await office.directory.unblock(alice, "bob") == []  # changes nothing: allowed
    clock.advance(60)
    assert await office.directory.block(alice, "bob") == ["bob"]


async def test_blocks_are_each_agents_own(office: PostOffice) -> None:
    alice, bob, _carol = await keyed_agents(office, "alice", "bob", "carol")
    await office.directory.block(alice, "carol")
    assert await office.directory.blocked(bob) == []


# -- usage -------------------------------------------------------------------------------------


async def test_an_agent_sees_its_own_usage_and_limits(office: PostOffice) -> None:
    admin = await owner(office)
    alice, bob = await keyed_agents(office, "alice", "bob")
    await office.admin.set_limits(admin, "alice", send_rate_per_minute=10, max_unacked=None)
    await office.mailbox.send(alice, "bob", "one")
    await office.mailbox.send(bob, "alice", "two")
    assert await office.directory.usage(alice) == Usage(
        "alice", 1, 1, 1, 1, 1, 10, 1000, 100, 200, own_limits=["send_rate_per_minute"]
    )


async def test_a_capability_stored_with_half_a_surrogate_pair_is_left_out_not_fatal(
    office: PostOffice,
) -> None:
    """Earlier versions stored `\\ud800` escaped: the directory then failed for everyone."""
    from sqlalchemy import text

    alice = await office.presence.ensure_agent("alice")
    await office.store.write(
        lambda conn: conn.execute(
            text("UPDATE agents SET capabilities = :caps WHERE name = 'alice'"),
            {"caps": '["python", "\\ud800"]'},
        )
    )
    (found,) = [a for a in await office.directory.search(alice) if a.name == "alice"]
    assert found.capabilities == ["python"]


async def test_an_agents_block_and_send_are_audited_with_the_address_they_came_from(
    office: PostOffice,
) -> None:
    alice, bob = await keyed_agents(office, "alice", "bob")
    await office.directory.block(alice, "bob")
    await office.mailbox.send(bob, "alice", "dropped, but audited")
    await office.mailbox.send(Caller("carol"), "bob", "from a local session", create_sender=True)
    entries = await office.admin.audit_log(await owner(office), limit=3)
    assert [(e.actor, e.action, e.ip) for e in entries] == [
        ("carol", "message.sent", None),  # a local session has no address
        ("bob", "message.sent", ADDRESS),
        ("alice", "block.added", ADDRESS),
    ]
