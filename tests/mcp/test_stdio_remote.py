"""`agentpost mcp --url URL --key KEY`: the stdio tools of a remote post office, end to end.

Real processes all the way: `agentpost serve` on a loopback port, the remote-backed `agentpost mcp`
spoken to by the SDK's stdio client, another agent over MCP's Streamable HTTP with the SDK's
client, a third over REST with the Python client. Every revision of the protocol, as the local
stdio tests.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.client import Client
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from agentpost.client.desk import AGENT_UNKNOWN
from cutting_proxy import CuttingProxy
from git_repo import git, make_repo
from remote_office import Office
from service_process import Service, eventually, over_http, running_service, serve_command
from stdio_agents import INBOX_URI, WAKE_TIMEOUT_S, Agent, Agents, text_of

pytestmark = pytest.mark.anyio


async def start_remote(
    agents: Agents,
    service: Service,
    key: str,
    *,
    through_env: bool = False,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    url: str | None = None,
) -> Agent:
    """A remote-backed `agentpost mcp` for `key`'s agent: `--url/--key`, or the environment;
    `url` where the service is reached, if not at its own (a proxy's)."""
    url = url or service.url
    log = agents.tmp_path / f"remote-{len(agents.tried) + 1}.stderr"
    agent = Agent(None, agents.revision, log)
    agents.tried.append(agent)
    if through_env:
        environ = {**(env or {}), "AGENTPOST_URL": url, "AGENTPOST_KEY": key}
        params = agents.params(None, environ, cwd, "apollo")
    else:
        params = agents.params(None, env, cwd, "apollo")
        params = params.model_copy(update={"args": [*params.args, "--url", url, "--key", key]})
    with anyio.fail_after(60):
        await agents.group.start(agent.run, params)
    agents.running.append(agent)
    return agent


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def test_the_remote_backed_server_offers_the_local_servers_tools(
    agents: Agents, service: Service
) -> None:
    local = await agents.start("zed")
    remote = await start_remote(agents, service, await service.create_agent("alice"))

    def tools(listed: Any) -> dict[str, Any]:
        return {t.name: t.input_schema for t in listed.tools}

    assert tools(await remote.mcp.list_tools()) == tools(await local.mcp.list_tools())


async def test_two_agents_exchange_across_rest_mcp_over_http_and_remote_stdio(
    agents: Agents, service: Service, revision: str
) -> None:
    office = Office(service)
    try:
        alice_key, bob_key = await office.new_key("alice"), await office.new_key("bob")
        carol = await office.agent("carol")
        alice = await start_remote(agents, service, alice_key)
        assert (alice.name, alice.first_answer["project"]) == ("alice", "apollo")

        async with over_http(service, bob_key, revision) as bob, alice.inbox_updates() as told:
            # stdio (through REST) → MCP over HTTP
            asked = await alice.call("send", to="bob", body="can you review #42?", subject="pr")
            [seen] = (await call(bob, "inbox"))["messages"]
            assert (seen["id"], seen["from"], seen["subject"]) == (asked["id"], "alice", "pr")

            # MCP over HTTP → stdio: pushed, then read, in the same thread
            answer = await call(bob, "send", to="alice", body="approved", reply_to=asked["id"])
            with anyio.fail_after(WAKE_TIMEOUT_S):
                assert await told() == INBOX_URI
            [got] = (await alice.call("inbox"))["messages"]
            assert (got["id"], got["from"], got["thread_id"]) == (
                answer["id"],
                "bob",
                asked["thread_id"],
            )
            assert (await alice.call("ack", ids=[answer["id"]]))["acked"] == [answer["id"]]

            # REST → stdio: urgent mail rides along on the next answer, once
            urgent = await carol.send("alice", "prod is down", priority="urgent")
            with anyio.fail_after(WAKE_TIMEOUT_S):
                assert await told() == INBOX_URI
            assert [u["id"] for u in (await alice.call("who"))["urgent"]] == [urgent.id]
            assert "urgent" not in await alice.call("who")

        thread = await alice.call("thread", thread_id=asked["thread_id"])
        assert [m["id"] for m in thread["messages"]] == [asked["id"], answer["id"]]
        receipts = (await alice.call("sent"))["messages"][0]["receipts"]
        assert [(r["to"], r["state"]) for r in receipts] == [("bob", "read")]
        [bob_sent] = await office.client(bob_key).sent()
        assert [(r.to, r.state.value) for r in bob_sent.receipts] == [("alice", "acked")]

        # The stdio process is a session of its own, the key's only one: seen at work, and
        # offline at once when it stops.
        [present] = [p for p in await carol.who() if p.name == "alice"]
        assert (present.online, present.project, present.sessions) == (True, "apollo", 1)
        await alice.stop()
        [after] = [p for p in await carol.who(include_offline=True) if p.name == "alice"]
        assert (after.online, after.sessions) == (False, 0)
    finally:
        await office.aclose()


async def test_refusals_keep_their_codes_through_the_remote_server(
    agents: Agents, service: Service
) -> None:
    alice = await start_remote(agents, service, await service.create_agent("alice"))
    await service.create_agent("bob")
    assert await alice.refused("send", to="nobody", body="hello?") == "unknown_recipient"
    assert await alice.refused("register", name="bob") == "forbidden"
    assert await alice.refused("register", name="ALICE") == "invalid_argument"  # as locally
    assert await alice.refused("leave", channel="#general") == "forbidden"
    assert await alice.refused("search", query="x" * 100_000) == "too_large"  # as locally
    inbox = await alice.result("inbox", limit=0)
    assert text_of(inbox).startswith("invalid_argument: limit must be an integer from 1 to 500")
    status = await alice.call("set_status", status="blocked", objective="waiting for review")
    assert (status["agent"], status["status"], status["objective"]) == (
        "alice",
        "blocked",
        "waiting for review",
    )


async def test_the_url_and_key_may_come_from_the_environment(
    agents: Agents, service: Service
) -> None:
    alice = await start_remote(
        agents, service, await service.create_agent("alice"), through_env=True
    )
    assert alice.name == "alice"
    assert (await alice.call("channels"))["channels"][0]["name"] == "#general"


async def test_a_session_ended_on_the_service_is_minted_again_with_its_profile(
    agents: Agents, service: Service
) -> None:
    """The service ends a session from outside (`DELETE /v1/sessions/…`) and deletes ended
    ones once an agent has 100: the server mints a new one on the next call, with the status
    and objective it had, and carries on, as a local session's process would."""
    office = Office(service)
    try:
        alice_key, carol = await office.new_key("alice"), await office.agent("carol")
        alice = await start_remote(agents, service, alice_key)
        await alice.call("set_status", status="blocked", objective="waiting for review")
        outside = office.client(alice_key)
        await outside.end_session(alice.session_id)
        for _ in range(100):  # the ended session is deleted to make room for these
            await outside.end_session(await outside.open_session())

        me = await alice.call("whoami")
        assert me["session_id"] != alice.session_id
        assert (me["agent"], me["status"], me["objective"]) == (
            "alice",
            "blocked",
            "waiting for review",
        )
        [present] = [p for p in await carol.who() if p.name == "alice"]
        assert (present.online, present.sessions, present.status.value, present.objective) == (
            True,
            1,
            "blocked",
            "waiting for review",
        )

        # Again, by another tool: the next loss is healed too.
        await outside.end_session(me["session_id"])
        sent = await alice.call("send", to="carol", body="still here")
        [got] = (await carol.inbox()).messages
        assert (got.id, got.sender) == (sent["id"], "alice")
        again = await alice.call("whoami")
        assert again["session_id"] not in (alice.session_id, me["session_id"])
    finally:
        await office.aclose()


async def test_a_checkout_moves_the_remote_sessions_branch_within_a_heartbeat(
    agents: Agents, service: Service, tmp_path: Path
) -> None:
    """As a local session's: the branch `whoami` and the others' `who` show is the one the
    worktree has checked out now, not the one the process started on."""
    repo = make_repo(tmp_path / "rocket")
    office = Office(service)
    try:
        alice_key, carol = await office.new_key("alice"), await office.agent("carol")
        quick = {"AGENTPOST_HEARTBEAT_S": "0.1"}
        alice = await start_remote(agents, service, alice_key, env=quick, cwd=repo)

        async def branch() -> str:
            return str((await alice.call("whoami"))["branch"])

        async def moved() -> bool:
            return await branch() == "fix/parser"

        assert await branch() == "main"
        git(repo, "checkout", "-b", "fix/parser")
        await eventually(moved, WAKE_TIMEOUT_S)
        [present] = [p for p in await carol.who() if p.name == "alice"]
        assert present.branch == "fix/parser"
    finally:
        await office.aclose()


async def test_the_server_carries_on_when_the_service_comes_back(
    agents: Agents, service: Service
) -> None:
    """The service restarts (an upgrade): the tools answer again, and new mail is pushed again
    once the event stream has reopened, without restarting the stdio server."""
    office = Office(service)
    try:
        alice_key, carol = await office.new_key("alice"), await office.agent("carol")
        alice = await start_remote(agents, service, alice_key)
        async with alice.inbox_updates() as told:
            await service.restart()
            me = await alice.call("whoami")
            assert (me["agent"], me["session_id"]) == ("alice", alice.session_id)
            sent = await carol.send("alice", "back?")
            with anyio.fail_after(60):  # the stream reopens after a growing pause
                assert await told() == INBOX_URI
            [got] = (await alice.call("inbox"))["messages"]
            assert got["id"] == sent.id
    finally:
        await office.aclose()


async def test_mail_sent_after_the_event_stream_was_refused_is_still_pushed(
    agents: Agents, tmp_path: Path
) -> None:
    """The stream drops, and the service refuses its reopening (here: the one stream an agent
    may hold is taken). The server opens it again a few seconds later, where the last one was:
    opened at a later "now", it missed the mail sent in between."""
    one_stream = {"AGENTPOST_MAX_OPEN_WAITS": "1"}
    async with (
        running_service(tmp_path, one_stream) as service,
        CuttingProxy(service.port) as proxy,
    ):
        office = Office(service)
        try:
            alice_key, carol = await office.new_key("alice"), await office.agent("carol")
            alice = await start_remote(agents, service, alice_key, url=proxy.url)
            outside = service.client(alice_key)
            async with alice.inbox_updates() as told:
                async with outside.stream("GET", "/v1/events") as taken:
                    assert taken.status_code == 429  # the server's stream holds the one there is
                proxy.refusing = True
                proxy.cut()
                async with contextlib.AsyncExitStack() as holding:

                    async def stream_taken() -> bool:
                        answer = await holding.enter_async_context(
                            outside.stream("GET", "/v1/events")
                        )
                        return answer.status_code == 200

                    await eventually(stream_taken, within_s=30)
                    proxy.refusing = False
                    await eventually(lambda: _said(alice, "rate_limited"), within_s=60)
                sent = await carol.send("alice", "sent while the stream was refused")
                with anyio.fail_after(30):
                    assert await told() == INBOX_URI
                [got] = (await alice.call("inbox"))["messages"]
                assert got["id"] == sent.id
        finally:
            await office.aclose()


async def _said(agent: Agent, words: str) -> bool:
    return words in agent.stderr()


async def test_a_session_started_before_the_service_serves_and_connects_once_it_is_up(
    agents: Agents, service: Service
) -> None:
    """An agent session (Claude Code) may start before the service does (a laptop's login, a
    service restarting): the server answers `initialize` and lists its tools at once, answers
    calls `unavailable` while the service is down, and is the key's session once it is up,
    online without another call."""
    office = Office(service)
    try:
        alice_key = await office.new_key("alice")
        await service.stop()
        params = agents.params(None, {"AGENTPOST_HEARTBEAT_S": "0.5"}, None, "apollo")
        params = params.model_copy(
            update={"args": [*params.args, "--url", service.url, "--key", alice_key]}
        )
        with (agents.tmp_path / "early.stderr").open("a") as errlog:
            async with Client(
                stdio_client(params, errlog=errlog), read_timeout_seconds=15
            ) as alice:  # within a client's start-up timeout, whatever the service
                # True whoever the agent is, not a placeholder where its name would go.
                assert alice.instructions is not None
                assert AGENT_UNKNOWN not in alice.instructions
                assert "none yet" not in alice.instructions
                assert "`who` lists them" in alice.instructions
                assert "whoami" in {t.name for t in (await alice.list_tools()).tools}
                down = await alice.call_tool("inbox", {})
                assert down.is_error
                assert down.structured_content is not None
                assert down.structured_content["error"]["code"] == "unavailable"

                await service.start()
                carol = await office.agent("carol")

                async def online() -> bool:
                    return any(p.name == "alice" and p.online for p in await carol.who())

                await eventually(online, within_s=30)  # no call needed
                me = await call(alice, "whoami")
                assert (me["agent"], me["project"]) == ("alice", "apollo")
                await carol.send("alice", "you are up")
                [got] = (await call(alice, "inbox"))["messages"]
                assert got["from"] == "carol"
    finally:
        await office.aclose()


async def test_a_session_started_as_the_service_starts_names_its_agent_and_colleagues(
    agents: Agents, service: Service
) -> None:
    """A service started alongside (at login, say) answers within seconds: the server waits
    that long for it before it answers `initialize`, so the instructions are the agent's."""
    office = Office(service)
    try:
        alice_key = await office.new_key("alice")
        await office.agent("carol")
        await service.stop()
        params = agents.params(None, None, None, "apollo")
        params = params.model_copy(
            update={"args": [*params.args, "--url", service.url, "--key", alice_key]}
        )

        async def start_soon() -> None:
            await anyio.sleep(1.5)  # the server has found the service down by now
            await service.start()

        with (agents.tmp_path / "early.stderr").open("a") as errlog:
            async with anyio.create_task_group() as group:
                group.start_soon(start_soon)
                async with Client(stdio_client(params, errlog=errlog)) as alice:
                    instructions = alice.instructions
        assert instructions is not None
        assert "You are agent `alice`" in instructions
        assert "carol" in instructions
    finally:
        await office.aclose()


async def test_a_refused_key_ends_the_server_with_its_code(service: Service) -> None:
    command = serve_command()[:-1]  # the console script, without `serve`
    done = await anyio.run_process(
        [*command, "mcp", "--url", service.url, "--key", "ap_" + "x" * 43],
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 3, done.stderr
    assert b"error: unauthenticated" in done.stderr


async def test_a_wait_the_stopping_service_answers_is_timed_out_not_an_error(
    agents: Agents, service: Service
) -> None:
    """A stopping service answers open long-polls `timed_out` at once; the unread count that
    rides along is a request of its own, which the stopped service no longer answers. What the
    call did stands: the answer is the wait's, with the count said to be unknown."""
    alice = await start_remote(agents, service, await service.create_agent("alice"))
    answers: list[dict[str, Any]] = []

    async def wait() -> None:
        answers.append(await alice.call("wait", timeout_s=120))

    async with anyio.create_task_group() as group:
        group.start_soon(wait)
        await anyio.sleep(1)  # the long-poll is held open
        await service.stop()
    [answer] = answers
    assert (answer["messages"], answer["timed_out"]) == ([], True)
    assert "unread" not in answer


async def test_a_key_revoked_mid_session_ends_the_server_before_its_address_is_locked_out(
    service: Service,
) -> None:
    """Each request with a revoked key is a failed authentication, and ten lock the address
    out: a heartbeat and an event stream knocking on with it would lock every agent of this
    machine out within a minute. The server exits with the refusal's code instead."""
    office = Office(service)
    try:
        alice_key = await office.new_key("alice")
        command = serve_command()[:-1]  # the console script, without `serve`
        process = await anyio.open_process(
            [*command, "mcp", "--url", service.url, "--key", alice_key],
            stdin=subprocess.PIPE,  # held open: the client never goes
            stderr=subprocess.PIPE,
        )
        async with process:

            async def at_work() -> bool:
                return any(p.name == "alice" for p in await office.admin.who())

            await eventually(at_work, within_s=60)
            [key] = await office.admin.admin_list_keys("alice")
            await office.admin.admin_revoke_key(key.id)
            with anyio.fail_after(30):
                assert await process.wait() == 3
            assert process.stderr is not None
            assert b"error: unauthenticated" in await process.stderr.receive()
        failures = await office.admin.admin_audit_log(action="auth.failed")
        assert len(failures) <= 2
        assert (await office.admin.me()).name  # the owner is not locked out
    finally:
        await office.aclose()


async def test_tool_calls_after_the_key_was_revoked_do_not_lock_the_address_out(
    agents: Agents, service: Service
) -> None:
    """An agent that keeps calling tools once its key is revoked (retrying, say) is told
    `unauthenticated` once; the server then exits rather than knock on with that key until
    its next heartbeat, which would lock every agent of this machine out."""
    office = Office(service)
    try:
        params = agents.params(None, None, None, "apollo")
        params = params.model_copy(
            update={
                "args": [*params.args, "--url", service.url, "--key", await office.new_key("alice")]
            }
        )
        codes: list[str] = []
        with (agents.tmp_path / "revoked.stderr").open("a") as errlog:
            async with Client(
                stdio_client(params, errlog=errlog), read_timeout_seconds=60
            ) as alice:
                await alice.call_tool("whoami", {})
                [key] = await office.admin.admin_list_keys("alice")
                await office.admin.admin_revoke_key(key.id)
                with contextlib.suppress(
                    MCPError, anyio.BrokenResourceError, anyio.ClosedResourceError
                ):
                    for _ in range(12):
                        result = await alice.call_tool("inbox", {})
                        assert result.is_error
                        assert result.structured_content is not None
                        codes.append(result.structured_content["error"]["code"])
        assert codes[:1] == ["unauthenticated"]
        assert (await office.admin.me()).name == "owner"  # not locked out
        assert len(await office.admin.admin_audit_log(action="auth.failed")) <= 2
    finally:
        await office.aclose()


def test_the_local_server_never_loads_the_client() -> None:
    """`agentpost mcp` without a URL starts without the Python client or httpx: its start-up is
    every local agent session's wait."""
    code = (
        "import sys, agentpost.cli.entry, agentpost.mcp.stdio;"
        "print(sorted(m for m in sys.modules if m.split('.')[:2] == ['agentpost', 'client']"
        " or m.split('.')[0] == 'httpx'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_remote_backed_server_never_loads_the_store() -> None:
    """`agentpost mcp --url` speaks to a service: the services, the store and SQLAlchemy would
    only slow its start."""
    code = (
        "import sys, agentpost.cli.entry, agentpost.mcp.remote;"
        "print(sorted(m for m in sys.modules if m.split('.')[:2] == ['agentpost', 'store']"
        " or m.split('.')[0] == 'sqlalchemy'"
        " or m.startswith('agentpost.services.') and m != 'agentpost.services.local_identity'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
