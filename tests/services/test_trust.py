"""Trust is the agent's: a local session, the command line and a key speak for an agent, and
what that agent is (created by the owner or locally: verified; registered itself: untrusted
until vouched for) is what its mail carries and whether it may lead, whoever speaks for it."""

from __future__ import annotations

import anyio
import asyncpg
import pytest

from account_helpers import ADDRESS, keyed, owner, self_registered
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.leadership import Leader
from agentpost.domain.models import Caller, Trust
from agentpost.services import PostOffice
from agentpost.store.postgres import WRITE_LOCK
from backends import FakeClock, OpenOffice, refused_without_change, session_caller
from service_process import eventually

pytestmark = pytest.mark.anyio


async def trusts(office: PostOffice, reader: Caller) -> list[tuple[str, Trust]]:
    return [(m.body, m.trust) for m in (await office.mailbox.inbox(reader)).messages]


async def test_a_local_session_under_a_self_registered_agents_name_is_as_trusted_as_the_agent(
    open_office: OpenOffice,
) -> None:
    """The machine's user speaks for the session, but the name is a stranger's: its mail would
    otherwise pass for a colleague's while `who` marks the same agent untrusted."""
    office = await open_office(open_registration=True, auto_lead=False)
    bob, _ = await keyed(office, "bob")
    await office.keys.self_register("drifter", project="shop", ip=ADDRESS)
    local = await session_caller(office, "drifter", project="shop", branch="main")
    await office.mailbox.send(local, "bob", "from a local session")
    (seen,) = [p for p in await office.presence.who("shop") if p.name == "drifter"]
    assert seen.trust is Trust.UNTRUSTED
    err = await refused_without_change(office, ErrorCode.FORBIDDEN, office.leadership.claim(local))
    assert "vouch" in err.message

    # Vouched for: the session already open is verified from its next act, as a key's is.
    await office.admin.vouch(await owner(office), "drifter")
    await office.mailbox.send(local, "bob", "after the vouch")
    assert (await office.leadership.claim(local)).leader == "drifter"
    assert await trusts(office, bob) == [
        ("from a local session", Trust.UNTRUSTED),
        ("after the vouch", Trust.VERIFIED),
    ]


async def test_the_command_line_speaking_as_a_self_registered_agent_sends_untrusted_mail(
    open_office: OpenOffice,
) -> None:
    office = await open_office(open_registration=True)
    bob, _ = await keyed(office, "bob")
    await office.keys.self_register("drifter", ip=ADDRESS)
    as_drifter = await office.presence.existing_agent("drifter")  # `agentpost send --as drifter`
    await office.mailbox.send(as_drifter, "bob", "hello")
    assert await trusts(office, bob) == [("hello", Trust.UNTRUSTED)]


async def test_agents_made_locally_stay_verified(office: PostOffice) -> None:
    alice = await session_caller(office, "alice")
    bob = await session_caller(office, "bob")
    cli = await office.presence.ensure_agent("carol")
    await office.mailbox.send(alice, "bob", "from a session")
    await office.mailbox.send(cli, "bob", "from the command line")
    await office.mailbox.send(Caller("dave"), "bob", "from a new name", create_sender=True)
    assert await trusts(office, bob) == [
        ("from a session", Trust.VERIFIED),
        ("from the command line", Trust.VERIFIED),
        ("from a new name", Trust.VERIFIED),
    ]
    assert (await office.leadership.claim(alice)).leader == "alice"


# -- withdrawing a vouch ---------------------------------------------------------------------------


async def test_withdrawing_a_vouch_makes_what_the_agent_sends_next_untrusted(
    open_office: OpenOffice,
) -> None:
    """Any agent: one the owner created is vouched for by that act."""
    office = await open_office()
    admin = await owner(office)
    bob, _ = await keyed(office, "bob")
    drifter, key = await keyed(office, "drifter")
    await office.mailbox.send(drifter, "bob", "while vouched for")
    local = await session_caller(office, "drifter")  # a session already open keeps no trust

    withdrawn = await office.admin.unvouch(admin, "drifter")
    assert withdrawn.trust == "untrusted"
    drifter = await office.keys.authenticate(key, ip=ADDRESS)  # the next request
    await office.mailbox.send(drifter, "bob", "the next request")
    await office.mailbox.send(local, "bob", "its local session")
    # What was said before stays as it was received.
    assert await trusts(office, bob) == [
        ("while vouched for", Trust.VERIFIED),
        ("the next request", Trust.UNTRUSTED),
        ("its local session", Trust.UNTRUSTED),
    ]
    (entry,) = await office.admin.audit_log(admin, action="agent.unvouched")
    assert (entry.target, entry.detail) == ("drifter", {"trust": "untrusted"})


async def test_withdrawing_a_vouch_frees_the_seat_the_agent_holds_and_says_so(
    open_office: OpenOffice,
) -> None:
    """An agent the owner no longer vouches for may not lead: left in the seat, it would keep
    the project leaderless (its delegations refused) for as long as its session beats."""
    office = await open_office(auto_lead=False)
    admin = await owner(office)
    lead = await session_caller(office, "lead", project="shop", branch="main")
    dev = await session_caller(office, "dev", project="shop", branch="main")
    await office.channels.join(dev, "shop")
    await office.leadership.claim(lead)

    await office.admin.unvouch(admin, "lead")
    seat = await office.leadership.leader(dev)
    assert (seat.leader, seat.term) == (None, 1)
    notices = [m for m in (await office.mailbox.inbox(dev)).messages if m.subject == "leader"]
    assert notices[-1].data == {
        "event": "leader.changed",
        "project": "shop",
        "leader": None,
        "term": 1,
        "previous": "lead",
    }
    assert "withdrew its vouch" in notices[-1].body
    (entry,) = await office.admin.audit_log(admin, action="agent.unvouched")
    assert entry.detail == {"trust": "untrusted", "seats_freed": ["shop"]}
    await refused_without_change(office, ErrorCode.FORBIDDEN, office.leadership.claim(lead))
    assert (await office.leadership.claim(dev)).leader == "dev"


async def test_withdrawing_a_vouch_frees_a_seat_whose_leader_fell_silent_for_good(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    """A leader asleep past `offline_after_s` still holds its lease row: left there, the
    session's next heartbeat would make it leader again, vouched for or not."""
    office = await open_office(auto_lead=False)
    admin = await owner(office)
    lead = await session_caller(office, "lead", project="shop", branch="main")
    dev = await session_caller(office, "dev", project="shop", branch="main")
    await office.leadership.claim(lead)
    clock.advance(office.settings.offline_after_s + 15)

    await office.admin.unvouch(admin, "lead")
    assert lead.session_id is not None
    await office.presence.heartbeat(lead.session_id)  # it wakes
    assert (await office.leadership.leader(dev)).leader is None
    assert (await office.leadership.claim(dev)).leader == "dev"


@pytest.mark.parametrize("name", ["owner", "system", "agentpost"])
async def test_the_owner_and_the_post_office_stay_verified(office: PostOffice, name: str) -> None:
    admin = await owner(office)
    await refused_without_change(office, ErrorCode.FORBIDDEN, office.admin.unvouch(admin, name))


async def test_withdrawing_the_vouch_of_a_missing_agent_is_not_found(office: PostOffice) -> None:
    admin = await owner(office)
    await refused_without_change(office, ErrorCode.NOT_FOUND, office.admin.unvouch(admin, "nobody"))


async def test_a_claim_authenticated_before_the_vouch_was_withdrawn_takes_no_seat(
    open_office: OpenOffice,
) -> None:
    """A key's caller carries the trust its request was authenticated with. A claim whose
    request began before the owner withdrew the vouch would seat an agent no longer vouched
    for, after the withdrawal freed its seats: nothing would free this one."""
    office = await open_office(open_registration=True, auto_lead=False)
    admin = await owner(office)
    drifter, key = await self_registered(office, "drifter", project="shop", branch="main")
    await office.admin.vouch(admin, "drifter")
    vouched = await office.keys.authenticate(key, ip=ADDRESS, session=drifter.session_id)
    assert vouched.trust is Trust.VERIFIED

    await office.admin.unvouch(admin, "drifter")
    err = await refused_without_change(
        office, ErrorCode.FORBIDDEN, office.leadership.claim(vouched)
    )
    assert "vouch" in err.message


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_a_claim_racing_the_withdrawal_of_a_vouch_waits_for_it_and_takes_no_seat(
    open_office: OpenOffice, database_url: str
) -> None:
    """On PostgreSQL (READ COMMITTED) a claim that read the agent's trust before an unvouch
    committed would seat it after the unvouch freed its seats. The unvouch's transaction is
    held open here by hand, as the store's writes hold it: the claim waits for it, then
    reads the trust it left."""
    office = await open_office(open_registration=True, auto_lead=False)
    admin = await owner(office)
    drifter, key = await self_registered(office, "drifter", project="shop", branch="main")
    await office.admin.vouch(admin, "drifter")
    vouched = await office.keys.authenticate(key, ip=ADDRESS, session=drifter.session_id)

    unvouching = await asyncpg.connect(database_url, timeout=5)
    try:
        held = unvouching.transaction()
        await held.start()
        await unvouching.execute(WRITE_LOCK.text)
        await unvouching.execute("UPDATE agents SET trust = 'untrusted' WHERE name = 'drifter'")
        outcome: list[BaseException | Leader] = []

        async def claim() -> None:
            try:
                outcome.append(await office.leadership.claim(vouched))
            except AgentpostError as err:
                outcome.append(err)

        async with anyio.create_task_group() as group:
            group.start_soon(claim)
            await eventually(lambda: waiting_for_a_lock(unvouching))
            assert outcome == []
            await held.commit()
        (refused,) = outcome
        assert isinstance(refused, AgentpostError)
        assert refused.code is ErrorCode.FORBIDDEN
    finally:
        await unvouching.close()
    assert (await office.leadership.leader(drifter)).leader is None


async def waiting_for_a_lock(conn: asyncpg.Connection) -> bool:
    """Whether another connection to this database waits for a lock (ours, here)."""
    return bool(
        await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"
        )
    )
