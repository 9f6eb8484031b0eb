"""Every refusal the stdio server can give, through real processes in both revisions: an MCP tool
error (`is_error`) whose text starts with the stable code, and nothing changed afterwards.

`rate_limited` and `inbox_full` need limits lowered by configuration: see test_stdio_limits.py.
`gone` (mail to a disabled agent) cannot be reached over stdio: nothing here disables an agent.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentpost.store import migrate
from service_process import eventually
from stdio_agents import Agents, text_of

SUBJECT_OVER_DEFAULT = "s" * 201
BODY_OVER_DEFAULT = "b" * 32769


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def refusals(mid: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(code, tool, arguments), all asked by bob; `mid` is alice's message to bob."""
    return [
        ("invalid_argument", "send", {"to": "Bob Smith", "body": "hi"}),
        ("invalid_argument", "send", {"to": "alice", "body": "   "}),
        ("invalid_argument", "send", {"to": "alice"}),
        ("invalid_argument", "send", {"to": [], "body": "hi"}),
        ("invalid_argument", "send", {"to": ["alice", "#ops"], "body": "hi"}),
        ("invalid_argument", "send", {"to": "alice", "body": "hi", "priority": "asap"}),
        ("invalid_argument", "send", {"to": "alice", "body": "hi", "ttl_s": 0}),
        ("invalid_argument", "send", {"to": "alice", "body": "hi", "ttl_s": 1e300}),
        ("invalid_argument", "send", {"to": "alice", "body": "hi", "subject": "two\nlines"}),
        ("invalid_argument", "send", {"to": "alice", "body": "hi", "thread_id": "t" * 65}),
        (
            "invalid_argument",
            "send",
            {"to": "alice", "body": "re", "reply_to": mid, "thread_id": "t"},
        ),
        ("invalid_argument", "send", {"to": "alice", "body": "hi", "data": nested(65)}),
        ("invalid_argument", "send", {"to": "alice", "body": "hi", "from": "alice"}),
        ("invalid_argument", "send", {"to": "alice", "body": "hi", "must_read": "yes"}),
        ("invalid_argument", "inbox", {"limit": True}),
        ("invalid_argument", "inbox", {"limit": "5.5"}),
        ("invalid_argument", "who", {"include_offline": "yes"}),
        ("invalid_argument", "inbox", {"limit": 0}),
        ("invalid_argument", "inbox", {"limit": 501}),
        ("invalid_argument", "sent", {"limit": -1}),
        ("invalid_argument", "wait", {"timeout_s": -1}),
        ("invalid_argument", "ack", {"ids": [1, 2]}),
        ("invalid_argument", "search", {"query": "   "}),
        ("invalid_argument", "set_status", {"status": "sleeping"}),
        ("invalid_argument", "register", {"name": "Not Valid"}),
        ("invalid_argument", "join", {"channel": "#No Spaces"}),
        ("not_found", "thread", {"thread_id": "no-such-thread"}),
        ("not_found", "send", {"to": "alice", "body": "hi", "reply_to": "m_nope"}),
        ("not_found", "send", {"to": "#nowhere", "body": "hi"}),
        ("not_found", "leave", {"channel": "#ops"}),
        ("not_found", "read_channel", {"channel": "#general", "before": "m_nope"}),
        ("unknown_recipient", "send", {"to": "nobody", "body": "hi"}),
        ("unknown_recipient", "send", {"to": ["alice", "nobody"], "body": "hi"}),
        ("forbidden", "send", {"to": "#ops", "body": "let me in"}),
        ("forbidden", "read_channel", {"channel": "#ops"}),
        ("forbidden", "leave", {"channel": "#general"}),
        ("forbidden", "leave", {"channel": "#apollo"}),
        ("forbidden", "register", {"name": "system"}),
        ("forbidden", "register", {"name": "agentpost"}),
        ("conflict", "register", {"name": "alice"}),
        ("too_large", "send", {"to": "alice", "body": BODY_OVER_DEFAULT}),
        ("too_large", "send", {"to": "alice", "body": "hi", "subject": SUBJECT_OVER_DEFAULT}),
        ("too_large", "set_status", {"objective": "o" * 2001}),
        ("too_large", "register", {"description": "d" * 2001}),
        ("too_large", "search", {"query": "q" * 501}),
    ]


@pytest.mark.anyio
async def test_every_refusal_leads_with_its_code_and_changes_nothing(agents: Agents) -> None:
    alice, bob = await agents.start_many("alice", "bob")
    await alice.call("join", channel="#ops")
    await alice.call("send", to="#ops", body="ops only")
    mid = (await alice.call("send", to="bob", body="unread", priority="urgent"))["id"]
    await bob.call("send", to="alice", body="hello", reply_to=mid)
    before = await alice.mailbox_state(), await bob.mailbox_state()

    seen: set[str] = set()
    for code, tool, arguments in refusals(mid):
        assert await bob.refused(tool, **arguments) == code, (tool, arguments)
        assert (await alice.mailbox_state(), await bob.mailbox_state()) == before, (
            tool,
            arguments,
        )
        seen.add(code)
    assert seen == {
        "invalid_argument",
        "not_found",
        "unknown_recipient",
        "forbidden",
        "conflict",
        "too_large",
    }
    assert (await bob.call("whoami"))["agent"] == "bob"


@pytest.mark.anyio
async def test_an_unknown_argument_is_refused_naming_the_arguments_the_tool_takes(
    agents: Agents,
) -> None:
    """`unknown argument: unread` said what was wrong, not what was right: a model that
    guessed a name had to go back to the schema, or guess again."""
    [alice] = await agents.start_many("alice")
    result = await alice.result("inbox", unread=False)
    assert await alice.refused("inbox", unread=False) == "invalid_argument"
    assert text_of(result) == (
        "invalid_argument: unknown argument: unread; inbox takes unread_only, limit,"
        " thread_id, urgent_only, peek, before"
    )
    assert result.structured_content is not None
    details = result.structured_content["error"]["details"]
    assert details["arguments"] == [
        "unread_only", "limit", "thread_id", "urgent_only", "peek", "before"
    ]  # fmt: skip
    assert text_of(await alice.result("whoami", me=True)).endswith("; whoami takes none")


@pytest.mark.anyio
async def test_text_that_reads_as_json_stays_text_where_text_is_taken(agents: Agents) -> None:
    """A subject `["draft"]` was refused as no string, and a thread id `null` was dropped:
    JSON text is read as its value only where the argument would refuse it as text (a list
    of recipients sent as its JSON text still is one)."""
    alice, bob = await agents.start_many("alice", "bob")
    sent = await alice.call(
        "send", to='["bob"]', body="b", subject='["draft"]', thread_id="null", data="null"
    )
    [message] = (await bob.call("inbox"))["messages"]
    assert message["id"] == sent["id"]
    assert (message["subject"], message["thread_id"], message["data"]) == (
        '["draft"]',
        "null",
        "null",
    )
    noted = await alice.call("set_status", objective='{"step": 2}')
    assert noted["objective"] == '{"step": 2}'


@pytest.mark.anyio
async def test_numbers_and_booleans_sent_as_their_json_text_are_read_as_such(
    agents: Agents,
) -> None:
    """Some clients (Claude Code among them) send `"5"` and `"true"`; a string that is
    accepted as it stands stays a string."""
    alice, bob = await agents.start_many("alice", "bob")
    sent = await alice.call("send", to="bob", body="42", subject="42", must_read="true")
    found = await bob.call("inbox", limit="5", peek="false")
    [message] = found["messages"]
    assert (message["id"], message["subject"], message["body"]) == (sent["id"], "42", "42")
    assert message["must_read"] is True
    assert "alice" in {a["name"] for a in (await bob.call("who", include_offline="true"))["agents"]}


def delete_post_office(home: Path) -> None:
    for leftover in home.glob("agentpost.db*"):  # -wal and -shm too, as `rm agentpost.db*`
        leftover.unlink()


@pytest.mark.anyio
async def test_a_post_office_file_deleted_under_running_sessions_is_unavailable_until_restart(
    agents: Agents,
) -> None:
    """Deleting the file to start over would split the post office: the running sessions
    would go on in the unlinked file, their mail lost with them. They refuse instead, and a
    session started afterwards works on the new file."""
    alice, bob = await agents.start_many("alice", "bob")
    await alice.call("send", to="bob", body="before")
    delete_post_office(Path(os.environ["AGENTPOST_HOME"]))
    assert await alice.refused("send", to="bob", body="into the void") == "unavailable"
    assert await bob.refused("inbox") == "unavailable"

    carol = await agents.start("carol")
    assert [a["name"] for a in (await carol.call("who"))["agents"]] == ["carol"]  # a new office


@pytest.mark.anyio
async def test_a_session_whose_file_was_deleted_names_it_in_its_log_once_not_at_every_round(
    agents: Agents,
) -> None:
    """Its heartbeat (every 0.3 s here) is refused at every round: one warning says so, and
    the log does not grow with each round."""
    alice = await agents.start("alice", env={"AGENTPOST_HEARTBEAT_S": "0.3"})
    delete_post_office(Path(os.environ["AGENTPOST_HOME"]))

    await anyio.sleep(2)
    told = alice.stderr().count("was deleted or replaced")
    assert told >= 1
    await anyio.sleep(2)
    assert alice.stderr().count("was deleted or replaced") == told


def migrate_as_a_newer_agentpost(database: Path) -> str:
    """What a newer agentpost's next migration does to the file: a column this one does not
    know (its rows would take the default), and the revision. The refusal a running session
    then gets."""
    newer = f"{int(migrate.SCHEMA_HEAD) + 1:04d}"
    with contextlib.closing(sqlite3.connect(database, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ALTER TABLE messages ADD COLUMN sender_trust_then TEXT DEFAULT 'untrusted'")
        conn.execute("UPDATE alembic_version SET version_num = ?", (newer,))
        conn.execute("COMMIT")
    refusal = migrate.newer_than_known(newer, running=True)  # the way out: a restart
    assert refusal is not None
    return f"unavailable: {refusal.message}"


def stored_messages(database: Path) -> int:
    with contextlib.closing(sqlite3.connect(database)) as conn:
        return int(conn.execute("SELECT count(*) FROM messages").fetchone()[0])


@pytest.mark.anyio
async def test_sessions_running_on_a_file_a_newer_agentpost_migrated_refuse_every_call(
    agents: Agents,
) -> None:
    """An older session kept writing with its old idea of the schema: the newer columns took
    their defaults, rows the newer code misreads. It refuses as a start would, storing nothing;
    one that only reads learns of it from the file's change as well."""
    alice, bob = await agents.start_many("alice", "bob")
    await alice.call("send", to="bob", body="before")
    database = Path(os.environ["AGENTPOST_HOME"]) / "agentpost.db"
    said = migrate_as_a_newer_agentpost(database)

    refused = await alice.result("send", to="bob", body="with an old idea of the schema")
    assert refused.is_error is True
    assert text_of(refused) == said
    assert stored_messages(database) == 1
    assert await alice.refused("inbox") == "unavailable"
    assert await alice.refused("whoami") == "unavailable"

    async def bob_is_refused() -> bool:
        return bool((await bob.result("inbox", peek=True)).is_error)

    await eventually(bob_is_refused)
    assert text_of(await bob.result("inbox", peek=True)) == said
    assert alice.stderr().count("refuses every call from now on") == 1  # said once, in its log
