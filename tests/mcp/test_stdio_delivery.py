"""Every way a real `agentpost mcp` session learns of mail another process sent, in both
revisions: the unread count and urgent previews riding on every answer, a blocking `wait`, and
the `agentpost://inbox` resource notification that arrives with no call in between
(2025-11-25 `resources/subscribe`, 2026-07-28 `subscriptions/listen`)."""

from __future__ import annotations

import json
import re
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp.shared.exceptions import MCPError

from backends import agents as office_agents
from stdio_agents import (
    INBOX_URI,
    WAKE_TIMEOUT_S,
    Agent,
    Agents,
    Ledger,
    ids,
    receipt,
    text_of,
)


async def read_inbox(agent: Agent) -> dict[str, Any]:
    read = await agent.mcp.read_resource(INBOX_URI, cache_mode="bypass")
    [contents] = read.contents
    assert isinstance(contents, types.TextResourceContents)
    assert contents.mime_type == "application/json"
    loaded = json.loads(contents.text)
    assert isinstance(loaded, dict)
    return loaded


@pytest.mark.anyio
async def test_urgent_mail_an_answer_shows_in_full_is_not_previewed_in_it_again(
    agents: Agents,
) -> None:
    alice, bob = await agents.start_many("alice", "bob")
    await bob.call("whoami")
    urgent = await alice.call("send", to="bob", body="the build is red", priority="urgent")
    other = await alice.call("send", to="bob", body="and prod too", priority="urgent")

    shown = await bob.result("thread", thread_id=urgent["id"])
    assert shown.structured_content is not None
    assert [p["id"] for p in shown.structured_content["urgent"]] == [other["id"]]
    assert text_of(shown).count("the build is red") == 1
    assert "urgent" not in await bob.call("inbox", peek=True)  # both told by now


@pytest.mark.anyio
async def test_a_session_learns_of_new_mail_from_every_answer_from_wait_and_by_push(
    agents: Agents,
) -> None:
    alice, bob = await agents.start_many("alice", "bob")

    # 1. Piggyback: every answer carries the unread count, and urgent mail is previewed once.
    assert (await bob.call("whoami"))["unread"] == 0
    await alice.call("send", to="bob", body="normal news")
    urgent_body = "Production is down: " + "x" * 300
    urgent = await alice.call(
        "send", to="bob", body=urgent_body, subject="outage", priority="urgent"
    )

    first = await bob.result("who")
    assert first.structured_content is not None
    assert first.structured_content["unread"] == 2
    [preview] = first.structured_content["urgent"]
    assert preview["id"] == urgent["id"]
    assert preview["from"] == "alice"
    assert preview["subject"] == "outage"
    assert preview["priority"] == "urgent"
    assert preview["preview"] == urgent_body[:200] + "…"
    assert "Urgent mail arrived (1)" in text_of(first)
    assert "[agentpost] unread: 2" in text_of(first)

    # Told once: later answers carry the count, not the preview again.
    for tool, arguments in [
        ("whoami", {}),
        ("who", {"include_offline": True}),
        ("channels", {}),
        ("sent", {}),
        ("search", {"query": "news"}),
        ("set_status", {"status": "active"}),
        ("inbox", {"peek": True}),
    ]:
        answer = await bob.call(tool, **arguments)
        assert answer["unread"] == 2, tool
        assert "urgent" not in answer, tool

    only_urgent = await bob.call("inbox", urgent_only=True)
    assert ids(only_urgent["messages"]) == [urgent["id"]]
    assert only_urgent["unread"] == 1
    second = await alice.call("send", to="bob", body="Also the database", priority="urgent")
    assert [p["id"] for p in (await bob.call("whoami"))["urgent"]] == [second["id"]]
    assert "urgent" not in await bob.call("whoami")
    assert "urgent" not in await alice.call("whoami")  # a sender is not told of its own mail
    assert len((await bob.call("inbox"))["messages"]) == 2

    # 2. `wait` answers `timed_out` when nothing comes, and wakes when another process sends.
    quiet = await bob.result("wait", timeout_s=0.2)
    assert quiet.is_error is False
    assert quiet.structured_content == {"messages": [], "timed_out": True, "unread": 0}

    woken: dict[str, Any] = {}

    async def wait_for_mail(**arguments: Any) -> None:
        woken.update(await bob.call("wait", timeout_s=300, **arguments))

    with anyio.fail_after(WAKE_TIMEOUT_S):  # far below the wait's own 300 s
        async with anyio.create_task_group() as group:
            group.start_soon(wait_for_mail)
            await bob.call("whoami")  # answered while the wait is held open in bob's server
            assert woken == {}
            sent = await alice.call("send", to="bob", body="wake up")
    assert woken["timed_out"] is False
    assert woken["unread"] == 0
    assert [(m["id"], m["state"]) for m in woken["messages"]] == [(sent["id"], "read")]
    assert receipt(await alice.call("sent"), sent["id"], "bob")["state"] == "read"

    # A wait on one thread sleeps through other mail, and leaves it unread.
    other = await alice.call("send", to="bob", body="not this one")
    in_thread = await bob.call("wait", timeout_s=0.2, thread_id=sent["thread_id"])
    assert in_thread == {"messages": [], "timed_out": True, "unread": 1}
    woken.clear()
    with anyio.fail_after(WAKE_TIMEOUT_S):
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: wait_for_mail(thread_id=sent["thread_id"]))
            await bob.call("whoami")
            reply = await alice.call("send", to="bob", body="this one", reply_to=sent["id"])
    assert ids(woken["messages"]) == [reply["id"]]
    assert woken["unread"] == 1
    assert ids((await bob.call("inbox"))["messages"]) == [other["id"]]

    # 3. Push: a subscriber is told its inbox changed, with no call of its own in between.
    listed = (await bob.mcp.list_resources()).resources
    assert [str(r.uri) for r in listed] == [INBOX_URI]
    assert await read_inbox(bob) == {
        "agent": "bob",
        "unread": 0,
        "more": 0,
        "messages": [],
        "framed": "0 unread",
    }

    async with bob.inbox_updates() as next_update:
        hello = await alice.call("send", to="bob", body="are you there?")
        with anyio.fail_after(WAKE_TIMEOUT_S):
            assert await next_update() == INBOX_URI
        standup = await alice.call("send", to="#general", body="standup moved")
        with anyio.fail_after(WAKE_TIMEOUT_S):
            assert await next_update() == INBOX_URI

    # Push never marks anything read; the resource shows the mail, the inbox still has it.
    inbox = await read_inbox(bob)
    assert inbox["unread"] == 2
    assert ids(inbox["messages"]) == [hello["id"], standup["id"]]
    assert [m["state"] for m in inbox["messages"]] == ["queued", "queued"]
    # ...and what a model is shown of it is framed, like every tool result.
    nonce = re.search(r"Text inside <message-([0-9a-f]+)> frames", inbox["framed"]).group(1)
    assert inbox["framed"].count(f"<message-{nonce} ") == 2
    assert inbox["framed"].count(f"</message-{nonce}>") == 2
    assert "are you there?" in inbox["framed"]
    assert ids((await bob.call("inbox"))["messages"]) == [hello["id"], standup["id"]]


@pytest.mark.anyio
async def test_the_inbox_resource_says_how_many_more_unread_wait_past_the_oldest_50(
    agents: Agents, ledger: Ledger
) -> None:
    """A model shown 50 messages would take them for all its mail, unless told of the rest."""
    bob = await agents.start("bob")
    (alice,) = await office_agents(ledger.office, "alice")
    for n in range(52):
        await ledger.office.mailbox.send(alice, "bob", f"note {n}")
    inbox = await read_inbox(bob)
    assert [m["body"] for m in inbox["messages"]] == [f"note {n}" for n in range(50)]
    assert (inbox["unread"], inbox["more"]) == (52, 2)
    title = inbox["framed"].splitlines()[0]
    assert title.startswith("52 unread: the oldest 50 here, 2 more after them; `inbox` reads")
    await bob.call("inbox", limit=51)
    inbox = await read_inbox(bob)
    assert (inbox["unread"], inbox["more"], len(inbox["messages"])) == (1, 0, 1)
    assert inbox["framed"].splitlines()[0] == "1 unread"


@pytest.mark.anyio
async def test_a_resource_that_is_not_offered_is_not_found_not_the_inbox(agents: Agents) -> None:
    alice = await agents.start("alice")
    for uri in ("agentpost://nope", "file:///etc/passwd"):
        with pytest.raises(MCPError) as missing:
            await alice.mcp.read_resource(uri, cache_mode="bypass")
        assert missing.value.message.startswith("not_found: ")
