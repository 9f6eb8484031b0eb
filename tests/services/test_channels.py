"""Channels: #general, one per project, and any joined by name; who may post, read and leave."""

from __future__ import annotations

import pytest
from sqlalchemy import Connection, insert

from agentpost.domain.errors import ErrorCode
from agentpost.domain.models import Caller, ChannelInfo, DeliveryState
from agentpost.services import PostOffice
from agentpost.store.schema import agents
from backends import (
    OpenOffice,
    disable_agent,
    refused_without_change,
    session_caller,
    snapshot,
)

pytestmark = pytest.mark.anyio


async def test_every_agent_sees_general_and_its_project_channel(office: PostOffice) -> None:
    lead = await session_caller(office, "lead", project="shop")
    await session_caller(office, "dev", project="shop")
    await session_caller(office, "writer", project="blog")
    assert await office.channels.overview(lead) == [
        ChannelInfo("general", 3, joined=True, implicit=True),
        ChannelInfo("blog", 1, joined=False, implicit=True),
        ChannelInfo("shop", 2, joined=True, implicit=True),
    ]


async def test_joining_a_new_name_makes_a_channel_others_can_see_and_join(
    office: PostOffice,
) -> None:
    lead = await session_caller(office, "lead", project="shop")
    dev = await session_caller(office, "dev", project="shop")
    assert await office.channels.join(lead, "#release") == ChannelInfo("release", 1, True, False)
    assert await office.channels.join(lead, "release") == ChannelInfo("release", 1, True, False)
    assert ChannelInfo("release", 1, False, False) in await office.channels.overview(dev)
    assert (await office.channels.join(dev, "#release")).members == 2
    sent = await office.mailbox.send(lead, "#release", "cut at 5")
    assert sent.to == ["dev"]


async def test_joining_general_or_ones_project_changes_nothing(office: PostOffice) -> None:
    lead = await session_caller(office, "lead", project="shop")
    before = await snapshot(office.store)
    assert await office.channels.join(lead, "#general") == ChannelInfo("general", 1, True, True)
    assert await snapshot(office.store) == before
    assert (await office.channels.join(lead, "#shop")).implicit


async def test_joining_ones_own_projects_channel_is_left_with_the_project(
    office: PostOffice,
) -> None:
    """Its project's channel is one an agent belongs to, not one it joined: when it moves to
    another project, it leaves that channel, whether or not it called `join` on it."""
    lead = await session_caller(office, "lead", project="shop")
    dev = await session_caller(office, "dev", project="shop")
    before = await snapshot(office.store)
    assert await office.channels.join(dev, "#shop") == ChannelInfo("shop", 2, True, True)
    assert await snapshot(office.store) == before
    await office.directory.update_profile(dev, project="blog")
    assert (await office.mailbox.send(lead, "#shop", "release at five")).to == []
    await refused_without_change(office, ErrorCode.FORBIDDEN, office.channels.history(dev, "shop"))


async def test_joining_another_projects_channel_brings_its_broadcasts_and_history(
    office: PostOffice,
) -> None:
    lead = await session_caller(office, "lead", project="shop")
    guest = await session_caller(office, "guest", project="blog")
    await office.mailbox.send(lead, "#shop", "before you came")
    await refused_without_change(
        office, ErrorCode.FORBIDDEN, office.channels.history(guest, "#shop")
    )
    assert await office.channels.join(guest, "#shop") == ChannelInfo("shop", 2, True, True)
    await office.mailbox.send(lead, "#shop", "welcome")
    history = await office.channels.history(guest, "#shop")
    assert [(m.body, m.state) for m in history] == [
        ("before you came", None),  # history, never delivered to the guest
        ("welcome", DeliveryState.QUEUED),
    ]
    inbox = await office.mailbox.inbox(guest)
    assert [m.body for m in inbox.messages] == ["welcome"]


async def test_joining_past_the_cap_is_a_conflict_that_changes_nothing(
    open_office: OpenOffice,
) -> None:
    """Every join of a new name makes a channel: an agent (one that registered itself, too)
    holds at most `max_channels_per_agent` of them, so joins alone cannot fill the store."""
    office = await open_office(max_channels_per_agent=2)
    lead = await session_caller(office, "lead", project="shop")
    dev = await session_caller(office, "dev", project="blog")
    await office.channels.join(lead, "#ops")
    await office.channels.join(lead, "#blog")  # another project's channel is a join too
    refused = await refused_without_change(
        office, ErrorCode.CONFLICT, office.channels.join(lead, "#release")
    )
    assert refused.details == {"limit": 2}
    assert refused.message == (
        "lead may have joined at most 2 channels and has joined 2; leave one first"
    )
    assert (await office.channels.join(lead, "#ops")).joined  # one it holds: nothing new
    assert (await office.channels.join(dev, "#release")).members == 1  # the cap is each agent's
    await office.channels.leave(lead, "#ops")
    assert (await office.channels.join(lead, "#release")).members == 2


async def test_general_and_ones_own_project_never_count_against_the_cap(
    open_office: OpenOffice,
) -> None:
    office = await open_office(max_channels_per_agent=1)
    lead = await session_caller(office, "lead", project="shop")
    await session_caller(office, "writer", project="blog")
    await office.channels.join(lead, "#blog")
    assert (await office.channels.join(lead, "#general")).joined
    assert (await office.channels.join(lead, "#shop")).joined
    await office.directory.update_profile(lead, project="blog")  # #blog: now its own project
    assert (await office.channels.join(lead, "#ops")).members == 1
    assert (await office.channels.join(lead, "#blog")).joined


async def test_the_default_cap_is_a_hundred_channels(office: PostOffice) -> None:
    assert office.settings.max_channels_per_agent == 100
    lead = await session_caller(office, "lead", project="shop")
    for i in range(100):
        await office.channels.join(lead, f"#c{i}")
    refused = await refused_without_change(
        office, ErrorCode.CONFLICT, office.channels.join(lead, "#c100")
    )
    assert refused.details == {"limit": 100}


@pytest.mark.parametrize("channel", ["#Bad", "#", "#a b", "##x"])
async def test_a_malformed_channel_name_is_an_invalid_argument(
    office: PostOffice, channel: str
) -> None:
    lead = await session_caller(office, "lead")
    await refused_without_change(
        office, ErrorCode.INVALID_ARGUMENT, office.channels.join(lead, channel)
    )


async def test_nobody_leaves_general_or_their_own_project(office: PostOffice) -> None:
    lead = await session_caller(office, "lead", project="shop")
    await refused_without_change(
        office, ErrorCode.FORBIDDEN, office.channels.leave(lead, "#general")
    )
    await refused_without_change(office, ErrorCode.FORBIDDEN, office.channels.leave(lead, "#shop"))


async def test_leaving_a_channel_one_is_not_in_is_not_found(office: PostOffice) -> None:
    lead = await session_caller(office, "lead", project="shop")
    error = await refused_without_change(
        office, ErrorCode.NOT_FOUND, office.channels.leave(lead, "#elsewhere")
    )
    assert error.details == {"channel": "#elsewhere"}


async def test_after_leaving_one_neither_gets_nor_reads_nor_posts(office: PostOffice) -> None:
    lead = await session_caller(office, "lead", project="shop")
    dev = await session_caller(office, "dev", project="shop")
    await office.channels.join(lead, "#ops")
    await office.channels.join(dev, "#ops")
    assert await office.channels.leave(dev, "ops") == {"left": "#ops"}
    assert (await office.mailbox.send(lead, "#ops", "still there?")).to == []
    await refused_without_change(office, ErrorCode.FORBIDDEN, office.channels.history(dev, "#ops"))
    await refused_without_change(
        office, ErrorCode.FORBIDDEN, office.mailbox.send(dev, "#ops", "let me back")
    )
    assert (await office.mailbox.inbox(dev)).messages == []


async def test_history_pages_back_from_a_message_oldest_first(office: PostOffice) -> None:
    lead = await session_caller(office, "lead", project="shop")
    dev = await session_caller(office, "dev", project="shop")
    sent = [await office.mailbox.send(lead, "#shop", f"post {i}") for i in range(5)]
    await office.mailbox.send(lead, "#general", "not in #shop")
    page = await office.channels.history(dev, "#shop", limit=2)
    assert [m.body for m in page] == ["post 3", "post 4"]
    older = await office.channels.history(dev, "#shop", limit=2, before=page[0].id)
    assert [m.body for m in older] == ["post 1", "post 2"]
    assert [m.body for m in await office.channels.history(dev, "shop", before=sent[1].id)] == [
        "post 0"
    ]


async def test_a_blocked_senders_broadcasts_are_dropped_from_the_blockers_history(
    office: PostOffice,
) -> None:
    """As from the inbox: what came before the block was delivered and stays; what came
    after it, and what came before a blocker joined, never reaches them."""
    lead = await session_caller(office, "lead", project="shop")
    dev = await session_caller(office, "dev", project="shop")
    pest = await session_caller(office, "pest", project="shop")
    await office.mailbox.send(pest, "#shop", "before the block")
    await office.directory.block(dev, "pest")
    await office.mailbox.send(pest, "#shop", "after the block")
    await office.mailbox.send(lead, "#shop", "from the lead")
    guest = await session_caller(office, "guest")
    await office.directory.block(guest, "pest")
    await office.channels.join(guest, "#shop")

    assert [m.body for m in await office.channels.history(dev, "#shop")] == [
        "before the block",
        "from the lead",
    ]
    assert [m.body for m in await office.channels.history(guest, "#shop")] == ["from the lead"]
    assert len(await office.channels.history(lead, "#shop")) == 3


async def test_history_before_a_message_of_another_channel_is_not_found(
    office: PostOffice,
) -> None:
    lead = await session_caller(office, "lead", project="shop")
    elsewhere = await office.mailbox.send(lead, "#general", "general chatter")
    await refused_without_change(
        office,
        ErrorCode.NOT_FOUND,
        office.channels.history(lead, "#shop", before=elsewhere.id),
    )


async def test_reading_a_channel_nobody_is_in_is_not_found_as_posting_to_it_is(
    office: PostOffice,
) -> None:
    lead = await session_caller(office, "lead", project="shop")
    await session_caller(office, "writer", project="blog")
    for call in (
        office.channels.history(lead, "#nowhere"),
        office.mailbox.send(lead, "#nowhere", "hello?"),
    ):
        await refused_without_change(office, ErrorCode.NOT_FOUND, call)
    for call in (
        office.channels.history(lead, "#blog"),
        office.mailbox.send(lead, "#blog", "let me in"),
    ):
        await refused_without_change(office, ErrorCode.FORBIDDEN, call)


async def test_a_disabled_agent_is_no_longer_counted_or_reached(office: PostOffice) -> None:
    lead = await session_caller(office, "lead", project="shop")
    await session_caller(office, "retired", project="blog")
    await office.channels.join(lead, "#ops")
    await office.channels.join(await session_caller(office, "gone", project="blog"), "#ops")
    await disable_agent(office.store, "gone")
    await disable_agent(office.store, "retired")
    overview = {c.name: c.members for c in await office.channels.overview(lead)}
    assert overview == {"general": 1, "shop": 1, "ops": 1}
    assert (await office.mailbox.send(lead, "#general", "anyone?")).to == []
    assert (await office.mailbox.send(lead, "#ops", "anyone?")).to == []


async def test_a_broadcast_reaches_a_channel_of_more_members_than_a_statement_takes_values(
    office: PostOffice,
) -> None:
    """PostgreSQL's driver takes at most 32,767 parameters in a statement: a broadcast to
    #general of more agents than that failed there (`unavailable`, as if the database were
    gone) where SQLite delivered it. Every member gets it, on both."""
    lead = await session_caller(office, "lead")
    crowd = [f"member{i}" for i in range(33_000)]

    def arrive(conn: Connection) -> None:
        conn.execute(insert(agents), [{"name": name, "created_at": 1.0} for name in crowd])

    await office.store.write(arrive)
    await office.directory.block(Caller(agent=crowd[-1]), "lead")
    await office.mailbox.send(lead, "#general", "all hands")
    for name in (crowd[0], crowd[20_000]):
        inbox = await office.mailbox.inbox(Caller(agent=name))
        assert [m.body for m in inbox.messages] == ["all hands"]
    assert not (await office.mailbox.inbox(Caller(agent=crowd[-1]))).messages
