"""The coordination commands end to end: `delegate`, `update-task`, `ask`, `check-request`,
`reserve`, `release` and `reservations`, run as the installed script on a real SQLite post
office, and against a real `agentpost serve` with `--url/--key`. A question is answered by
another `agentpost` process while the asker waits; nothing sleeps: a waiting process is read
line by line under a deadline.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from agentpost.cli.coordinating import INTERRUPTED, TIMED_OUT
from agentpost.cli.entry import EXIT_CODES
from agentpost.config import Settings
from agentpost.domain.errors import ErrorCode
from agentpost.domain.models import Caller
from agentpost.services import PostOffice
from agentpost.services.local_identity import LocalContext, this_host
from claude_stand_in import ask, claude_code
from command_line import (
    AGENTPOST,
    WAIT_S,
    Remote,
    agentpost,
    agentpost_json,
    arrange,
    arrange_async,
    database,
    refused,
    workdir,  # noqa: F401 - an autouse fixture, registered by being imported
)
from service_process import Service, eventually, running_service
from stdio_agents import MODERN, Agents

# -- delegate and update-task -----------------------------------------------------------------


def _delegated(*options: str) -> str:
    """alice delegates "Fix the build" to bob; the task's id."""
    arrange("alice", "bob")
    return str(agentpost_json("delegate", "bob", "Fix the build", *options, "--as", "alice")["id"])


def test_delegate_prints_the_task_id_and_the_assignee_finds_the_task() -> None:
    task_id = _delegated("--detail", "CI is red", "--data", '{"pr": 7}', "--urgent")
    assert task_id.startswith("t_")
    [given] = agentpost_json("tasks", "--role", "assigned", "--as", "bob")["tasks"]
    assert given["id"] == task_id
    assert (given["creator"], given["title"], given["detail"]) == (
        "alice",
        "Fix the build",
        "CI is red",
    )
    assert (given["status"], given["priority"], given["data"]) == ("open", "urgent", {"pr": 7})
    [told] = agentpost_json("inbox", "--as", "bob")["messages"]
    assert (told["kind"], told["subject"], told["data"]["task_id"]) == (
        "task",
        "Fix the build",
        task_id,
    )


def test_delegate_without_json_says_which_task_it_made() -> None:
    arrange("alice", "bob")
    done = agentpost("delegate", "bob", "Write the docs", "--as", "alice")
    assert done.returncode == 0, done.stderr
    [task] = agentpost_json("tasks", "--as", "alice")["tasks"]
    assert done.stdout == f"delegated {task['id']} to bob\n"


def test_the_assignee_reports_done_with_a_result_and_the_delegator_sees_it() -> None:
    task_id = _delegated()
    moved = agentpost_json(
        "update-task", task_id, "done", "--note", "green again", "--result", '{"pr": 8}',
        "--as", "bob",
    )  # fmt: skip
    assert (moved["status"], moved["result"]) == ("done", {"pr": 8})
    seen = agentpost_json("task", task_id, "--as", "alice")
    assert (seen["status"], seen["result"]) == ("done", {"pr": 8})
    assert [(c["actor"], c["to_status"], c["note"]) for c in seen["history"]] == [
        ("alice", "open", ""),
        ("bob", "done", "green again"),
    ]
    news = agentpost_json("inbox", "--as", "alice")["messages"]
    assert [m["from"] for m in news] == ["bob"], "the delegator is told of the change"


def test_update_task_without_json_shows_the_tasks_new_line() -> None:
    task_id = _delegated()
    done = agentpost("update-task", task_id, "in_progress", "--as", "bob", COLUMNS="200")
    assert done.returncode == 0, done.stderr
    assert f"{task_id} [in_progress] alice → bob Fix the build" in done.stdout


def test_delegate_due_in_sets_the_due_time_from_now() -> None:
    before = time.time()
    task_id = _delegated("--due-in", "3600")
    due = agentpost_json("task", task_id, "--as", "alice")["due"]
    assert before + 3600 <= due <= time.time() + 3600


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--data", "{not json"], "--data is not JSON"),
        (["--due-in", "-5"], "--due-in must be seconds, 0 or more"),
        (["--due-in", "nan"], "--due-in must be seconds, 0 or more"),
    ],
    ids=["data", "due-in", "due-in-nan"],
)
def test_a_bad_delegation_is_refused_naming_the_option_and_delegates_nothing(
    options: list[str], says: str, isolated_home: Path
) -> None:
    arrange("alice", "bob")
    before = database(isolated_home)
    done = agentpost("delegate", "bob", "Fix the build", *options, "--as", "alice")
    refused(done, "invalid_argument")
    assert says in done.stderr
    assert database(isolated_home) == before


@pytest.mark.parametrize(
    ("who", "args", "code", "says"),
    [
        ("bob", ["finished"], "invalid_argument", "status must be one of"),
        ("bob", ["done", "--result", "{x"], "invalid_argument", "--result is not JSON"),
        ("alice", ["cancelled", "--result", "1"], "invalid_argument", "a cancel takes no result"),
        ("alice", ["done"], "forbidden", "only the task's assignee"),
        ("carol", ["accepted"], "not_found", "no task"),
    ],
    ids=["unknown-status", "result-not-json", "cancel-with-result", "creator-done", "stranger"],
)
def test_an_update_the_task_cannot_take_is_refused_with_its_code_and_changes_nothing(
    who: str, args: list[str], code: str, says: str, isolated_home: Path
) -> None:
    task_id = _delegated()
    arrange("carol")
    before = database(isolated_home)
    done = agentpost("update-task", task_id, *args, "--as", who)
    refused(done, code)
    assert says in done.stderr
    assert database(isolated_home) == before


def test_a_finished_task_moves_no_more_a_conflict() -> None:
    task_id = _delegated()
    agentpost_json("update-task", task_id, "failed", "--as", "bob")
    refused(agentpost("update-task", task_id, "in_progress", "--as", "bob"), "conflict")
    assert agentpost_json("task", task_id, "--as", "alice")["status"] == "failed"


# -- ask and check-request --------------------------------------------------------------------

REQUEST_ID = re.compile(r"m_[0-9a-z]+")


@dataclass
class Asking:
    """An `agentpost ask` process that has asked and waits; `request_id` is the one it names."""

    process: anyio.abc.Process
    errors: BufferedByteReceiveStream
    request_id: str

    async def finished(self) -> tuple[int, str, str]:
        """(exit status, stdout, the rest of stderr) once the process is done."""
        assert self.process.stdout is not None
        with anyio.fail_after(WAIT_S):
            out = b"".join([chunk async for chunk in self.process.stdout])
            rest = []
            while True:
                try:
                    rest.append(await self.errors.receive())
                except anyio.EndOfStream:
                    break
            status = await self.process.wait()
        return status, out.decode(), b"".join(rest).decode()


@asynccontextmanager
async def asking(*args: str, env: dict[str, str] | None = None) -> AsyncIterator[Asking]:
    """`agentpost ask ARGS`, running until it says it waits for the answer. It takes Ctrl-C as
    a terminal's foreground command does, however the tests were started: under a shell's
    background job SIGINT is inherited ignored, and Python then leaves it so (as it should)."""
    ignored = signal.signal(signal.SIGINT, signal.default_int_handler)  # reset to SIG_DFL at exec
    try:
        process = await anyio.open_process(
            [str(AGENTPOST), "ask", *args], env={**os.environ, **(env or {})}
        )
    finally:
        signal.signal(signal.SIGINT, ignored)
    try:
        assert process.stderr is not None
        errors = BufferedByteReceiveStream(process.stderr)
        with anyio.fail_after(WAIT_S):
            first = (await errors.receive_until(b"\n", 1 << 20)).decode()
        found = REQUEST_ID.search(first)
        assert "waiting for the answer" in first, first
        assert found is not None, first
        yield Asking(process, errors, found.group(0))
    finally:
        if process.returncode is None:
            process.kill()
        await process.aclose()


async def _respond(request_id: str, *where: str) -> None:
    """bob answers, from the command line, as another process."""
    done = await anyio.run_process(
        [str(AGENTPOST), "respond", request_id, "yes, deploy", "--data", '{"at": "noon"}', *where],
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()


@pytest.mark.anyio
async def test_ask_waits_for_the_answer_another_process_gives_and_prints_it() -> None:
    await arrange_async("alice", "bob")
    async with asking("bob", "may I deploy?", "--as", "alice", "--json") as asked:
        await _respond(asked.request_id, "--as", "bob")
        status, out, _ = await asked.finished()
    assert status == 0
    found = json.loads(out)
    assert (found["request_id"], found["answered"]) == (asked.request_id, True)
    assert (found["answer"], found["data"]) == ("yes, deploy", {"at": "noon"})
    assert found["response"]["from"] == "bob"


@pytest.mark.anyio
async def test_ask_without_json_shows_the_answer_as_the_message_that_carries_it() -> None:
    await arrange_async("alice", "bob")
    env = {"COLUMNS": "200"}
    async with asking("bob", "may I deploy?", "--as", "alice", env=env) as asked:
        await _respond(asked.request_id, "--as", "bob")
        status, out, _ = await asked.finished()
    assert status == 0
    assert f"(thread {asked.request_id}, re {asked.request_id}) bob → alice response" in out
    assert "\n  yes, deploy\n" in out


def test_ask_that_times_out_exits_124_and_says_how_to_check_later() -> None:
    arrange("alice", "bob")
    done = agentpost("ask", "bob", "may I deploy?", "--timeout", "0.2", "--as", "alice")
    assert done.returncode == TIMED_OUT, done.stderr
    assert done.stdout == ""
    [request_id] = set(REQUEST_ID.findall(done.stderr))
    assert f"no answer to {request_id} within 0.2 s" in done.stderr
    assert f"`agentpost check-request {request_id}`" in done.stderr

    still = agentpost_json("check-request", request_id, "--as", "alice")
    assert (still["answered"], still["answer"]) == (False, None)
    shown = agentpost("check-request", request_id, "--as", "alice")
    assert shown.stdout == f"No answer to {request_id} yet.\n"

    assert agentpost("respond", request_id, "yes", "--as", "bob").returncode == 0
    later = agentpost_json("check-request", request_id, "--as", "alice")
    assert (later["answered"], later["answer"], later["response"]["from"]) == (True, "yes", "bob")


def test_ask_with_no_wait_prints_the_open_request_as_json() -> None:
    arrange("alice", "bob")
    done = agentpost("ask", "bob", "lunch?", "--timeout", "0", "--as", "alice", "--json")
    assert done.returncode == TIMED_OUT
    found = json.loads(done.stdout)
    assert (found["answered"], found["timed_out"]) == (False, True)
    [asked] = agentpost_json("inbox", "--as", "bob")["messages"]
    assert (asked["id"], asked["kind"], asked["body"]) == (found["request_id"], "request", "lunch?")
    assert "waiting" not in done.stderr, "no wait was asked for"


def test_ask_waits_as_long_as_its_timeout_past_the_services_ceiling_on_one_wait() -> None:
    arrange("alice", "bob")
    started = time.monotonic()
    done = agentpost(
        "ask",
        "bob",
        "still there?",
        "--timeout",
        "1.5",
        "--as",
        "alice",
        AGENTPOST_MAX_WAIT_S="0.3",
    )
    assert done.returncode == TIMED_OUT, done.stderr
    assert time.monotonic() - started >= 1.5
    assert len(agentpost_json("inbox", "--as", "bob")["messages"]) == 1, "asked once"


@pytest.mark.anyio
async def test_ctrl_c_while_asking_stops_waiting_and_names_the_request_to_follow_up() -> None:
    await arrange_async("alice", "bob")
    async with asking("bob", "may I deploy?", "--as", "alice") as asked:
        asked.process.send_signal(signal.SIGINT)
        status, out, rest = await asked.finished()
    assert status == INTERRUPTED
    assert out == ""
    assert f"stopped waiting for the answer to {asked.request_id}" in rest
    assert f"`agentpost check-request {asked.request_id}`" in rest
    assert "Traceback" not in rest
    still = agentpost_json("check-request", asked.request_id, "--as", "alice")
    assert still["answered"] is False


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["nobody", "hello?"], "unknown_recipient"),
        (["bob", "hello?", "--timeout", "-1"], "invalid_argument"),
        # past a day its idempotency key is forgotten: asked again, it would be asked twice
        (["bob", "hello?", "--timeout", "86401"], "invalid_argument"),
        (["bob", "hello?", "--data", "[1,"], "invalid_argument"),
        (["bob", " "], "invalid_argument"),
    ],
    ids=[
        "unknown-agent",
        "negative-timeout",
        "timeout-past-a-day",
        "data-not-json",
        "blank-question",
    ],
)
def test_a_question_that_cannot_be_asked_is_refused_and_asks_nothing(
    args: list[str], code: str, isolated_home: Path
) -> None:
    arrange("alice", "bob")
    before = database(isolated_home)
    refused(agentpost("ask", *args, "--as", "alice"), code)
    assert database(isolated_home) == before


def test_check_request_is_for_the_asker_only() -> None:
    arrange("alice", "bob", "carol")
    done = agentpost("ask", "bob", "lunch?", "--timeout", "0", "--as", "alice", "--json")
    request_id = json.loads(done.stdout)["request_id"]
    refused(agentpost("check-request", request_id, "--as", "bob"), "forbidden")
    refused(agentpost("check-request", request_id, "--as", "carol"), "not_found")
    refused(agentpost("check-request", "m_nope", "--as", "alice"), "not_found")


@pytest.mark.anyio
async def test_an_agent_in_an_mcp_session_takes_the_task_and_answers_the_person(
    tmp_path: Path,
) -> None:
    """The use the commands are for: a person at the command line delegates to, and asks, an
    agent working through `agentpost mcp`. Here this test is both bob's MCP client and the
    person's terminal, so each command names the owner: unnamed, a command its client runs
    speaks as bob (tests/cli/test_speaking.py)."""
    async with anyio.create_task_group() as group:
        agents = Agents(group, MODERN, tmp_path)
        try:
            bob = await agents.start("bob")
            delegate = [str(AGENTPOST), "delegate", "bob", "Fix the build", "--as", "owner"]
            done = await anyio.run_process([*delegate, "--json"], check=False)
            assert done.returncode == 0, done.stderr.decode()
            task_id = json.loads(done.stdout)["id"]
            given = await bob.call("tasks", role="assigned")
            assert [(t["id"], t["creator"]) for t in given["tasks"]] == [(task_id, "owner")]
            await bob.call("update_task", task_id=task_id, status="done", result={"pr": 9})
            shown = [str(AGENTPOST), "task", task_id, "--as", "owner", "--json"]
            seen = json.loads((await anyio.run_process(shown)).stdout)
            assert (seen["status"], seen["result"]) == ("done", {"pr": 9})

            async with asking("bob", "may I deploy?", "--as", "owner", "--json") as asked:
                await bob.call("respond", request_id=asked.request_id, answer="not yet")
                status, out, _ = await asked.finished()
            assert status == 0
            assert json.loads(out)["answer"] == "not yet"
        finally:
            agents.stop_all()
    assert "Traceback" not in bob.stderr(), bob.stderr()


# -- reservations -------------------------------------------------------------------------------


OUTSIDER_PID = 1
"""init: alive, and the parent of no command's ancestor, so its sessions are no command's own (a
session of this test's own process would be taken for its commands': the process that started
the test is one of their ancestors)."""


async def _reserve(project: str, name: str, paths: Sequence[str], reason: str) -> None:
    """A live local session of `name`, no command's own, in `project` reserves `paths`."""
    office = await PostOffice.open(Settings())
    try:
        context = LocalContext(this_host(), OUTSIDER_PID, project, f"/src/{project}", "main")
        session = await office.presence.open_local_session(context, name=name)
        await office.reservations.reserve(Caller(name, session.id), list(paths), reason=reason)
    finally:
        await office.aclose()


def test_reservations_lists_those_of_the_current_directorys_project() -> None:
    anyio.run(_reserve, "work", "alice", ["src/parser.py"], "rewriting the parser")
    anyio.run(_reserve, "shop", "bob", ["docs/guide.md"], "docs week")
    found = agentpost_json("reservations")
    assert found["project"] == "work"  # the scratch folder the command runs in
    assert [
        (r["agent"], r["path"], r["exclusive"], r["reason"]) for r in found["reservations"]
    ] == [("alice", "src/parser.py", True, "rewriting the parser")]
    shown = agentpost("reservations", COLUMNS="200")
    assert shown.returncode == 0, shown.stderr
    assert re.search(
        r"src/parser\.py\s+│\s+alice\s+│\s+exclusive\s+│.*rewriting the parser", shown.stdout
    )

    other = agentpost_json("reservations", "--project", "shop")["reservations"]
    assert [(r["agent"], r["path"]) for r in other] == [("bob", "docs/guide.md")]
    assert agentpost_json("reservations", AGENTPOST_PROJECT="shop")["project"] == "shop"
    none = agentpost("reservations", "--project", "elsewhere")
    assert none.stdout == "No live reservations in elsewhere.\n"
    refused(agentpost("reservations", "--project", "not a name"), "invalid_argument")


def test_reservations_run_by_claude_code_lists_the_project_its_agentpost_mcp_was_given() -> None:
    """`.mcp.json` may give `agentpost mcp` an `AGENTPOST_PROJECT` the commands Claude Code runs
    never see (the stand-in's is apollo, the folder's work): the listing showed work's, none of
    the reservations the session itself makes and is refused by."""
    anyio.run(_reserve, "apollo", "alice", ["src/app.py"], "rewriting it")
    here = Path.cwd()  # the scratch folder `work`
    with claude_code("bob", cwd=here, log=here.parent / "bob.stderr") as bob:
        listed = ask(bob, [str(AGENTPOST), "reservations", "--json"])
        shown = ask(bob, [str(AGENTPOST), "reservations"])
        named = ask(bob, [str(AGENTPOST), "reservations", "--project", "work", "--json"])
    assert listed["returncode"] == 0, listed["stderr"]
    found = json.loads(listed["stdout"])
    assert found["project"] == "apollo"
    assert [(r["agent"], r["path"]) for r in found["reservations"]] == [("alice", "src/app.py")]
    assert "reservations in apollo" in shown["stdout"]
    assert json.loads(named["stdout"]) == {"project": "work", "reservations": []}
    assert agentpost_json("reservations")["project"] == "work", "run by no client: the folder's"


async def _around(project: str, name: str) -> None:
    """`name` has a live local session (no command's own) in `project`: its reservations live."""
    office = await PostOffice.open(Settings())
    try:
        context = LocalContext(this_host(), OUTSIDER_PID, project, f"/src/{project}", "main")
        await office.presence.open_local_session(context, name=name)
    finally:
        await office.aclose()


def held_in(project: str) -> list[tuple[str, str, bool]]:
    """(agent, path, exclusive) of each live reservation of `project`, as the command lists it."""
    found = agentpost_json("reservations", "--project", project)["reservations"]
    return [(r["agent"], r["path"], r["exclusive"]) for r in found]


def test_reserve_claims_paths_and_release_gives_them_up() -> None:
    anyio.run(_around, "work", "bob")
    done = agentpost("reserve", "docs/guide.md", "--reason", "docs week", "--as", "bob")
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(
        r"reserved docs/guide\.md exclusively until (?:[\d-]{10} )?[\d:]{8} \(r_\w+\)\n",
        done.stdout,
    )
    shared = agentpost_json("reserve", "src/*.py", "--shared", "--ttl", "60", "--as", "bob")
    [granted] = shared["granted"]
    assert (granted["path"], granted["exclusive"], granted["ttl_s"]) == ("src/*.py", False, 60)
    assert shared["conflicts"] == []
    assert held_in("work") == [("bob", "docs/guide.md", True), ("bob", "src/*.py", False)]

    gone = agentpost("release", "docs/guide.md", "--as", "bob")
    assert gone.returncode == 0, gone.stderr
    assert gone.stdout.startswith("released docs/guide.md (r_")
    assert held_in("work") == [("bob", "src/*.py", False)]
    again = agentpost("release", "docs/guide.md", "--as", "bob")
    assert again.returncode == 4
    assert "not yours or not live: docs/guide.md" in again.stderr
    by_id = agentpost_json("release", "--id", granted["id"], "--as", "bob")
    assert [r["path"] for r in by_id["reservations"]] == ["src/*.py"]
    assert held_in("work") == []


def test_release_all_with_nothing_held_says_so() -> None:
    """A silent success reads as a command that did nothing, or hung: it says none was held."""
    anyio.run(_around, "work", "bob")
    done = agentpost("release", "--all", "--as", "bob")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "no live reservations of yours to release\n"
    assert agentpost_json("release", "--all", "--as", "bob") == {
        "reservations": [],
        "not_found": [],
    }


def test_reserving_what_another_agent_holds_exclusively_is_refused_as_a_conflict() -> None:
    anyio.run(_reserve, "work", "alice", ["src/**"], "rewriting it")
    anyio.run(_around, "work", "bob")
    done = agentpost("reserve", "src/app.py", "docs/guide.md", "--shared", "--as", "bob")
    assert done.returncode == EXIT_CODES[ErrorCode.CONFLICT]
    assert re.fullmatch(
        r"error: conflict: src/app\.py is held by alice as 'src/\*\*' exclusively until "
        r"(?:[\d-]{10} )?[\d:]{8}\n",
        done.stderr,
    )
    assert done.stdout.startswith("reserved docs/guide.md shared until ")
    assert held_in("work") == [("alice", "src/**", True), ("bob", "docs/guide.md", False)]
    as_json = agentpost("reserve", "src/app.py", "--as", "bob", "--json")
    assert as_json.returncode == EXIT_CODES[ErrorCode.CONFLICT]
    [conflict] = json.loads(as_json.stdout)["conflicts"]
    assert (conflict["path"], conflict["holder"], conflict["held"]) == (
        "src/app.py",
        "alice",
        "src/**",
    )
    mine = agentpost("release", "src/**", "--as", "bob")
    assert mine.returncode == 4, "another agent's reservation is never released"
    assert held_in("work")[0] == ("alice", "src/**", True)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["reserve", "src/app.py", "--ttl", "-1"], "error: invalid_argument: --ttl is a number"),
        (["reserve", "../outside.py"], "error: invalid_argument: "),
        (["release"], "error: invalid_argument: name the paths or --id to release, or --all"),
        (["release", "src/app.py", "--all"], "error: invalid_argument: name the paths or --id"),
    ],
)
def test_a_reservation_that_cannot_be_is_refused_and_changes_nothing(
    args: list[str], said: str
) -> None:
    anyio.run(_around, "work", "bob")
    agentpost_json("reserve", "src/app.py", "--as", "bob")
    done = agentpost(*args, "--as", "bob")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(said)
    assert held_in("work") == [("bob", "src/app.py", True)]


# -- on a remote post office --------------------------------------------------------------------


@pytest.mark.anyio
async def test_delegate_and_update_task_act_on_the_remote_service(service: Service) -> None:
    alice = Remote(service, await service.create_agent("alice"))
    bob = Remote(service, await service.create_agent("bob"))
    made = await alice.json("delegate", "bob", "Fix the build", "--data", '{"pr": 7}')
    listed = await bob.json("tasks", "--role", "assigned")
    assert [(t["id"], t["data"]) for t in listed["tasks"]] == [(made["id"], {"pr": 7})]

    moved = await bob.json("update-task", made["id"], "done", "--result", '{"merged": true}')
    assert moved["status"] == "done"
    seen = await alice.json("task", made["id"])
    assert (seen["status"], seen["result"]) == ("done", {"merged": True})
    bad = await bob.run("update-task", made["id"], "finished")
    assert bad.returncode == 2
    assert bad.stderr.startswith(b"error: invalid_argument: status")
    assert (await alice.json("task", made["id"]))["status"] == "done"


@pytest.mark.anyio
async def test_ask_on_the_remote_service_gets_the_answer_and_check_request_finds_it(
    service: Service,
) -> None:
    alice = Remote(service, await service.create_agent("alice"))
    bob = Remote(service, await service.create_agent("bob"))
    where = ["--url", alice.url, "--key", alice.key]
    async with asking("bob", "may I deploy?", "--json", *where) as asked:
        await _respond(asked.request_id, "--url", bob.url, "--key", bob.key)
        status, out, _ = await asked.finished()
    assert status == 0
    assert json.loads(out)["answer"] == "yes, deploy"
    again = await alice.json("check-request", asked.request_id)
    assert (again["answered"], again["data"]) == (True, {"at": "noon"})

    late = await alice.run("ask", "bob", "and tomorrow?", "--timeout", "0")
    assert late.returncode == TIMED_OUT
    assert b"agentpost check-request m_" in late.stderr
    assert (await alice.json("reservations", "--project", "shop")) == {
        "project": "shop",
        "reservations": [],
    }


@pytest.mark.anyio
async def test_reserve_and_release_act_on_the_remote_service_conflicts_refused(
    service: Service,
) -> None:
    alice = Remote(service, await service.create_agent("alice", project="shop"))
    bob = Remote(service, await service.create_agent("bob", project="shop"))
    made = await alice.json("reserve", "src/**", "--reason", "rewriting it")
    assert [r["path"] for r in made["granted"]] == ["src/**"]
    refused_ = await bob.run("reserve", "src/app.py")
    assert refused_.returncode == EXIT_CODES[ErrorCode.CONFLICT]
    assert refused_.stderr.startswith(b"error: conflict: src/app.py is held by alice as 'src/**'")
    listed = await bob.json("reservations", "--project", "shop")
    assert [(r["agent"], r["path"]) for r in listed["reservations"]] == [("alice", "src/**")]
    assert (await bob.run("release", "src/**")).returncode == 4
    gone = await alice.run("release", "src/**")
    assert gone.returncode == 0, gone.stderr
    assert gone.stdout.startswith(b"released src/** (r_")
    assert (await bob.json("reserve", "src/app.py"))["conflicts"] == []


@pytest.mark.anyio
async def test_reservations_over_url_lists_the_project_reserve_claims_in_not_the_folders(
    service: Service,
) -> None:
    """The folder the command runs in (project work) says nothing of the remote agent: reserve
    claims in its session's project (shop), and a listing that looked in work showed nothing
    just reserved."""
    alice = Remote(service, await service.create_agent("alice", project="shop"))
    await alice.json("reserve", "src/**", "--reason", "rewriting it")
    listed = await alice.json("reservations")
    assert listed["project"] == "shop"
    assert [(r["agent"], r["path"]) for r in listed["reservations"]] == [("alice", "src/**")]
    shown = await alice.run("reservations", env={"COLUMNS": "200"} | _remote_env(alice))
    assert b"reservations in shop" in shown.stdout
    assert b"src/**" in shown.stdout
    elsewhere = await alice.json(
        "reservations", env={"AGENTPOST_PROJECT": "work"} | _remote_env(alice)
    )
    assert elsewhere["project"] == "shop", "as reserve --url, the key's session decides"
    assert await alice.json("reservations", "--project", "work") == {
        "project": "work",
        "reservations": [],
    }

    released = await alice.run("release", "--all")
    assert released.stdout.startswith(b"released src/** (r_"), released.stderr
    gone = await alice.run("reservations")
    assert gone.stdout == b"No live reservations in shop.\n"


@pytest.mark.anyio
async def test_reservations_over_url_for_an_agent_without_a_project_is_refused_as_reserve_is(
    service: Service,
) -> None:
    alice = Remote(service, await service.create_agent("alice"))
    for command in (["reservations"], ["reserve", "src/app.py"]):
        done = await alice.run(*command)
        assert done.returncode == EXIT_CODES[ErrorCode.INVALID_ARGUMENT]
        assert done.stderr.startswith(b"error: invalid_argument: reservations belong to a project")


def _remote_env(agent: Remote) -> dict[str, str]:
    return {"AGENTPOST_URL": agent.url, "AGENTPOST_KEY": agent.key}


QUICK = {"AGENTPOST_HEARTBEAT_S": "0.2", "AGENTPOST_OFFLINE_AFTER_S": "1"}
"""A service whose sessions go offline a second after they were last heard from."""


@pytest.mark.anyio
async def test_reserve_over_url_says_its_claims_lapse_with_the_commands_own_session(
    tmp_path: Path,
) -> None:
    """A one-off command speaks for its key's own session, which goes offline soon after it:
    with no other session of the agent online, the claim lapses then, not at its TTL, and the
    command says so, and when."""
    async with running_service(tmp_path, QUICK) as service:
        alice = Remote(service, await service.create_agent("alice", project="shop"))
        bob = Remote(service, await service.create_agent("bob", project="shop"))
        shown = await alice.run("reserve", "docs/guide.md")
        assert shown.returncode == 0, shown.stderr
        first, said = shown.stdout.decode().splitlines()
        assert first.startswith("reserved docs/guide.md exclusively until ")
        assert re.fullmatch(
            r"held while alice has a session online, and none is but this command's: these "
            r"lapse about (?:[\d-]{10} )?[\d:]{8}, not at their --ttl, unless alice is heard "
            r"from by then "
            r"\(a request with this key, or an agentpost mcp --url of alice's running\)",
            said,
        ), said

        made = await alice.json("reserve", "src/app.py")
        [granted] = made["granted"]
        assert made["other_sessions"] == []
        lapse = made["lapse_unheard_at"]
        assert lapse < granted["expires_at"]
        assert lapse <= time.time() + 2 * 1 + 0.5, "offline 1 s after its last request, then 1 s"

        async def lapsed() -> bool:
            listed = await bob.json("reservations")
            return not any(r["agent"] == "alice" for r in listed["reservations"])

        await eventually(lapsed, within_s=WAIT_S)
        assert time.time() >= lapse - 0.5, "held until about when the command said"


@pytest.mark.anyio
async def test_reserve_over_url_names_the_other_sessions_that_keep_its_claims(
    service: Service,
) -> None:
    alice = Remote(service, await service.create_agent("alice", project="shop"))
    minted = await service.client(alice.key).post("/v1/sessions", json={})  # as mcp --url does
    assert minted.status_code in (200, 201), minted.text
    session = minted.json()["session_id"]
    shown = await alice.run("reserve", "docs/guide.md")
    assert shown.returncode == 0, shown.stderr
    said = shown.stdout.decode().splitlines()[-1]
    assert said == f"held while alice has a session online: {session} besides this command's"
    made = await alice.json("reserve", "src/app.py")
    assert made["other_sessions"] == [session]
