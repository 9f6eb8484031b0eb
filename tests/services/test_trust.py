"""Trust is the agent's: a local session, the command line and a key speak for an agent, and
what that agent is (created by the owner or locally: verified; registered itself: untrusted
until vouched for) is what its mail carries and whether it may lead, whoever speaks for it."""

from __future__ import annotations

import pytest

from account_helpers import ADDRESS, keyed, owner
from agentpost.domain.errors import ErrorCode
from agentpost.domain.models import Caller, Trust
from agentpost.services import PostOffice
from backends import OpenOffice, refused_without_change, session_caller

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
