"""Administration: only an admin key may act; every act leaves an audit row; agents are
disabled, never deleted; limits, blocks and usage per agent."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from account_helpers import ADDRESS, ADMIN_SECRET, keyed, owner
from agentpost.domain.accounts import AgentLimits, Usage
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.models import Caller, Trust
from agentpost.services import PostOffice
from agentpost.store import agents as agent_rows
from backends import FakeClock, OpenOffice, refused_without_change, session_caller, snapshot

pytestmark = pytest.mark.anyio

DAY = 86_400.0


@dataclass
class World:
    """A post office with the owner, two agents, a disabled one and a self-registered one."""

    office: PostOffice
    admin: Caller
    alice: Caller
    spare_key: str
    """The id of a second key of alice's."""


@pytest.fixture
async def world(open_office: OpenOffice) -> World:
    office = await open_office(open_registration=True)
    admin = await owner(office)
    alice, _ = await keyed(office, "alice")
    await keyed(office, "bob")
    await keyed(office, "dormant")
    await office.admin.disable_agent(admin, "dormant")
    await office.keys.self_register("drifter", ip=ADDRESS)
    spare = await office.keys.issue(admin, "alice", label="spare")
    return World(office, admin, alice, spare.id)


Act = Callable[[World, Caller], Awaitable[Any]]

# Each act that changes something: how to do it, its audit action, and its target.
CHANGES: dict[str, tuple[Act, str, Callable[[World, Any], str]]] = {
    "create_agent": (
        lambda w, c: w.office.admin.create_agent(c, "carol"),
        "agent.created",
        lambda w, result: "carol",
    ),
    "disable_agent": (
        lambda w, c: w.office.admin.disable_agent(c, "bob"),
        "agent.disabled",
        lambda w, result: "bob",
    ),
    "enable_agent": (
        lambda w, c: w.office.admin.enable_agent(c, "dormant"),
        "agent.enabled",
        lambda w, result: "dormant",
    ),
    "vouch_agent": (
        lambda w, c: w.office.admin.vouch(c, "drifter"),
        "agent.vouched",
        lambda w, result: "drifter",
    ),
    "unvouch_agent": (
        lambda w, c: w.office.admin.unvouch(c, "bob"),
        "agent.unvouched",
        lambda w, result: "bob",
    ),
    "set_limits": (
        lambda w, c: w.office.admin.set_limits(c, "bob", send_rate_per_minute=5, max_unacked=None),
        "limits.set",
        lambda w, result: "bob",
    ),
    "set_block": (
        lambda w, c: w.office.admin.set_block(c, "alice", "bob", True),
        "block.added",
        lambda w, result: "alice",
    ),
    "issue_key": (
        lambda w, c: w.office.keys.issue(c, "bob", label="ci"),
        "key.issued",
        lambda w, result: str(result.id),
    ),
    "revoke_key": (
        lambda w, c: w.office.keys.revoke(c, w.spare_key),
        "key.revoked",
        lambda w, result: w.spare_key,
    ),
}
READS: dict[str, Act] = {
    "list_agents": lambda w, c: w.office.admin.list_agents(c),
    "audit_log": lambda w, c: w.office.admin.audit_log(c),
    "usage": lambda w, c: w.office.admin.usage(c),
    "list_keys": lambda w, c: w.office.keys.list_keys(c),
}
EVERY_ACT: dict[str, Act] = {name: act for name, (act, _, _) in CHANGES.items()} | READS


# -- who may administer --------------------------------------------------------------------------


@pytest.mark.parametrize("act", sorted(EVERY_ACT))
@pytest.mark.parametrize("who", ["an agent's key", "the owner without an admin key"])
async def test_non_admin_callers_are_forbidden_every_admin_act_and_the_attempt_is_audited(
    world: World, act: str, who: str
) -> None:
    """Refused before anything is looked at, changing nothing but the audit log, which keeps
    who tried which act from where (metadata only), as it keeps every admin act."""
    caller = world.alice if who == "an agent's key" else Caller("owner", ip="2001:db8::9")
    before = await snapshot(world.office.store)
    with pytest.raises(AgentpostError) as caught:
        await EVERY_ACT[act](world, caller)
    assert caught.value.code is ErrorCode.FORBIDDEN
    after = await snapshot(world.office.store)
    assert len(after.pop("audit")) == len(before.pop("audit")) + 1
    assert after == before
    (newest,) = await world.office.admin.audit_log(world.admin, limit=1)
    assert (newest.actor, newest.action, newest.detail) == (
        caller.agent,
        "admin.refused",
        {"act": act},
    )
    assert newest.ip == (ADDRESS if caller is world.alice else "2001:db8::9")


async def test_a_refused_admin_act_names_the_agent_it_was_aimed_at(
    world: World, clock: FakeClock
) -> None:
    with pytest.raises(AgentpostError):
        await world.office.admin.disable_agent(world.alice, "bob")
    clock.advance(world.office.settings.lockout_s)
    with pytest.raises(AgentpostError):  # not a name: nothing of it is kept
        await world.office.admin.disable_agent(world.alice, "Bob\x00; drop")
    refused = await world.office.admin.audit_log(world.admin, action="admin.refused")
    assert [(e.target, e.detail) for e in refused] == [
        (None, {"act": "disable_agent"}),
        ("bob", {"act": "disable_agent"}),
    ]


async def test_a_key_looping_on_an_admin_act_is_kept_once_a_lockout_window(
    world: World, clock: FakeClock
) -> None:
    """Each attempt is refused, but the log (and the write lock) is not the prober's to fill:
    one row per agent and act per `lockout_s`, and another act is kept on its own."""
    admin = world.office.admin
    for _ in range(50):
        with pytest.raises(AgentpostError):
            await admin.list_agents(world.alice)
    with pytest.raises(AgentpostError):
        await admin.usage(world.alice)
    clock.advance(world.office.settings.lockout_s - 1)
    with pytest.raises(AgentpostError):
        await admin.list_agents(world.alice)
    clock.advance(1)
    with pytest.raises(AgentpostError):
        await admin.list_agents(world.alice)
    refused = await admin.audit_log(world.admin, action="admin.refused")
    assert [e.detail["act"] for e in refused] == ["list_agents", "usage", "list_agents"]


@pytest.mark.parametrize("act", sorted(CHANGES))
async def test_every_admin_act_writes_an_audit_row(world: World, act: str) -> None:
    do, action, target = CHANGES[act]
    result = await do(world, world.admin)
    (newest,) = await world.office.admin.audit_log(world.admin, limit=1)
    assert (newest.actor, newest.action, newest.target) == ("owner", action, target(world, result))


@pytest.mark.parametrize("act", sorted(CHANGES))
async def test_every_admin_act_records_the_address_it_came_from(world: World, act: str) -> None:
    """Whoever holds an admin key acts as `owner`: where an act came from tells them apart."""
    do, action, _ = CHANGES[act]
    elsewhere = await world.office.keys.authenticate(ADMIN_SECRET, ip="2001:DB8::9")
    await do(world, elsewhere)
    (newest,) = await world.office.admin.audit_log(world.admin, limit=1)
    assert (newest.action, newest.ip) == (action, "2001:db8::9")


async def test_an_act_that_would_change_nothing_writes_nothing(world: World) -> None:
    admin, office = world.admin, world.office
    before = await snapshot(office.store)
    await office.admin.enable_agent(admin, "alice")
    await office.admin.disable_agent(admin, "dormant")
    await office.admin.vouch(admin, "bob")
    await office.admin.unvouch(admin, "drifter")
    await office.admin.set_limits(admin, "bob", send_rate_per_minute=None, max_unacked=None)
    await office.admin.set_block(admin, "alice", "bob", False)
    assert await snapshot(office.store) == before


# -- agents ----------------------------------------------------------------------------------------


async def test_creating_an_agent_returns_its_profile_and_a_working_key(office: PostOffice) -> None:
    admin = await owner(office)
    info, issued = await office.admin.create_agent(
        admin, "alice", description="reviews", project="shop", capabilities=["python", "review"]
    )
    assert (info.name, info.description, info.project, info.capabilities) == (
        "alice",
        "reviews",
        "shop",
        ["python", "review"],
    )
    assert (info.trust, info.disabled, info.online) == ("verified", False, False)
    assert (issued.agent, issued.admin) == ("alice", False)
    caller = await office.keys.authenticate(issued.key, ip=ADDRESS)
    assert (caller.agent, caller.trust) == ("alice", Trust.VERIFIED)
    assert set(issued.to_dict()) == {"id", "agent", "key", "admin", "created_at"}


async def test_a_name_is_never_reused_even_once_its_agent_is_disabled(office: PostOffice) -> None:
    admin = await owner(office)
    await office.admin.create_agent(admin, "alice")
    await office.admin.disable_agent(admin, "alice")
    error = await refused_without_change(
        office, ErrorCode.CONFLICT, office.admin.create_agent(admin, "alice")
    )
    assert error.details == {"name": "alice"}


async def test_an_agent_a_local_session_made_gets_a_key_by_issue_not_create(
    office: PostOffice,
) -> None:
    admin = await owner(office)
    await office.presence.ensure_agent("alice")
    await refused_without_change(
        office, ErrorCode.CONFLICT, office.admin.create_agent(admin, "alice")
    )
    issued = await office.keys.issue(admin, "alice")
    assert (await office.keys.authenticate(issued.key, ip=ADDRESS)).agent == "alice"


@pytest.mark.parametrize(
    ("name", "profile", "code"),
    [
        ("owner", {}, ErrorCode.FORBIDDEN),
        ("system", {}, ErrorCode.FORBIDDEN),
        ("Alice", {}, ErrorCode.INVALID_ARGUMENT),
        ("alice", {"description": "d" * 2001}, ErrorCode.TOO_LARGE),
        ("alice", {"project": "Shop Front"}, ErrorCode.INVALID_ARGUMENT),
        ("alice", {"capabilities": "python"}, ErrorCode.INVALID_ARGUMENT),
        ("alice", {"capabilities": ["ok", ""]}, ErrorCode.INVALID_ARGUMENT),
        ("alice", {"capabilities": ["c" * 65]}, ErrorCode.INVALID_ARGUMENT),
        ("alice", {"capabilities": [str(n) for n in range(51)]}, ErrorCode.INVALID_ARGUMENT),
    ],
)
async def test_reserved_names_and_bad_profiles_are_refused(
    office: PostOffice, name: str, profile: dict[str, Any], code: ErrorCode
) -> None:
    admin = await owner(office)
    await refused_without_change(office, code, office.admin.create_agent(admin, name, **profile))


async def test_with_a_roster_only_its_names_may_be_created(open_office: OpenOffice) -> None:
    office = await open_office(agents=["alice"])
    admin = await owner(office)
    await refused_without_change(
        office, ErrorCode.FORBIDDEN, office.admin.create_agent(admin, "mallory")
    )
    await office.admin.create_agent(admin, "alice")


async def test_disabling_ends_sessions_keeps_mail_and_refuses_new_mail(
    office: PostOffice,
) -> None:
    admin = await owner(office)
    alice, _ = await keyed(office, "alice")
    bob, _ = await keyed(office, "bob")
    await office.mailbox.send(bob, "alice", "before you go")
    disabled = await office.admin.disable_agent(admin, "alice")
    assert (disabled.disabled, disabled.online) == (True, False)
    assert "alice" not in [p.name for p in await office.presence.who(include_offline=True)]
    await refused_without_change(
        office, ErrorCode.GONE, office.mailbox.send(bob, "alice", "still there?")
    )
    await office.admin.enable_agent(admin, "alice")
    assert [m.body for m in (await office.mailbox.inbox(alice)).messages] == ["before you go"]


async def test_disabling_a_leader_frees_its_seat_and_says_so_on_the_projects_channel(
    open_office: OpenOffice,
) -> None:
    """Its sessions end, so it leads no more: the channel, which last named it leader, hears
    so, as when a vouch is withdrawn; and enabled again, it does not lead until it claims."""
    office = await open_office(auto_lead=False)
    admin = await owner(office)
    lead = await session_caller(office, "lead", project="shop", branch="main")
    dev = await session_caller(office, "dev", project="shop", branch="main")
    await office.leadership.claim(lead)

    await office.admin.disable_agent(admin, "lead")
    assert (await office.leadership.leader(dev)).leader is None
    notices = [m for m in (await office.mailbox.inbox(dev)).messages if m.subject == "leader"]
    assert notices[-1].data == {
        "event": "leader.changed",
        "project": "shop",
        "leader": None,
        "term": 1,
        "previous": "lead",
    }
    assert "disabled" in notices[-1].body
    (entry,) = await office.admin.audit_log(admin, action="agent.disabled")
    assert (entry.target, entry.detail) == ("lead", {"seats_freed": ["shop"]})

    await office.admin.enable_agent(admin, "lead")
    assert (await office.leadership.leader(dev)).leader is None
    assert (await office.leadership.claim(dev)).leader == "dev"


@pytest.mark.parametrize("name", ["owner", "nobody", "agentpost"])
async def test_the_owner_cannot_be_disabled_nor_a_missing_agent(
    office: PostOffice, name: str
) -> None:
    admin = await owner(office)
    code = ErrorCode.FORBIDDEN if name == "owner" else ErrorCode.NOT_FOUND
    await refused_without_change(office, code, office.admin.disable_agent(admin, name))


async def test_the_agent_list_holds_disabled_agents_but_not_the_post_offices_own(
    world: World,
) -> None:
    store = world.office.store  # the post office's own sender of notices, made as it does
    await store.write(lambda conn: agent_rows.create_agent(conn, "system", now=store.clock()))
    listed = await world.office.admin.list_agents(world.admin)
    assert [(a.name, a.disabled, a.trust) for a in listed] == [
        ("alice", False, "verified"),
        ("bob", False, "verified"),
        ("dormant", True, "verified"),
        ("drifter", False, "untrusted"),
        ("owner", False, "verified"),
    ]


async def test_a_self_registered_agents_mail_is_untrusted_until_vouched(
    open_office: OpenOffice,
) -> None:
    office = await open_office(open_registration=True)
    admin = await owner(office)
    bob, _ = await keyed(office, "bob")
    issued = await office.keys.self_register("drifter", ip=ADDRESS)
    drifter = await office.keys.authenticate(issued.key, ip=ADDRESS)
    await office.mailbox.send(drifter, "bob", "hello")
    vouched = await office.admin.vouch(admin, "drifter")
    assert vouched.trust == "verified"
    drifter = await office.keys.authenticate(issued.key, ip=ADDRESS)  # the next request
    await office.mailbox.send(drifter, "bob", "again")
    trust = [(m.body, m.trust) for m in (await office.mailbox.inbox(bob)).messages]
    # What was said before stays as it was received.
    assert trust == [("hello", Trust.UNTRUSTED), ("again", Trust.VERIFIED)]


# -- the audit log ---------------------------------------------------------------------------------


async def test_the_audit_log_pages_newest_first_and_filters_by_actor_and_action(
    world: World,
) -> None:
    office, admin = world.office, world.admin
    await office.mailbox.send(world.alice, "bob", "one")
    await office.mailbox.send(world.alice, "bob", "two")
    everything = await office.admin.audit_log(admin, limit=500)
    assert [e.seq for e in everything] == sorted((e.seq for e in everything), reverse=True)
    first_page = await office.admin.audit_log(admin, limit=2)
    second_page = await office.admin.audit_log(admin, limit=2, before=first_page[-1].seq)
    assert first_page + second_page == everything[:4]
    sends = await office.admin.audit_log(admin, actor="alice", action="message.sent")
    assert [e.detail["to"] for e in sends] == [["bob"], ["bob"]]
    assert {e.action for e in await office.admin.audit_log(admin, actor="owner")} == {
        "agent.created",
        "agent.disabled",
        "key.issued",
    }


@pytest.mark.parametrize(
    "options",
    [{"limit": 0}, {"limit": 501}, {"before": "12"}, {"actor": "a" * 65}, {"action": 3}],
)
async def test_a_bad_audit_query_is_an_invalid_argument(
    office: PostOffice, options: dict[str, Any]
) -> None:
    admin = await owner(office)
    await refused_without_change(
        office, ErrorCode.INVALID_ARGUMENT, office.admin.audit_log(admin, **options)
    )


# -- limits, blocks, usage -------------------------------------------------------------------------


async def test_per_agent_limits_override_the_settings_and_none_restores_them(
    world: World,
) -> None:
    office, admin = world.office, world.admin
    assert await office.admin.set_limits(
        admin, "bob", send_rate_per_minute=5, max_unacked=None
    ) == AgentLimits("bob", 5, 1000, 100, 200)
    assert await office.admin.set_limits(
        admin, "bob", send_rate_per_minute=None, max_unacked=20, max_channels_per_agent=3
    ) == AgentLimits("bob", 60, 20, 3, 200)
    (usage,) = await office.admin.usage(admin, "bob")
    assert (usage.send_rate_per_minute, usage.max_unacked, usage.max_channels_per_agent) == (
        60,
        20,
        3,
    )
    assert usage.own_limits == ["max_unacked", "max_channels_per_agent"]
    assert await office.admin.set_limits(
        admin, "bob", send_rate_per_minute=None, max_unacked=None
    ) == AgentLimits("bob", 60, 1000, 100, 200)
    assert (await snapshot(office.store))["agent_limits"] == []
    assert [u.own_limits for u in await office.admin.usage(admin, "bob")] == [[]]


@pytest.mark.parametrize(
    ("name", "limits", "code"),
    [
        ("bob", {"send_rate_per_minute": 0, "max_unacked": None}, ErrorCode.INVALID_ARGUMENT),
        ("bob", {"send_rate_per_minute": None, "max_unacked": -1}, ErrorCode.INVALID_ARGUMENT),
        ("bob", {"send_rate_per_minute": True, "max_unacked": None}, ErrorCode.INVALID_ARGUMENT),
        ("bob", {"send_rate_per_minute": 1.5, "max_unacked": None}, ErrorCode.INVALID_ARGUMENT),
        ("bob", {"send_rate_per_minute": 10**7, "max_unacked": None}, ErrorCode.INVALID_ARGUMENT),
        (
            "bob",
            {"send_rate_per_minute": None, "max_unacked": None, "max_channels_per_agent": 0},
            ErrorCode.INVALID_ARGUMENT,
        ),
        (
            "bob",
            {"send_rate_per_minute": None, "max_unacked": None, "max_open_tasks_per_agent": 0},
            ErrorCode.INVALID_ARGUMENT,
        ),
        ("nobody", {"send_rate_per_minute": 5, "max_unacked": None}, ErrorCode.NOT_FOUND),
    ],
)
async def test_bad_limits_are_refused(
    world: World, name: str, limits: dict[str, Any], code: ErrorCode
) -> None:
    await refused_without_change(
        world.office, code, world.office.admin.set_limits(world.admin, name, **limits)
    )


async def test_the_owner_sets_how_many_channels_one_agent_may_join(world: World) -> None:
    office, admin = world.office, world.admin
    await office.admin.set_limits(
        admin, "alice", send_rate_per_minute=None, max_unacked=None, max_channels_per_agent=1
    )
    await office.channels.join(world.alice, "#ops")
    refused = await refused_without_change(
        office, ErrorCode.CONFLICT, office.channels.join(world.alice, "#release")
    )
    assert refused.details == {"limit": 1}
    bob = Caller("bob")
    await office.channels.join(bob, "#ops")
    await office.channels.join(bob, "#release")  # bob keeps the setting's cap
    await office.admin.set_limits(admin, "alice", send_rate_per_minute=None, max_unacked=None)
    assert (await office.channels.join(world.alice, "#release")).members == 2
    await office.admin.set_limits(
        admin, "alice", send_rate_per_minute=None, max_unacked=None, max_channels_per_agent=1
    )
    lowered = await refused_without_change(
        office, ErrorCode.CONFLICT, office.channels.join(world.alice, "#later")
    )
    assert "at most 1 channels and has joined 2" in lowered.message


async def test_the_owner_blocks_a_sender_for_a_recipient(world: World) -> None:
    office, admin = world.office, world.admin
    bob = await office.keys.authenticate((await office.keys.issue(admin, "bob")).key, ip=ADDRESS)
    answer = await office.admin.set_block(admin, "bob", "alice", True)
    assert answer == {"recipient": "bob", "sender": "alice", "blocked": True}
    assert await office.directory.blocked(bob) == ["alice"]
    await office.mailbox.send(world.alice, "bob", "you will not see this")
    assert (await office.mailbox.inbox(bob)).messages == []
    await office.admin.set_block(admin, "bob", "alice", False)
    await office.mailbox.send(world.alice, "bob", "now you do")
    assert [m.body for m in (await office.mailbox.inbox(bob)).messages] == ["now you do"]


@pytest.mark.parametrize(
    ("recipient", "sender", "code"),
    [
        ("bob", "nobody", ErrorCode.NOT_FOUND),
        ("nobody", "bob", ErrorCode.NOT_FOUND),
        ("bob", "bob", ErrorCode.INVALID_ARGUMENT),
        ("bob", "Bad Name", ErrorCode.INVALID_ARGUMENT),
        # Reserved, as for an agent blocking them itself: not allowed, not malformed.
        ("bob", "owner", ErrorCode.FORBIDDEN),
        ("bob", "agentpost", ErrorCode.FORBIDDEN),
        ("agentpost", "bob", ErrorCode.NOT_FOUND),
    ],
)
async def test_a_block_needs_two_existing_agents(
    world: World, recipient: str, sender: str, code: ErrorCode
) -> None:
    await refused_without_change(
        world.office, code, world.office.admin.set_block(world.admin, recipient, sender, True)
    )


async def test_usage_counts_what_each_agent_sent_and_received(
    office: PostOffice, clock: FakeClock
) -> None:
    admin = await owner(office)
    alice, _ = await keyed(office, "alice")
    bob, _ = await keyed(office, "bob")
    first = await office.mailbox.send(alice, "bob", "yesterday")
    clock.advance(DAY + 1)
    await office.mailbox.send(alice, "bob", "today")
    await office.mailbox.send(alice, "bob", "just now", ttl_s=60)
    await office.mailbox.send(bob, "alice", "reply")
    await office.mailbox.inbox(bob, limit=1)  # reads "yesterday"
    await office.mailbox.ack(bob, [first.id])
    clock.advance(61)  # "just now" expires unread
    usage = {u.agent: u for u in await office.admin.usage(admin)}
    assert usage["alice"] == Usage("alice", 3, 2, 1, 1, 1, 60, 1000, 100, 200)
    assert usage["bob"] == Usage("bob", 1, 1, 3, 1, 1, 60, 1000, 100, 200)
    assert set(usage) == {"alice", "bob", "owner"}
    assert await office.admin.usage(admin, "bob") == [usage["bob"]]
    await refused_without_change(office, ErrorCode.NOT_FOUND, office.admin.usage(admin, "nobody"))
