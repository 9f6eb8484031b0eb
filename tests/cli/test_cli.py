"""The command line end to end: the installed `agentpost` script, run as real processes.

Each test has its own post office (conftest's isolated AGENTPOST_HOME, passed on through the
environment). Identities are arranged in-process through the services; every act and every
observation goes through the command line, as a person or a script would use it. Nothing
sleeps: a live process is read line by line under a deadline.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from agentpost.cli.main import EXIT_CODES
from agentpost.config import Settings
from agentpost.domain.errors import ErrorCode
from agentpost.domain.models import Caller
from agentpost.services import PostOffice
from command_line import (
    AGENTPOST,
    WAIT_S,
    agentpost,
    agentpost_json,
    arrange,
    arrange_async,
    database,
    refused,
    workdir,  # noqa: F401 - an autouse fixture, registered by being imported
)
from rate_window import inside_one_rate_window

MESSAGE_FIELDS = {
    "id",
    "from",
    "to",
    "channel",
    "kind",
    "subject",
    "body",
    "data",
    "thread_id",
    "reply_to",
    "priority",
    "must_read",
    "created_at",
    "expires_at",
    "trust",
    "state",
}


# -- messaging --------------------------------------------------------------------------------


def test_send_delivers_to_the_recipients_inbox_with_every_field() -> None:
    arrange("alice", "bob")
    sent = agentpost_json(
        "send", "bob", "the parser is fixed", "--subject", "parser", "--data", '{"pr": 42}',
        "--urgent", "--as", "alice",
    )  # fmt: skip
    assert sent == {"id": sent["id"], "thread_id": sent["id"], "to": ["bob"]}
    assert sent["id"].startswith("m_")

    found = agentpost_json("inbox", "--as", "bob")
    assert found["unread"] == 0
    [message] = found["messages"]
    assert set(message) == MESSAGE_FIELDS
    assert message["id"] == sent["id"]
    assert message["from"] == "alice"
    assert message["to"] == ["bob"]
    assert message["subject"] == "parser"
    assert message["body"] == "the parser is fixed"
    assert message["data"] == {"pr": 42}
    assert message["priority"] == "urgent"
    assert message["trust"] == "verified"
    assert message["state"] == "read"


def test_inbox_peek_leaves_mail_unread_and_a_read_marks_it() -> None:
    arrange("alice", "bob", mail=("alice", "bob", "hello"))
    peeked = agentpost_json("inbox", "--peek", "--as", "bob")
    assert [m["state"] for m in peeked["messages"]] == ["queued"]
    assert peeked["unread"] == 1
    read = agentpost_json("inbox", "--as", "bob")
    assert [m["state"] for m in read["messages"]] == ["read"]
    assert agentpost_json("inbox", "--as", "bob") == {"messages": [], "unread": 0}
    everything = agentpost_json("inbox", "--all", "--as", "bob")
    assert [m["body"] for m in everything["messages"]] == ["hello"]


def test_inbox_thread_reads_one_thread_named_by_any_of_its_messages() -> None:
    arrange("alice", "bob")
    first = agentpost_json("send", "bob", "q", "--as", "alice")
    again = agentpost_json("send", "bob", "q2", "--reply-to", first["id"], "--as", "alice")
    agentpost_json("send", "bob", "other", "--as", "alice")
    found = agentpost_json("inbox", "--thread", again["id"], "--as", "bob")
    assert ([m["body"] for m in found["messages"]], found["unread"]) == (["q", "q2"], 1)


def test_ack_shows_on_the_senders_receipt() -> None:
    arrange("alice", "bob")
    sent = agentpost_json("send", "bob", "please review", "--as", "alice")
    [before] = agentpost_json("sent", "--as", "alice")["messages"]
    assert [(r["to"], r["state"]) for r in before["receipts"]] == [("bob", "queued")]

    done = agentpost_json("ack", sent["id"], "m_unknown", "--as", "bob")
    assert done == {"acked": [sent["id"]], "not_found": ["m_unknown"]}
    [after] = agentpost_json("sent", "--as", "alice")["messages"]
    assert after["id"] == sent["id"]
    assert [(r["to"], r["state"]) for r in after["receipts"]] == [("bob", "acked")]
    assert after["receipts"][0]["acked_at"] is not None


def test_ack_of_only_unknown_ids_exits_as_not_found() -> None:
    arrange("bob")
    done = agentpost("ack", "m_unknown", "--as", "bob")
    assert done.returncode == EXIT_CODES[ErrorCode.NOT_FOUND]
    assert "not found: m_unknown" in done.stdout


def test_a_reply_joins_its_parents_thread() -> None:
    arrange("alice", "bob")
    first = agentpost_json("send", "bob", "can you review?", "--as", "alice")
    reply = agentpost_json("send", "alice", "on it", "--reply-to", first["id"], "--as", "bob")
    assert reply["thread_id"] == first["id"]

    thread = agentpost_json("thread", first["id"], "--as", "alice")
    assert thread["thread_id"] == first["id"]
    assert [(m["from"], m["body"]) for m in thread["messages"]] == [
        ("alice", "can you review?"),
        ("bob", "on it"),
    ]
    assert thread["messages"][1]["reply_to"] == first["id"]
    by_reply = agentpost_json("thread", reply["id"], "--as", "alice")  # names the same thread
    assert by_reply == thread


def test_search_finds_the_words_of_messages_you_may_see() -> None:
    arrange("alice", "bob", "carol")
    sent = agentpost_json("send", "bob", "the tokenizer drops unicode", "--as", "alice")
    found = agentpost_json("search", "tokenizer", "--as", "bob")
    assert [m["id"] for m in found["messages"]] == [sent["id"]]
    assert agentpost_json("search", "tokenizer", "--as", "carol") == {"messages": []}


def test_search_pages_back_with_before() -> None:
    arrange("alice", "bob")
    sent = [agentpost_json("send", "bob", f"lexer fix {n}", "--as", "alice") for n in range(3)]
    first = agentpost_json("search", "lexer", "--limit", "2", "--as", "bob")
    assert [m["id"] for m in first["messages"]] == [sent[2]["id"], sent[1]["id"]]
    older = agentpost_json("search", "lexer", "--before", sent[1]["id"], "--as", "bob")
    assert [m["id"] for m in older["messages"]] == [sent[0]["id"]]


def test_the_whole_inbox_pages_back_with_before() -> None:
    arrange("alice", "bob")
    sent = [agentpost_json("send", "bob", f"note {n}", "--as", "alice") for n in range(3)]
    newest = agentpost_json("inbox", "--all", "--limit", "2", "--as", "bob")
    assert [m["id"] for m in newest["messages"]] == [sent[1]["id"], sent[2]["id"]]
    older = agentpost_json("inbox", "--all", "--before", sent[1]["id"], "--as", "bob")
    assert [m["id"] for m in older["messages"]] == [sent[0]["id"]]
    refused(agentpost("inbox", "--before", sent[1]["id"], "--as", "bob"), "invalid_argument")


def test_inbox_before_without_all_is_refused_naming_the_options_typed(isolated_home: Path) -> None:
    arrange("alice", "bob")
    sent = agentpost_json("send", "bob", "unread still", "--as", "alice")
    before = database(isolated_home)
    done = agentpost("inbox", "--before", sent["id"], "--as", "bob")
    refused(done, "invalid_argument")
    assert "--before pages back through the whole inbox: add --all" in done.stderr
    assert "unread_only" not in done.stderr  # the services' name, typed nowhere here
    assert database(isolated_home) == before  # nothing marked read


def test_a_page_of_the_whole_inbox_with_nothing_on_it_says_so_without_new_mail() -> None:
    arrange("alice", "bob", "carol")
    oldest = agentpost_json("send", "bob", "read already", "--as", "alice")
    agentpost("inbox", "--as", "bob")
    agentpost_json("send", "bob", "still unread", "--as", "alice")
    assert agentpost("inbox", "--all", "--before", oldest["id"], "--as", "bob").stdout == (
        "No older mail.\n"
    )
    assert agentpost("inbox", "--all", "--as", "carol").stdout == "No mail.\n"
    assert agentpost("inbox", "--peek", "--as", "carol").stdout == "No new mail.\n"


def test_names_separated_by_commas_may_have_spaces_after_the_commas() -> None:
    arrange("alice", "bob", "carol")
    sent = agentpost_json("send", "bob, carol", "standup in 5", "--as", "alice")
    assert sent["to"] == ["bob", "carol"]
    assert [m["body"] for m in agentpost_json("inbox", "--as", "carol")["messages"]] == [
        "standup in 5"
    ]


async def _ask(asker: str, to: str, question: str) -> str:
    """`asker` asks `to` a question and stops waiting at once; the request's id."""
    office = await PostOffice.open(Settings())
    try:
        await office.presence.ensure_agent(asker)
        await office.presence.ensure_agent(to)
        asked = await office.requests.request(Caller(asker), to, question, timeout_s=0.01)
        return asked.request_id
    finally:
        await office.aclose()


def test_a_message_of_another_kind_than_message_says_its_kind() -> None:
    """A person reading a request must see that its asker waits for an answer."""
    request_id = anyio.run(_ask, "alice", "owner", "may I deploy?")
    shown = flat(agentpost("inbox").stdout)
    assert f"{request_id} alice → owner request" in shown
    arrange("bob", mail=("alice", "bob", "plain"))
    assert "alice → bob (read)" in flat(agentpost("inbox", "--as", "bob").stdout)


async def _answer(asker: str, request_id: str) -> tuple[str | None, object]:
    office = await PostOffice.open(Settings())
    try:
        found = await office.requests.check_request(Caller(asker), request_id)
        assert found.answered
        assert found.response is not None
        return found.response.body, found.response.data
    finally:
        await office.aclose()


def test_a_person_answers_a_request_from_the_command_line_once() -> None:
    request_id = anyio.run(_ask, "alice", "owner", "may I deploy?")
    done = agentpost("respond", request_id, "yes, go", "--data", '{"window": "now"}')
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"answered {request_id} for alice: m_"), done.stdout
    assert anyio.run(_answer, "alice", request_id) == ("yes, go", {"window": "now"})
    refused(agentpost("respond", request_id, "no, wait"), "conflict")
    assert anyio.run(_answer, "alice", request_id) == ("yes, go", {"window": "now"})


def test_channels_and_a_broadcast_to_general() -> None:
    arrange("alice", "bob")
    channels = agentpost_json("channels", "--as", "alice")["channels"]
    assert {"name": "#general", "members": 2, "joined": True, "implicit": True} in channels

    sent = agentpost_json("send", "#general", "standup in 5", "--as", "alice")
    assert sent["to"] == ["bob"]
    assert sent["channel"] == "#general"
    [message] = agentpost_json("inbox", "--as", "bob")["messages"]
    assert (message["channel"], message["body"]) == ("#general", "standup in 5")


def test_a_channel_is_joined_posted_to_read_and_left_from_the_command_line() -> None:
    """Without `join`, `send '#ops'` said to join first, which the command line could not do."""
    arrange("alice", "bob")
    assert agentpost_json("join", "#ops", "--as", "alice")["members"] == 1
    joined = agentpost("join", "ops", "--as", "bob")
    assert joined.returncode == 0, joined.stderr
    assert flat(joined.stdout) == "joined #ops (2 members)"

    sent = agentpost_json("send", "#ops", "deploy at noon", "--as", "alice")
    assert sent["to"] == ["bob"]
    history = agentpost_json("history", "#ops", "--as", "bob")["messages"]
    assert [(m["id"], m["body"]) for m in history] == [(sent["id"], "deploy at noon")]
    assert agentpost_json("inbox", "--as", "bob", "--peek")["unread"] == 1  # history reads none

    assert agentpost_json("leave", "#ops", "--as", "bob") == {"left": "#ops"}
    refused = agentpost("history", "#ops", "--as", "bob", "--json")
    assert refused.returncode == EXIT_CODES[ErrorCode.FORBIDDEN], refused.stdout
    assert json.loads(refused.stdout)["error"]["code"] == "forbidden"


def test_a_broadcast_says_which_members_it_skipped_for_a_full_inbox() -> None:
    """The answer's `skipped_full` was left out of the line for people: "sent … to carol"
    read as if every member had the broadcast, when bob's full inbox had kept it from him."""
    arrange("alice", "bob", "carol", mail=("alice", "bob", "fills bob's inbox"))
    sent = agentpost("send", "#general", "standup in 5", "--as", "alice", AGENTPOST_MAX_UNACKED="1")
    assert sent.returncode == 0, sent.stderr
    assert flat(sent.stdout).endswith("to #general (carol); not delivered to bob: inbox full")


def test_a_broadcast_is_said_to_go_to_its_channel_not_to_its_members_by_name() -> None:
    """ "sent … to carol" read as a direct message to carol, and a channel nobody else had
    joined yet as mail sent to nobody."""
    arrange("alice")  # every agent is a member of #general
    alone = agentpost("send", "#general", "first!", "--as", "alice")
    assert alone.returncode == 0, alone.stderr
    assert flat(alone.stdout).endswith("to #general (no other member yet)")
    arrange("carol")
    sent = agentpost("send", "#general", "standup in 5", "--as", "alice")
    assert flat(sent.stdout).endswith("to #general (carol)")


def test_as_creates_the_agent_when_it_first_sends_and_who_lists_it() -> None:
    arrange("bob")
    agentpost_json("send", "bob", "hello from a script", "--as", "dave")
    agents = agentpost_json("who", "--all", "--as", "dave")["agents"]
    assert [(a["name"], a["online"]) for a in agents] == [("bob", False), ("dave", False)]
    assert agentpost_json("who", "--as", "dave") == {"agents": []}, "no session: not online"


def test_who_folds_a_long_name_in_a_narrow_terminal_rather_than_cut_it_short() -> None:
    name = "bob-the-long-named-reviewer-of-the-backend-team-on-the-parser"
    arrange(name)
    shown = agentpost("who", "--all", COLUMNS="60")
    assert shown.returncode == 0, shown.stderr
    cells = [line.split("│")[1].strip() for line in shown.stdout.splitlines() if "│" in line]
    assert name in "".join(cells)  # folded onto the next lines, not cut short


def test_reading_as_a_name_nobody_has_used_is_not_found_and_creates_no_agent() -> None:
    arrange("bob")
    done = agentpost("inbox", "--as", "bobb")
    assert done.returncode == EXIT_CODES[ErrorCode.NOT_FOUND]
    assert done.stderr.startswith("error: not_found: ")
    names = [a["name"] for a in agentpost_json("who", "--all")["agents"]]
    assert "bobb" not in names


def test_without_json_the_output_is_for_people() -> None:
    arrange("alice", "bob")
    sent = agentpost("send", "bob", "lunch?", "--as", "alice")
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.startswith("sent m_")
    assert sent.stdout.rstrip().endswith("to bob")
    shown = agentpost("inbox", "--as", "bob")
    assert shown.returncode == 0, shown.stderr
    assert "alice → bob" in shown.stdout
    assert "lunch?" in shown.stdout


def flat(text: str) -> str:
    """Output with its spacing and any line wrapping undone (COLUMNS may narrow it)."""
    return " ".join(text.split())


def test_human_lines_show_each_messages_thread_and_what_it_answers() -> None:
    arrange("alice", "bob")
    root = agentpost_json("send", "bob", "can you review?", "--as", "alice")["id"]
    reply = agentpost_json("send", "alice", "on it", "--reply-to", root, "--as", "bob")["id"]
    again = agentpost_json("send", "bob", "thanks", "--reply-to", reply, "--as", "alice")["id"]
    posted = agentpost_json("send", "bob", "also", "--thread", root, "--as", "alice")["id"]

    shown = agentpost("thread", root, "--as", "alice")
    assert shown.returncode == 0, shown.stderr
    lines = flat(shown.stdout)
    assert f"{root} alice → bob" in lines, "a thread's first message is its thread"
    assert f"{reply} (thread {root}, re {root}) bob → alice" in lines
    assert f"{again} (thread {root}, re {reply}) alice → bob" in lines
    assert f"{posted} (thread {root}) alice → bob" in lines
    inbox = flat(agentpost("inbox", "--as", "bob").stdout)
    assert f"{again} (thread {root}, re {reply})" in inbox
    found = flat(agentpost("search", "thanks", "--as", "bob").stdout)
    assert f"{again} (thread {root}, re {reply})" in found


async def _at_work(name: str, branch: str, objective: str) -> None:
    """A live local session of `name` (this test's process) on `branch`, at `objective`."""
    from agentpost.services.local_identity import LocalContext, this_host

    office = await PostOffice.open(Settings())
    try:
        context = LocalContext(this_host(), os.getpid(), "shop", "/src/shop", branch)
        await office.presence.open_local_session(context, name=name, objective=objective)
    finally:
        await office.aclose()


def test_who_shows_another_agents_objective_and_branch_as_written() -> None:
    anyio.run(_at_work, "alice", "br[/x]", "fixing [/x] [bold]now[/bold]")
    shown = agentpost("who")
    assert shown.returncode == 0, shown.stderr
    assert "fixing [/x] [bold]now[/bold]" in flat(shown.stdout)
    assert "br[/x]" in shown.stdout


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["thread", "[/red]"], "not_found", "no thread '[/red]' with messages you can see"),
        (["send", "owner", "x", "--as", "[/x]"], "invalid_argument", "'[/x]' must match"),
        (["inbox", "--as", "Bob"], "invalid_argument", "^[a-z0-9][a-z0-9._-]{0,63}$"),
    ],
)
def test_an_error_prints_the_arguments_it_names_as_written(
    args: list[str], code: str, says: str
) -> None:
    done = agentpost(*args)
    refused(done, code)
    assert says in done.stderr


# -- refusals ---------------------------------------------------------------------------------

REFUSALS = [
    pytest.param(["send", "nobody", "hi", "--as", "alice"], {}, "unknown_recipient", id="unknown"),
    pytest.param(
        ["send", "bob", "hi", "--data", "{oops", "--as", "alice"], {}, "invalid_argument", id="data"
    ),
    pytest.param(["inbox", "--limit", "0", "--as", "bob"], {}, "invalid_argument", id="limit"),
    # A byte that is not UTF-8 on the command line (Latin-1 "café") is no text to store.
    pytest.param(
        ["send", "bob", "caf\udce9", "--as", "alice"], {}, "invalid_argument", id="not-utf8"
    ),
    pytest.param(["ack", "m_\udcff", "--as", "bob"], {}, "invalid_argument", id="id-not-utf8"),
    pytest.param(
        ["send", "bob", "hi", "--reply-to", "m\udcff", "--as", "alice"],
        {},
        "invalid_argument",
        id="reply-to-not-utf8",
    ),
    pytest.param(
        ["send", "bob", "hi", "--data", '"\\ud800"', "--as", "alice"],
        {},
        "invalid_argument",
        id="data-half-pair",
    ),
    pytest.param(
        ["send", "bob", "hi", "--data", "[" * 5000 + "]" * 5000, "--as", "alice"],
        {},
        "invalid_argument",
        id="data-past-the-parser",
    ),
    pytest.param(
        ["send", "bob", "x" * 32769, "--as", "alice"], {}, "too_large", id="body-over-default"
    ),
    pytest.param(["inbox", "--as", "system"], {}, "forbidden", id="reserved-name"),
    pytest.param(["thread", "no-such-thread", "--as", "alice"], {}, "not_found", id="thread"),
    pytest.param(
        ["send", "bob", "one more", "--as", "alice"],
        {"AGENTPOST_MAX_UNACKED": "1"},
        "inbox_full",
        id="inbox-full",
    ),
]


# A refused send as a name nobody has used creates no agent: it is created with the first
# message it stores (the database staying as it was says so).
REFUSALS += [
    pytest.param(["send", *args, "--as", "typo"], env, code, id=f"new-name-{name}")
    for name, args, env, code in [
        ("unknown-recipient", ["nobody", "x"], {}, "unknown_recipient"),
        ("empty-body", ["bob", ""], {}, "invalid_argument"),
        ("data", ["bob", "x", "--data", "{"], {}, "invalid_argument"),
        ("no-channel", ["#nochan", "x"], {}, "not_found"),
        ("no-parent", ["bob", "x", "--reply-to", "m_x"], {}, "not_found"),
        ("inbox-full", ["bob", "x"], {"AGENTPOST_MAX_UNACKED": "1"}, "inbox_full"),
    ]
]


@pytest.mark.parametrize(("args", "env", "code"), REFUSALS)
def test_a_refusal_prints_its_code_exits_with_its_status_and_changes_nothing(
    args: list[str], env: dict[str, str], code: str, isolated_home: Path
) -> None:
    arrange("alice", "bob", mail=("alice", "bob", "the one unacked message"))
    before = database(isolated_home)
    done = agentpost(*args, **env)
    refused(done, code)
    assert done.stdout == ""
    assert database(isolated_home) == before


def test_a_refusal_that_waiting_cures_says_how_long_to_wait() -> None:
    arrange("alice", "bob")
    limited = {"AGENTPOST_SEND_RATE_PER_MINUTE": "1"}
    anyio.run(inside_one_rate_window, 20)  # both sends in one clock minute, however slow
    assert agentpost("send", "bob", "first", "--as", "alice", **limited).returncode == 0
    done = agentpost("send", "bob", "second", "--as", "alice", **limited)
    refused(done, "rate_limited")
    assert re.search(r"\(try again in \d+ s\)$", done.stderr.strip()), done.stderr


def test_a_name_refused_once_becomes_an_agent_with_its_first_good_send() -> None:
    arrange("bob")
    assert agentpost("send", "nobody", "hi", "--as", "dave").returncode != 0
    sent = agentpost_json("send", "bob", "hi", "--as", "dave")
    [message] = agentpost_json("inbox", "--as", "bob")["messages"]
    assert (message["id"], message["from"]) == (sent["id"], "dave")
    names = [a["name"] for a in agentpost_json("who", "--all", "--as", "bob")["agents"]]
    assert names == ["bob", "dave"]


async def _disable(name: str) -> None:
    office = await PostOffice.open(Settings())
    try:
        await office.admin.disable_agent(Caller("owner", admin=True), name)
    finally:
        await office.aclose()


def test_a_send_as_a_disabled_agent_is_gone_and_changes_nothing(isolated_home: Path) -> None:
    arrange("retired", "bob")
    anyio.run(_disable, "retired")
    before = database(isolated_home)
    done = agentpost("send", "bob", "hi", "--as", "retired")
    assert done.stderr.startswith("error: gone: "), done.stderr
    assert done.returncode == EXIT_CODES[ErrorCode.GONE]
    assert database(isolated_home) == before


def test_a_home_that_cannot_be_made_is_unavailable_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    done = agentpost("inbox", AGENTPOST_HOME=str(tmp_path / "a-file" / "home"))
    assert done.stderr.startswith("error: unavailable: cannot keep the post office at "), (
        done.stderr
    )
    assert done.returncode == EXIT_CODES[ErrorCode.UNAVAILABLE]


def test_a_refusal_with_json_prints_the_error_as_json(isolated_home: Path) -> None:
    arrange("alice")
    before = database(isolated_home)
    done = agentpost("send", "nobody", "hi", "--as", "alice", "--json")
    assert done.returncode == EXIT_CODES[ErrorCode.UNKNOWN_RECIPIENT]
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "unknown_recipient"
    assert error["details"] == {"recipient": "nobody"}
    assert database(isolated_home) == before


# -- configuration mistakes -------------------------------------------------------------------

CONFIG_MISTAKES = [
    pytest.param(
        {"AGENTPOST_MAX_BODY_BYTES": "abc"},
        None,
        "max_body_bytes (AGENTPOST_MAX_BODY_BYTES): should be a valid integer",
        id="not-a-number",
    ),
    pytest.param(
        {"AGENTPOST_MAX_BODY_BYTES": "0"},
        None,
        "max_body_bytes (AGENTPOST_MAX_BODY_BYTES): should be greater than or equal to 1",
        id="out-of-range",
    ),
    pytest.param(
        {"AGENTPOST_AGENTS": "alice"},
        None,
        "agents (AGENTPOST_AGENTS): should be a valid list, not 'alice' (a JSON list",
        id="roster-not-json",
    ),
    pytest.param(
        {"AGENTPOST_DATABASE_URL": "bogus://x"},
        None,
        "database_url (AGENTPOST_DATABASE_URL): must be sqlite:///path or postgresql://",
        id="database-url",
    ),
    pytest.param(
        {},
        "max_body_bytez = 1\n",
        "max_body_bytez (in {config}) is not a setting",
        id="unknown-key",
    ),
    pytest.param({}, "agents = [\n", "the config file {config} is not TOML: ", id="broken-toml"),
]


@pytest.mark.parametrize(("env", "toml", "says"), CONFIG_MISTAKES)
def test_a_configuration_mistake_is_an_invalid_argument_naming_the_key(
    env: dict[str, str], toml: str | None, says: str, tmp_path: Path
) -> None:
    config = tmp_path / "config.toml"
    if toml is not None:
        config.write_text(toml)
    done = agentpost("inbox", AGENTPOST_CONFIG=str(config), **env)
    assert done.stderr.startswith("error: invalid_argument: "), done.stderr
    assert says.format(config=config) in done.stderr
    assert done.stderr.count("\n") == 1, "one line, no traceback"
    assert done.returncode == EXIT_CODES[ErrorCode.INVALID_ARGUMENT]
    assert done.stdout == ""


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["send", "bob", "hi", "--as", "alice"], id="send"),
        pytest.param(["tail"], id="tail"),
        pytest.param(["serve", "--port", "0"], id="serve"),
        pytest.param(["mcp"], id="mcp"),
        pytest.param(["mcp", "--url", "http://127.0.0.1:9"], id="mcp-remote"),
        pytest.param(["demo", "--pause", "0"], id="demo"),
    ],
)
def test_every_command_reports_a_configuration_mistake_in_one_line(args: list[str]) -> None:
    done = agentpost(*args, AGENTPOST_MAX_UNACKED="0")
    assert done.stderr == (
        "error: invalid_argument: configuration: max_unacked (AGENTPOST_MAX_UNACKED): "
        "should be greater than or equal to 1, not '0'\n"
    )
    assert done.returncode == EXIT_CODES[ErrorCode.INVALID_ARGUMENT]


def test_a_configuration_mistake_with_json_is_a_json_error() -> None:
    done = agentpost("who", "--json", AGENTPOST_AGENTS="alice")
    assert done.returncode == EXIT_CODES[ErrorCode.INVALID_ARGUMENT]
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "invalid_argument"
    assert error["message"].startswith("configuration: agents (AGENTPOST_AGENTS): ")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        pytest.param(["send", "bob", "x", "--ttl", "-1"], "--ttl is a number", id="ttl"),
        pytest.param(
            ["send", "bob", "x", "--ttl", "1e300"], "--ttl is a number", id="ttl-past-a-year"
        ),
        pytest.param(["send", "bob", "x", "--thread", ""], "--thread must be", id="send-thread"),
        pytest.param(["send", "bob", "x", "--reply-to", ""], "--reply-to must be", id="reply-to"),
        pytest.param(["inbox", "--thread", ""], "--thread must be", id="inbox-thread"),
    ],
)
def test_a_refused_option_is_named_as_the_command_line_spells_it(
    args: list[str], says: str
) -> None:
    arrange("bob")
    done = agentpost(*args)
    refused(done, "invalid_argument")
    assert done.stderr.startswith(f"error: invalid_argument: {says} "), done.stderr


def test_a_reply_given_another_thread_names_the_thread_option() -> None:
    arrange("alice", "bob")
    first = agentpost_json("send", "bob", "can you review?", "--as", "alice")
    done = agentpost("send", "alice", "on it", "--reply-to", first["id"], "--thread", "other",
                     "--as", "bob")  # fmt: skip
    refused(done, "invalid_argument")
    assert done.stderr.startswith("error: invalid_argument: --thread of a reply "), done.stderr


USAGE_MISTAKES = [
    pytest.param(["ack"], "Missing argument", "agentpost ack --help", id="missing-argument"),
    pytest.param(
        ["inbox", "--limit", "ten"], "'--limit'", "agentpost inbox --help", id="bad-value"
    ),
    pytest.param(["inbox", "--bogus"], "--bogus", "agentpost inbox --help", id="unknown-option"),
    pytest.param(["inbx"], "'inbx'", "agentpost --help", id="unknown-command"),
    pytest.param(
        ["install", "clod"], "'clod'", "agentpost install --help", id="unknown-subcommand"
    ),
]


@pytest.mark.parametrize(("args", "names", "help_at"), USAGE_MISTAKES)
def test_a_usage_mistake_is_an_invalid_argument_in_one_line(
    args: list[str], names: str, help_at: str
) -> None:
    done = agentpost(*args)
    refused(done, "invalid_argument")
    assert names in done.stderr
    assert done.stderr.count("\n") == 1, f"one line, no boxed panel: {done.stderr}"
    assert f"(see {help_at})" in done.stderr
    assert done.stdout == ""


def test_a_usage_mistake_with_json_is_a_json_error() -> None:
    done = agentpost("inbox", "--limit", "ten", "--json")
    assert done.returncode == EXIT_CODES[ErrorCode.INVALID_ARGUMENT]
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "invalid_argument"
    assert "'--limit'" in error["message"]


def test_help_and_no_arguments_still_show_the_help() -> None:
    helped = agentpost("inbox", "--help")
    assert helped.returncode == 0
    assert "Read your mail" in helped.stdout
    bare = agentpost()
    assert "Usage: agentpost" in bare.stdout
    assert bare.returncode == EXIT_CODES[ErrorCode.INVALID_ARGUMENT]


# -- demo and tail ----------------------------------------------------------------------------


def test_demo_shows_two_agents_exchange_read_and_acknowledge() -> None:
    done = agentpost("demo", "--pause", "0")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    steps = [
        "alice and bob are at work:",
        "alice waits for mail",
        "bob sends alice a message",
        "alice's wait wakes with:",
        "bob → alice review please",
        "alice replies in the thread and acknowledges",
        "alice → bob",
        "→ alice: acked",
        "the whole thread, oldest first:",
        "done.",
    ]
    positions = [out.find(step) for step in steps]
    assert -1 not in positions, [s for s, p in zip(steps, positions, strict=True) if p == -1]
    assert positions == sorted(positions), "the steps appear in the order they happen"


@pytest.mark.parametrize("pause", ["-1", "nan"])
def test_demo_refuses_a_pause_that_is_no_length_of_time(pause: str) -> None:
    done = agentpost("demo", "--pause", pause)
    assert done.stderr == "error: invalid_argument: --pause must be seconds, 0 or more\n"
    assert done.returncode == EXIT_CODES[ErrorCode.INVALID_ARGUMENT]


@pytest.mark.parametrize("where", [[], ["--url", "http://127.0.0.1:9", "--key", "ap_x"]])
def test_tail_refuses_a_negative_backlog_rather_than_follow(where: list[str]) -> None:
    done = agentpost("tail", "--backlog", "-1", *where)
    refused(done, "invalid_argument")
    assert "'--backlog'" in done.stderr


@pytest.mark.anyio
async def test_tail_json_prints_a_message_another_process_sends() -> None:
    await arrange_async("alice", "bob", mail=("alice", "bob", "before tail started"))
    env = dict(os.environ)
    tail = await anyio.open_process(
        [str(AGENTPOST), "tail", "--json", "--backlog", "1"], env=env, stderr=subprocess.DEVNULL
    )
    try:
        assert tail.stdout is not None
        lines = BufferedByteReceiveStream(tail.stdout)
        with anyio.fail_after(WAIT_S):
            backlog = json.loads(await lines.receive_until(b"\n", 1 << 20))
        assert backlog["body"] == "before tail started"

        sent = await anyio.run_process(
            [str(AGENTPOST), "send", "bob", "while tail runs", "--as", "alice", "--json"], env=env
        )
        sent_id = json.loads(sent.stdout)["id"]
        with anyio.fail_after(WAIT_S):
            live = json.loads(await lines.receive_until(b"\n", 1 << 20))
        assert set(live) == MESSAGE_FIELDS
        assert (live["id"], live["from"], live["to"]) == (sent_id, "alice", ["bob"])
        assert live["body"] == "while tail runs"
        assert live["state"] is None, "tail is the owner's view: it marks nothing read"
    finally:
        tail.terminate()
        with anyio.fail_after(WAIT_S):
            await tail.wait()
        await tail.aclose()


# -- leadership -------------------------------------------------------------------------------


async def _lead(project: str, name: str) -> None:
    """A local session of `name` (this test's live process) on main of `project` takes the seat."""
    from agentpost.services.local_identity import LocalContext, this_host

    office = await PostOffice.open(Settings())
    try:
        context = LocalContext(this_host(), os.getpid(), project, f"/src/{project}", "main")
        session = await office.presence.open_local_session(context, name=name)
        await office.leadership.claim(Caller(name, session.id))
    finally:
        await office.aclose()


def test_leader_shows_who_leads_each_project_and_its_term() -> None:
    empty = agentpost("leader")
    assert empty.returncode == 0, empty.stderr
    assert "No project has had a leader yet." in empty.stdout
    anyio.run(_lead, "shop", "alice")
    anyio.run(_lead, "ops", "olga")
    seats = agentpost_json("leader")["leaders"]
    assert [(s["project"], s["leader"], s["term"], s["branch"]) for s in seats] == [
        ("ops", "olga", 1, "main"),
        ("shop", "alice", 1, "main"),
    ]
    (one,) = agentpost_json("leader", "shop")["leaders"]
    assert one["leader"] == "alice"
    shown = agentpost("leader")
    assert "alice" in shown.stdout
    assert "olga" in shown.stdout
    nobody = agentpost_json("leader", "elsewhere")["leaders"]
    assert [(s["project"], s["leader"], s["term"]) for s in nobody] == [("elsewhere", None, 0)]


# -- tasks --------------------------------------------------------------------------------------


async def _delegate_two() -> list[str]:
    office = await PostOffice.open(Settings())
    try:
        for name in ("boss", "worker"):
            await office.presence.ensure_agent(name)
        first = await office.tasks.delegate(Caller("boss"), "worker", "Fix the build", "CI red")
        await office.tasks.update_task(
            Caller("worker"), first.id, "done", note="green\nagain", result={"pr": 7}
        )
        second = await office.tasks.delegate(
            Caller("boss"), "worker", "Write the docs", due=1_700_000_000.0
        )
        return [first.id, second.id]
    finally:
        await office.aclose()


def test_tasks_lists_pages_and_shows_one_task_with_its_history() -> None:
    first, second = anyio.run(_delegate_two)
    listed = agentpost_json("tasks", "--as", "worker", "--role", "assigned")
    assert [t["id"] for t in listed["tasks"]] == [second, first]
    page = agentpost_json("tasks", "--as", "worker", "--limit", "1", "--before", second)
    assert [t["id"] for t in page["tasks"]] == [first]
    text = agentpost("tasks", "--as", "boss", "--status", "done")
    assert text.returncode == 0, text.stderr
    assert f"{first} [done] boss → worker Fix the build" in text.stdout
    assert second not in text.stdout
    assert [t["overdue"] for t in listed["tasks"]] == [True, False]  # the done one is late no more
    late = agentpost("tasks", "--as", "boss", "--status", "open", COLUMNS="200")
    assert f"{second} [open] overdue boss → worker Write the docs" in late.stdout

    one = agentpost_json("task", first, "--as", "boss")
    assert (one["status"], one["result"]) == ("done", {"pr": 7})
    shown = agentpost("task", first, "--as", "boss")
    assert shown.returncode == 0, shown.stderr
    assert "CI red" in shown.stdout
    assert 'result: {"pr": 7}' in shown.stdout
    assert "worker open → done\n    green\n    again" in shown.stdout
    refused(agentpost("task", "t_nope", "--as", "boss"), "not_found")
    refused(agentpost("tasks", "--as", "boss", "--role", "mine"), "invalid_argument")


def test_version_prints_the_installed_version() -> None:
    from agentpost import __version__

    done = agentpost("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"agentpost {__version__}\n"
