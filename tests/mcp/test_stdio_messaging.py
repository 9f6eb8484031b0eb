"""Mail between real `agentpost mcp` processes on one database file, in both revisions: send,
peek, inbox, ack and the sender's receipts; replies, threads and structured data."""

from __future__ import annotations

import json
from typing import Any

import pytest

from stdio_agents import Agent, Agents, ids, older_page_call, receipt, structured, text_of

DATA = {
    "pr": 12,
    "ratio": 0.25,
    "ok": True,
    "missing": None,
    "files": ["src/a.py", "docs/ü.md"],
    "nested": {"empty": {}, "list": [], "big": 2**53, "text": 'line\nbreak "quoted" ✓'},
}


@pytest.mark.anyio
async def test_receipts_follow_mail_from_queued_to_read_to_acked_and_replies_share_a_thread(
    agents: Agents,
) -> None:
    alice, bob = await agents.start_many("alice", "bob")

    sent = await alice.call("send", to="bob", body="Please review PR 12", subject="review")
    assert sent["to"] == ["bob"]
    assert sent["thread_id"] == sent["id"]
    mid = sent["id"]
    queued = receipt(await alice.call("sent"), mid, "bob")
    assert queued["state"] == "queued"
    assert queued["read_at"] is None
    assert queued["acked_at"] is None
    assert (await bob.call("whoami"))["unread"] == 1

    peeked = await bob.call("inbox", peek=True)
    assert [(m["id"], m["state"]) for m in peeked["messages"]] == [(mid, "queued")]
    assert peeked["unread"] == 1
    assert receipt(await alice.call("sent"), mid, "bob")["state"] == "queued"

    inbox = await bob.call("inbox")
    [message] = inbox["messages"]
    assert message["id"] == mid
    assert message["from"] == "alice"
    assert message["to"] == ["bob"]
    assert message["channel"] is None
    assert message["subject"] == "review"
    assert message["body"] == "Please review PR 12"
    assert message["state"] == "read"
    assert message["trust"] == "verified"
    assert inbox["unread"] == 0
    read = receipt(await alice.call("sent"), mid, "bob")
    assert read["state"] == "read"
    assert read["read_at"] >= message["created_at"]
    assert read["acked_at"] is None
    assert (await bob.call("inbox"))["messages"] == []  # read mail is not new any more

    # Acknowledging an unknown id, or someone else's mail, changes nothing.
    before = await bob.mailbox_state(), await alice.mailbox_state()
    assert await bob.call("ack", ids=["m_doesnotexist"]) == {
        "acked": [],
        "not_found": ["m_doesnotexist"],
        "unread": 0,
    }
    assert (await alice.call("ack", ids=[mid]))["not_found"] == [mid]  # not on bob's behalf
    assert (await bob.mailbox_state(), await alice.mailbox_state()) == before

    assert await bob.call("ack", ids=[mid]) == {"acked": [mid], "not_found": [], "unread": 0}
    acked = receipt(await alice.call("sent"), mid, "bob")
    assert acked["state"] == "acked"
    assert acked["read_at"] == read["read_at"]
    assert acked["acked_at"] >= acked["read_at"]
    everything = await bob.call("inbox", unread_only=False)
    assert [(m["id"], m["state"]) for m in everything["messages"]] == [(mid, "acked")]
    assert (await bob.call("ack", ids=[mid, mid]))["acked"] == [mid]  # again: no change
    assert receipt(await alice.call("sent"), mid, "bob") == acked

    # Acknowledged without being read first: the receipt says it was read then too.
    unread = (await alice.call("send", to="bob", body="FYI"))["id"]
    await bob.call("ack", ids=[unread])
    direct = receipt(await alice.call("sent"), unread, "bob")
    assert direct["state"] == "acked"
    assert direct["read_at"] == direct["acked_at"]

    # Replies join their parent's thread, which reads oldest first, data and all.
    question = await alice.call("send", to="bob", body="Can you take this?", data=DATA)
    answer = await bob.call(
        "send", to="alice", body="Yes.", reply_to=question["id"], data=["ok", 1, None]
    )
    assert answer["thread_id"] == question["thread_id"] == question["id"]
    thanks = await alice.call("send", to="bob", body="Thanks!", reply_to=answer["id"], data="ta")
    assert thanks["thread_id"] == question["thread_id"]
    elsewhere = await alice.call("send", to="bob", body="Unrelated", thread_id="lunch-plans")
    assert elsewhere["thread_id"] == "lunch-plans"

    for reader in (alice, bob):
        thread = await reader.call("thread", thread_id=question["thread_id"])
        assert thread["thread_id"] == question["thread_id"]
        assert ids(thread["messages"]) == [question["id"], answer["id"], thanks["id"]]
        assert [m["reply_to"] for m in thread["messages"]] == [None, question["id"], answer["id"]]
        assert [m["from"] for m in thread["messages"]] == ["alice", "bob", "alice"]
        assert [m["data"] for m in thread["messages"]] == [DATA, ["ok", 1, None], "ta"]
    shown = text_of(await bob.result("thread", thread_id=question["thread_id"]))
    assert "data: " + json.dumps(DATA, ensure_ascii=False, sort_keys=True) in shown
    by_reply = await bob.call("thread", thread_id=thanks["id"])  # any message names its thread
    assert by_reply["thread_id"] == question["thread_id"]
    assert ids(by_reply["messages"]) == [question["id"], answer["id"], thanks["id"]]

    assert ids((await bob.call("inbox", thread_id="lunch-plans"))["messages"]) == [elsewhere["id"]]
    # Reading one thread leaves the other's mail unread.
    waiting = (await bob.call("inbox"))["messages"]
    assert ids(waiting) == [question["id"], thanks["id"]]
    assert waiting[0]["data"] == DATA
    [plain] = [m for m in (await alice.call("sent"))["messages"] if m["id"] == elsewhere["id"]]
    assert plain["data"] is None


@pytest.mark.anyio
async def test_sent_a_thread_and_a_search_page_back_with_before(agents: Agents) -> None:
    alice, bob = await agents.start_many("alice", "bob")
    root = await alice.call("send", to="bob", body="rollout step 0")
    for n in (1, 2):
        await alice.call("send", to="bob", body=f"rollout step {n}", reply_to=root["id"])

    sent = (await alice.call("sent", limit=2))["messages"]
    assert [m["body"] for m in sent] == ["rollout step 2", "rollout step 1"]
    older = (await alice.call("sent", limit=2, before=sent[-1]["id"]))["messages"]
    assert [m["body"] for m in older] == ["rollout step 0"]

    newest = (await bob.call("thread", thread_id=root["id"], limit=2))["messages"]
    assert [m["body"] for m in newest] == ["rollout step 1", "rollout step 2"]
    start = await bob.call("thread", thread_id=root["id"], limit=2, before=newest[0]["id"])
    assert [m["body"] for m in start["messages"]] == ["rollout step 0"]

    found = (await bob.call("search", query="rollout", limit=2))["messages"]
    rest = await bob.call("search", query="rollout", limit=2, before=found[-1]["id"])
    assert [m["body"] for m in rest["messages"]] == ["rollout step 0"]


@pytest.mark.anyio
async def test_the_whole_inbox_pages_back_with_before(agents: Agents) -> None:
    alice, bob = await agents.start_many("alice", "bob")
    for n in range(3):
        await alice.call("send", to="bob", body=f"note {n}")

    newest = (await bob.call("inbox", unread_only=False, limit=2))["messages"]
    assert [m["body"] for m in newest] == ["note 1", "note 2"]
    older = await bob.call("inbox", unread_only=False, limit=2, before=newest[0]["id"])
    assert [m["body"] for m in older["messages"]] == ["note 0"]
    assert await bob.refused("inbox", before=newest[0]["id"]) == "invalid_argument"
    assert await bob.refused("inbox", unread_only=False, before="m_nosuch") == "not_found"


async def page_by_page(agent: Agent, tool: str, **arguments: Any) -> list[list[str]]:
    """The bodies of each page of a listing, read as a model reads on: each full page's text
    names the call for the page before it, and that call is the next one made."""
    pages: list[list[str]] = []
    call: tuple[str, dict[str, Any]] | None = (tool, arguments)
    while call is not None:
        assert len(pages) < 5, f"{tool} pages on and on: {pages}"
        result = await agent.result(call[0], **call[1])
        assert not result.is_error, text_of(result)
        pages.append([m["body"] for m in structured(result)["messages"]])
        call = older_page_call(result)
    return pages


@pytest.mark.anyio
async def test_a_full_page_says_which_call_gives_the_page_before_it(agents: Agents) -> None:
    """A model shown the newest page of a thread, a search, its sent mail, a channel or its
    whole inbox was not told that more was older, nor how to page back: only `tasks` said so."""
    alice, bob = await agents.start_many("alice", "bob")
    await bob.call("join", channel="#ops")
    root = await alice.call("send", to="bob", body="rollout step 0", subject="rollout")
    for n in (1, 2):
        await alice.call("send", to="bob", body=f"rollout step {n}", reply_to=root["id"])
    await alice.call("join", channel="#ops")
    for n in range(3):
        await alice.call("send", to="#ops", body=f"ops note {n}")

    steps = ["rollout step 0", "rollout step 1", "rollout step 2"]
    assert await page_by_page(bob, "thread", thread_id=root["id"], limit=2) == [
        steps[1:],
        steps[:1],
    ]
    assert await page_by_page(bob, "search", query="rollout step", limit=2) == [
        steps[:0:-1],
        steps[:1],
    ]
    assert await page_by_page(alice, "sent", limit=4) == [
        ["ops note 2", "ops note 1", "ops note 0", "rollout step 2"],
        ["rollout step 1", "rollout step 0"],
    ]
    notes = ["ops note 0", "ops note 1", "ops note 2"]
    assert await page_by_page(bob, "read_channel", channel="ops", limit=2) == [
        notes[1:],
        notes[:1],
    ]
    # Peeked through the whole inbox: the call it names peeks too, and leaves all unread.
    assert await page_by_page(bob, "inbox", unread_only=False, peek=True, limit=5) == [
        [*steps[1:], *notes],
        steps[:1],
    ]
    assert (await bob.call("inbox", peek=True, limit=10))["unread"] == 6
    in_thread = await page_by_page(
        bob, "inbox", unread_only=False, thread_id=root["id"], peek=True, limit=4
    )
    assert in_thread == [steps]  # not full: nothing more is named

    # Unread mail takes no cursor: its next page is the next call, and none is named.
    unread = await bob.result("inbox", limit=2)
    assert older_page_call(unread) is None
