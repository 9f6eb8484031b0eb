"""Limits of real `agentpost mcp` processes, configured through AGENTPOST_* variables, in both
revisions: TTL and must_read, the cap on unacknowledged mail, sizes, the send rate, the roster.
Every refusal is an MCP tool error that leads with its code and changes nothing."""

from __future__ import annotations

import json
import time

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from rate_window import inside_one_rate_window
from stdio_agents import Agents, ids, receipt, structured


@pytest.mark.anyio
async def test_unread_mail_expires_after_its_ttl_but_must_read_mail_never_does(
    agents: Agents,
) -> None:
    alice, bob = await agents.start_many("alice", "bob", env={"AGENTPOST_DEFAULT_TTL_S": "1"})
    read_in_time = await alice.call("send", to="bob", body="read me quickly", ttl_s=1)
    assert ids((await bob.call("inbox"))["messages"]) == [read_in_time["id"]]
    short = await alice.call("send", to="bob", body="lunch in 5?", ttl_s=1)
    default = await alice.call("send", to="bob", body="coffee?")  # default_ttl_s applies
    long = await alice.call("send", to="bob", body="retro on Friday", ttl_s=600)
    vital = await alice.call("send", to="bob", body="rotate your key", ttl_s=1, must_read=True)
    mine = {m["id"]: m for m in (await alice.call("sent"))["messages"]}
    lifetimes = [
        round(mine[m["id"]]["expires_at"] - mine[m["id"]]["created_at"])
        for m in (short, default, long)
    ]
    assert lifetimes == [1, 1, 600]
    assert mine[vital["id"]]["expires_at"] is None  # its TTL does not apply: it never expires

    # Time itself is the subject here: sleep until the one-second TTLs have passed.
    due = max(mine[m["id"]]["expires_at"] for m in (short, default))
    await anyio.sleep(max(0.0, due - time.time()) + 0.2)

    assert (await bob.call("whoami"))["unread"] == 2
    shown = await alice.call("sent")
    for gone in (short, default):
        tombstone = receipt(shown, gone["id"], "bob")
        assert tombstone["state"] == "expired"
        assert tombstone["read_at"] is None
        assert tombstone["expired_at"] is not None
    assert receipt(shown, vital["id"], "bob")["state"] == "queued"
    assert receipt(shown, read_in_time["id"], "bob")["state"] == "read"  # read mail stays

    assert ids((await bob.call("inbox"))["messages"]) == [long["id"], vital["id"]]
    everything = await bob.call("inbox", unread_only=False)
    assert ids(everything["messages"]) == [read_in_time["id"], long["id"], vital["id"]]
    assert (await bob.call("ack", ids=[short["id"]]))["not_found"] == [short["id"]]
    after = await alice.call("sent")
    assert [receipt(after, m["id"], "bob")["state"] for m in (short, default, vital)] == [
        "expired",
        "expired",
        "read",
    ]


@pytest.mark.anyio
async def test_sizes_the_inbox_cap_and_the_send_rate_come_from_configuration(
    agents: Agents,
) -> None:
    limits = {
        "AGENTPOST_MAX_BODY_BYTES": "64",
        "AGENTPOST_MAX_SUBJECT_CHARS": "10",
        "AGENTPOST_MAX_DATA_BYTES": "32",
        "AGENTPOST_MAX_UNACKED": "2",
        "AGENTPOST_SEND_RATE_PER_MINUTE": "5",
    }
    alice, bob = await agents.start_many("alice", "bob", env=limits)
    before = await alice.mailbox_state(), await bob.mailbox_state()
    await inside_one_rate_window(needed_s=40)  # every send of this test falls in one minute

    # Too large: bodies are measured in UTF-8 bytes (33 × "é" is 33 characters, 66 bytes).
    assert await alice.refused("send", to="bob", body="é" * 33) == "too_large"
    assert await alice.refused("send", to="bob", body="ok", subject="s" * 11) == "too_large"
    big = {"k": "x" * 25}
    assert len(json.dumps(big, separators=(",", ":"))) == 33
    assert await alice.refused("send", to="bob", body="ok", data=big) == "too_large"
    assert (await alice.mailbox_state(), await bob.mailbox_state()) == before

    # Right at each limit is fine. Two unacknowledged messages fill bob's inbox.
    first = await alice.call("send", to="bob", body="é" * 32)
    await alice.call("send", to="bob", body="ok", subject="s" * 10)
    before = await alice.mailbox_state(), await bob.mailbox_state()
    full = await alice.result("send", to="bob", body="ok", data={"k": "x" * 24})
    assert full.is_error is True
    error = structured(full)["error"]
    assert error["code"] == "inbox_full"
    assert error["details"] == {"full": ["bob"]}
    assert error["retry_after_s"] > 0
    assert await alice.refused("send", to=["bob"], body="again") == "inbox_full"
    assert (await alice.mailbox_state(), await bob.mailbox_state()) == before

    # A broadcast still goes out, past the full inbox.
    broadcast = await alice.call("send", to="#apollo", body="all hands")
    assert broadcast["to"] == []
    assert broadcast["skipped_full"] == ["bob"]
    assert (await bob.mailbox_state())["inbox"] == before[1]["inbox"]
    await bob.call("inbox")  # read is not handled: still unacknowledged
    assert await alice.refused("send", to="bob", body="again") == "inbox_full"
    await bob.call("ack", ids=[first["id"]])
    fits = await alice.call("send", to="bob", body="ok", data={"k": "x" * 24})
    assert ids((await bob.call("inbox"))["messages"]) == [fits["id"]]

    # The fifth send in a minute is the last; refusals above did not count against it.
    for message in (await bob.call("inbox", unread_only=False))["messages"]:
        await bob.call("ack", ids=[message["id"]])
    await alice.call("send", to="bob", body="five")
    before = await alice.mailbox_state(), await bob.mailbox_state()
    limited = await alice.result("send", to="bob", body="one too many")
    assert limited.is_error is True
    assert structured(limited)["error"]["code"] == "rate_limited"
    assert 0 < structured(limited)["error"]["retry_after_s"] <= 60
    assert (await alice.mailbox_state(), await bob.mailbox_state()) == before
    await bob.call("send", to="alice", body="fine here")  # the rate is per agent


@pytest.mark.anyio
async def test_the_roster_limits_who_may_run_and_receive(agents: Agents) -> None:
    roster = {"AGENTPOST_AGENTS": '["alice", "bob"]'}
    alice = await agents.start("alice", env=roster)

    # A session under a name off the roster does not start, and says why on stderr.
    with pytest.RaisesGroup(
        pytest.RaisesExc(MCPError, match="Connection closed"), flatten_subgroups=True
    ):
        await agents.start("carol", env=roster)
    assert "error: forbidden: 'carol' is not on the roster" in agents.tried[-1].stderr()
    who = (await alice.call("who", include_offline=True))["agents"]
    assert {a["name"]: a["online"] for a in who} == {"alice": True}

    # Mail to a roster name that never ran waits for it; a name off the roster is refused.
    waiting = await alice.call("send", to="bob", body="welcome aboard")
    assert waiting["to"] == ["bob"]
    before = await alice.mailbox_state()
    assert await alice.refused("send", to="carol", body="hello?") == "unknown_recipient"
    assert await alice.refused("send", to=["bob", "carol"], body="hello?") == "unknown_recipient"
    assert await alice.mailbox_state() == before

    bob = await agents.start("bob", env=roster)
    assert ids((await bob.call("inbox"))["messages"]) == [waiting["id"]]
    assert await bob.refused("register", name="carol") == "forbidden"
    assert (await bob.call("whoami"))["agent"] == "bob"
