"""The mailbox commands on a remote post office: `--url URL --key KEY` (or `AGENTPOST_URL` and
`AGENTPOST_KEY`), run as the installed script against a real `agentpost serve`."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from agentpost.client.async_client import AsyncClient
from agentpost.domain.limits import MAX_LIMIT
from command_line import AGENTPOST, Remote
from service_process import Service, eventually, running_service

pytestmark = pytest.mark.anyio


async def test_the_mailbox_commands_act_on_the_remote_service(service: Service) -> None:
    alice = Remote(service, await service.create_agent("alice"))
    bob = Remote(service, await service.create_agent("bob"))

    sent = await alice.json("send", "bob", "the parser is fixed", "--subject", "parser")
    found = await bob.json("inbox")
    assert [(m["id"], m["from"], m["subject"]) for m in found["messages"]] == [
        (sent["id"], "alice", "parser")
    ]
    reply = await bob.json("send", "alice", "thanks", "--reply-to", sent["id"])
    assert (await bob.json("ack", sent["id"]))["acked"] == [sent["id"]]

    thread = await alice.json("thread", sent["thread_id"])
    assert [m["id"] for m in thread["messages"]] == [sent["id"], reply["id"]]
    receipts = (await alice.json("sent"))["messages"][0]["receipts"]
    assert [(r["to"], r["state"]) for r in receipts] == [("bob", "acked")]
    assert [m["id"] for m in (await alice.json("search", "parser"))["messages"]] == [sent["id"]]
    assert "#general" in [c["name"] for c in (await alice.json("channels"))["channels"]]
    assert (await alice.json("join", "#ops"))["members"] == 1
    posted = await alice.json("send", "#ops", "deploy at noon")
    assert [m["id"] for m in (await alice.json("history", "#ops"))["messages"]] == [posted["id"]]
    assert await alice.json("leave", "#ops") == {"left": "#ops"}
    assert {"alice", "bob"} <= {a["name"] for a in (await alice.json("who"))["agents"]}

    async with AsyncClient(service.url, alice.key) as client:
        made = await client.delegate("bob", "Fix the build")
    listed = await bob.json("tasks", "--role", "assigned", "--status", "open", "--limit", "5")
    assert [t["id"] for t in listed["tasks"]] == [made.id]
    assert (await alice.json("task", made.id))["assignee"] == "bob"


async def test_the_environment_names_the_service_and_the_key(
    service: Service, tmp_path: Path
) -> None:
    alice = Remote(service, await service.create_agent("alice"))
    elsewhere = tmp_path / "no-local-post-office"
    env = {
        "AGENTPOST_URL": service.url,
        "AGENTPOST_KEY": alice.key,
        "AGENTPOST_HOME": str(elsewhere),
    }
    sent = await alice.json("send", "#general", "hello everyone", env=env)
    assert sent["channel"] == "#general"
    assert [m["id"] for m in (await alice.json("sent"))["messages"]] == [sent["id"]]
    assert not elsewhere.exists(), "a remote command opened a local post office"


async def test_refusals_exit_with_their_codes_status(service: Service) -> None:
    alice = Remote(service, await service.create_agent("alice"))

    unknown = await alice.run("send", "nobody", "hello?")
    assert unknown.returncode == 4
    assert b"error: unknown_recipient" in unknown.stderr

    stranger = await Remote(service, "ap_" + "x" * 43).run("inbox", "--json")
    assert stranger.returncode == 3
    assert json.loads(stranger.stdout)["error"]["code"] == "unauthenticated"

    as_someone = await alice.run("inbox", "--as", "bob")
    assert as_someone.returncode == 2
    assert b"--as" in as_someone.stderr

    key_alone = await anyio.run_process([str(AGENTPOST), "inbox", "--key", alice.key], check=False)
    assert key_alone.returncode == 2
    assert b"--url" in key_alone.stderr


async def test_another_url_given_alone_is_not_handed_the_configured_key(
    service: Service,
) -> None:
    alice = Remote(service, await service.create_agent("alice"))
    env = {"AGENTPOST_URL": "http://127.0.0.1:9", "AGENTPOST_KEY": alice.key}
    done = await alice.run("inbox", "--url", service.url, "--json", env=env)
    assert done.returncode == 3, done.stderr.decode()  # no key went with it
    assert json.loads(done.stdout)["error"]["code"] == "unauthenticated"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["send", "bob", "x", "--ttl", "nan"], b"--ttl is a number of seconds above 0"),
        (["send", "bob", "caf\udcff"], b"must be Unicode text"),
        (["search", "\udcff"], b"must be Unicode text"),
        (["inbox", "--as", ""], b"--as must name an agent"),
    ],
    ids=["ttl-nan", "body-not-utf8", "search-not-utf8", "as-empty"],
)
async def test_input_no_request_can_carry_is_an_invalid_argument_not_a_traceback(
    service: Service, args: list[str], says: bytes
) -> None:
    alice = Remote(service, await service.create_agent("alice"))
    await service.create_agent("bob")
    done = await alice.run(*args)
    assert done.returncode == 2, done.stderr.decode(errors="replace")
    assert done.stderr.startswith(b"error: invalid_argument: ")
    assert says in done.stderr
    assert (await alice.json("sent"))["messages"] == []


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("http://127.0.0.1:99999", "ap_x"),
        ("127.0.0.1:8470", "ap_x"),
        ("ftp://127.0.0.1", "ap_x"),
        ("http://xn--:8470", "ap_x"),
        (None, "ap_\u00e9"),
        (None, "ap_secret\n"),
    ],
    ids=["port", "no-scheme", "scheme", "idna", "key-not-ascii", "key-line-break"],
)
async def test_a_mistyped_url_or_key_is_an_invalid_argument_that_keeps_the_key_secret(
    service: Service, url: str | None, key: str
) -> None:
    done = await anyio.run_process(
        [str(AGENTPOST), "inbox", "--url", url or service.url, "--key", key], check=False
    )
    assert done.returncode == 2, done.stderr.decode()
    assert done.stderr.startswith(b"error: invalid_argument: ")
    assert key.encode() not in done.stderr


@pytest.mark.parametrize("command", [["inbox"], ["mcp"]], ids=["inbox", "mcp"])
async def test_a_command_without_a_key_says_how_to_give_one_before_asking(
    command: list[str],
) -> None:
    """Nothing listens at the URL: the command says what is missing before any request
    (the service would only answer with `Authorization` advice)."""
    url = "http://127.0.0.1:9"
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTPOST_URL", "AGENTPOST_KEY")}
    done = await anyio.run_process(
        [str(AGENTPOST), *command, "--url", url], check=False, env=env, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 3, done.stderr.decode()
    assert done.stderr.decode() == (
        f"error: unauthenticated: no key for the post office at {url}: pass --key, or set"
        " AGENTPOST_KEY\n"
    )

    env.update(AGENTPOST_URL="http://127.0.0.1:8", AGENTPOST_KEY="ap_" + "x" * 43)
    elsewhere = await anyio.run_process(
        [str(AGENTPOST), *command, "--url", url], check=False, env=env, stdin=subprocess.DEVNULL
    )
    assert elsewhere.returncode == 3, elsewhere.stderr.decode()
    assert b"(AGENTPOST_KEY is for http://127.0.0.1:8 only)" in elsewhere.stderr
    assert b"ap_xxx" not in elsewhere.stderr


async def _next_line(lines: BufferedByteReceiveStream) -> Any:
    with anyio.fail_after(15):
        return json.loads(await lines.receive_until(b"\n", 1 << 20))


@contextlib.asynccontextmanager
async def _tailing(*args: str, env: dict[str, str] | None = None) -> AsyncIterator[Any]:
    """`agentpost tail --json ARGS` running: its lines of output, read one by one."""
    tail = await anyio.open_process(
        [str(AGENTPOST), "tail", "--json", *args], env=env, stderr=subprocess.DEVNULL
    )
    try:
        assert tail.stdout is not None
        yield BufferedByteReceiveStream(tail.stdout)
    finally:
        tail.terminate()
        with anyio.fail_after(10):
            await tail.wait()
        await tail.aclose()


@pytest.mark.parametrize("by_env", [False, True], ids=["options", "environment"])
async def test_tail_follows_the_keys_mail_on_the_remote_service(
    service: Service, tmp_path: Path, by_env: bool
) -> None:
    """Not the local post office: `--url` (or AGENTPOST_URL) is followed as every mailbox
    command follows it, as the key's agent, and nothing is marked read."""
    alice = Remote(service, await service.create_agent("alice"))
    bob = Remote(service, await service.create_agent("bob"))
    before = await alice.json("send", "bob", "before tail started")
    elsewhere = tmp_path / "no-local-post-office"
    env = {**os.environ, "AGENTPOST_HOME": str(elsewhere)}
    where = ["--url", bob.url, "--key", bob.key]
    if by_env:
        env.update(AGENTPOST_URL=bob.url, AGENTPOST_KEY=bob.key)
        where = []
    async with _tailing("--backlog", "5", *where, env=env) as lines:
        assert (await _next_line(lines))["id"] == before["id"]
        live = await alice.json("send", "bob", "while tail runs")
        assert (await _next_line(lines))["id"] == live["id"]
    assert not elsewhere.exists(), "tail opened a local post office"
    assert (await bob.json("inbox", "--peek"))["unread"] == 2, "tail marked mail read"


async def test_tail_shows_the_newest_unread_mail_as_its_backlog(service: Service) -> None:
    """As local `tail` does: the oldest unread first would show mail that is long past, then
    jump to the live mail."""
    alice = Remote(service, await service.create_agent("alice"))
    bob = Remote(service, await service.create_agent("bob"))
    sent = [(await alice.json("send", "bob", f"number {n}"))["id"] for n in range(5)]
    async with _tailing("--backlog", "2", "--url", bob.url, "--key", bob.key) as lines:
        assert [(await _next_line(lines))["id"] for _ in range(2)] == sent[-2:]


async def test_tail_with_a_refused_key_exits_with_the_refusal(service: Service) -> None:
    done = await Remote(service, "ap_" + "x" * 43).run("tail", "--json")
    assert done.returncode == 3, done.stderr.decode()
    assert json.loads(done.stdout)["error"]["code"] == "unauthenticated"


async def test_tail_with_a_key_but_no_url_is_refused() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTPOST_URL", "AGENTPOST_KEY")}
    done = await anyio.run_process([str(AGENTPOST), "tail", "--key", "ap_x"], check=False, env=env)
    assert done.returncode == 2, done.stderr.decode()
    assert b"--url" in done.stderr


async def test_tail_shows_the_newest_unread_mail_past_a_page_of_it(tmp_path: Path) -> None:
    """Past 500 unread, it showed the newest of the oldest 500: mail long past, then a jump."""
    raised = {"AGENTPOST_SEND_RATE_PER_MINUTE": "100000"}
    async with running_service(tmp_path, raised) as service:
        alice = service.client(await service.create_agent("alice"))
        bob = Remote(service, await service.create_agent("bob"))
        sent = []
        for n in range(MAX_LIMIT + 3):
            answer = await alice.post("/v1/messages", json={"to": "bob", "body": f"n{n}"})
            sent.append(answer.json()["id"])
        read = await bob.json("inbox", "--limit", "1")  # the oldest, read: not a backlog's
        assert [m["id"] for m in read["messages"]] == sent[:1]
        async with _tailing("--backlog", "3", "--url", bob.url, "--key", bob.key) as lines:
            assert [(await _next_line(lines))["id"] for _ in range(3)] == sent[-3:]


async def test_who_all_shows_the_owner_gone_offline_as_idle_not_active(tmp_path: Path) -> None:
    """Each of the owner's commands opens its admin key's own session, which says nothing of
    what the owner is doing: stored `active` by its opening, it showed an owner long gone as
    active."""
    quick = {"AGENTPOST_HEARTBEAT_S": "0.2", "AGENTPOST_OFFLINE_AFTER_S": "1"}
    async with running_service(tmp_path, quick) as service:
        the_owner = Remote(service, service.admin_key)
        alice = Remote(service, await service.create_agent("alice"))
        await the_owner.json("who")
        looking = service.client(alice.key)

        async def owner_gone() -> bool:
            found = (await looking.get("/v1/presence", params={"include_offline": "true"})).json()
            return [a["online"] for a in found["agents"] if a["name"] == "owner"] == [False]

        await eventually(owner_gone)
        found = {a["name"]: a for a in (await alice.json("who", "--all"))["agents"]}
        assert (found["owner"]["online"], found["owner"]["status"]) == (False, "idle")
        assert found["owner"]["last_seen_s"] is not None
        table = (await alice.run("who", "--all")).stdout.decode()
        (row,) = [line for line in table.splitlines() if "owner" in line]
        assert "idle" in row
        assert "active" not in row
