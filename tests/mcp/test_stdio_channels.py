"""Channels and search between real `agentpost mcp` processes, in both revisions.

alice and bob work on project apollo, dave on project zeus (AGENTPOST_PROJECT).
"""

from __future__ import annotations

import pytest

from stdio_agents import Agents, gather, ids, structured, text_of


@pytest.mark.anyio
async def test_broadcasts_reach_their_members_never_the_sender_and_search_sees_the_same(
    agents: Agents,
) -> None:
    alice, bob, dave = await gather(
        agents.start("alice"), agents.start("bob"), agents.start("dave", project="zeus")
    )

    everyone = await alice.call("send", to="#general", body="budget freeze announced")
    assert everyone["channel"] == "#general"
    assert sorted(everyone["to"]) == ["bob", "dave"]
    project = await alice.call("send", to="#apollo", body="budget meeting moved")
    assert project["channel"] == "#apollo"
    assert project["to"] == ["bob"]
    direct = await alice.call("send", to=["bob", "dave", "bob"], body="quarterly budget draft")
    assert direct["to"] == ["bob", "dave"]

    for_bob = (await bob.call("inbox"))["messages"]
    assert ids(for_bob) == [everyone["id"], project["id"], direct["id"]]
    assert [m["channel"] for m in for_bob] == ["#general", "#apollo", None]
    assert [m["to"] for m in for_bob] == [["#general"], ["#apollo"], ["bob", "dave"]]
    assert ids((await dave.call("inbox", peek=True))["messages"]) == [everyone["id"], direct["id"]]
    assert (await alice.call("inbox", unread_only=False, peek=True))["messages"] == []

    # One receipt per recipient, each with its own state.
    receipts = {
        m["id"]: {r["to"]: r["state"] for r in m["receipts"]}
        for m in (await alice.call("sent"))["messages"]
    }
    assert receipts == {
        everyone["id"]: {"bob": "read", "dave": "queued"},
        project["id"]: {"bob": "read"},
        direct["id"]: {"bob": "read", "dave": "queued"},
    }

    # Search shows each reader what it may see: its mail, its channels, what it sent.
    assert ids((await alice.call("search", query="budget"))["messages"]) == [
        direct["id"],
        project["id"],
        everyone["id"],
    ]
    assert len((await bob.call("search", query="budget"))["messages"]) == 3
    assert text_of(await bob.result("search", query="budget")).startswith("3 matches for ")
    assert text_of(await bob.result("search", query="nonexistentword")).startswith("0 matches")
    assert ids((await dave.call("search", query="budget"))["messages"]) == [
        direct["id"],
        everyone["id"],
    ]
    assert ids((await dave.call("search", query="budget draft"))["messages"]) == [direct["id"]]
    assert (await dave.call("search", query="meeting"))["messages"] == []
    assert (await bob.call("search", query="nonexistentword"))["messages"] == []
    [found] = (await bob.call("search", query="quarterly"))["messages"]
    assert found["body"] == "quarterly budget draft"
    assert found["state"] == "read"


@pytest.mark.anyio
async def test_joining_a_channel_opens_its_history_and_later_broadcasts(agents: Agents) -> None:
    alice, dave = await gather(agents.start("alice"), agents.start("dave", project="zeus"))
    before = await alice.call("send", to="#apollo", body="design notes v1")

    assert await dave.refused("read_channel", channel="#apollo") == "forbidden"
    assert await dave.refused("send", to="#apollo", body="let me in") == "forbidden"
    names = {c["name"]: c for c in (await dave.call("channels"))["channels"]}
    assert names["#general"]["joined"] is True
    assert names["#zeus"]["joined"] is True
    assert names["#apollo"]["joined"] is False

    joined = await dave.call("join", channel="#apollo")
    assert joined["name"] == "#apollo"
    assert joined["joined"] is True
    assert joined["members"] == 2
    # Broadcasts are delivered at send time: the history shows the old one, the inbox does not.
    assert ids((await dave.call("read_channel", channel="#apollo"))["messages"]) == [before["id"]]
    assert (await dave.call("inbox", peek=True))["messages"] == []
    after = await alice.call("send", to="#apollo", body="design notes v2")
    assert after["to"] == ["dave"]
    assert ids((await dave.call("inbox"))["messages"]) == [after["id"]]
    assert (await dave.call("send", to="#apollo", body="thanks"))["to"] == ["alice"]

    assert (await dave.call("leave", channel="#apollo"))["left"] == "#apollo"
    assert await dave.refused("leave", channel="#apollo") == "not_found"
    assert await dave.refused("leave", channel="#zeus") == "forbidden"  # its own project
    assert await dave.refused("leave", channel="#general") == "forbidden"
    last = await alice.call("send", to="#apollo", body="design notes v3")
    assert last["to"] == []
    assert (await dave.call("inbox", peek=True))["messages"] == []

    # A channel's history pages backwards, oldest first within a page.
    for agent in (alice, dave):
        await agent.call("join", channel="ops")
    posted = [
        (await alice.call("send", to="#ops", body=f"deploy step {n}"))["id"] for n in range(1, 6)
    ]

    async def page(limit: int, before: str | None = None) -> list[str]:
        found = await dave.call("read_channel", channel="#ops", limit=limit, before=before)
        assert found["channel"] == "#ops"
        return ids(found["messages"])

    assert await page(2) == posted[3:5]
    assert await page(2, before=posted[3]) == posted[1:3]
    assert await page(2, before=posted[1]) == posted[0:1]
    assert await page(20, before=posted[0]) == []
    bare = await alice.call("read_channel", channel="ops", limit=20)
    assert (bare["channel"], ids(bare["messages"])) == ("#ops", posted)  # named as REST names it
    assert await dave.refused("read_channel", channel="#ops", before="m_nope") == "not_found"

    ops = [c for c in (await dave.call("channels"))["channels"] if c["name"] == "#ops"]
    assert ops == [{"name": "#ops", "members": 2, "joined": True, "implicit": False}]


@pytest.mark.anyio
async def test_a_broadcast_tells_the_model_which_members_a_full_inbox_kept_it_from(
    agents: Agents,
) -> None:
    """The text of `send` named only the channel: a model that reads the text (not the
    structured `skipped_full`) took the broadcast for delivered to every member."""
    alice, _bob, _carol = await gather(
        agents.start("alice", env={"AGENTPOST_MAX_UNACKED": "1"}),
        agents.start("bob"),
        agents.start("carol"),
    )
    await alice.call("send", to="bob", body="fills bob's inbox")
    result = await alice.result("send", to="#apollo", body="standup in 5")
    sent = structured(result)
    assert (sent["to"], sent["skipped_full"]) == (["carol"], ["bob"])
    assert text_of(result).splitlines()[0].endswith(" Not delivered to bob: inbox full.")
