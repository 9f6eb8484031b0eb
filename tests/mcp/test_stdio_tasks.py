"""Tasks and blocking questions between real `agentpost mcp` processes, in both revisions: a task
handed out, reported on and told back; a question asked in one process, answered from another
while the first blocks; a late answer fetched; a second answer refused."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from service_process import Service
from stdio_agents import WAKE_TIMEOUT_S, Agent, Agents, older_page_call, structured, text_of

pytestmark = pytest.mark.anyio


async def remote(agents: Agents, service: Service, name: str) -> Agent:
    """`agentpost mcp --url … --key …` for a new agent of the service."""
    key = await service.create_agent(name)
    agent = Agent(name, agents.revision, agents.tmp_path / f"remote-{name}.stderr")
    agents.tried.append(agent)
    params = agents.params(None, None, None, "apollo")
    args = [*params.args, "--url", service.url, "--key", key]
    with anyio.fail_after(60):
        await agents.group.start(agent.run, params.model_copy(update={"args": args}))
    agents.running.append(agent)
    return agent


async def test_a_delegated_task_reaches_the_assignee_and_each_update_reaches_the_creator(
    agents: Agents,
) -> None:
    boss, worker = await agents.start_many("boss", "worker")

    task = await boss.call(
        "delegate", to="worker", title="Fix the build", detail="CI is red", data={"pr": 12}
    )
    assert (task["status"], task["creator"], task["assignee"]) == ("open", "boss", "worker")

    [delivered] = (await worker.call("inbox"))["messages"]
    assert (delivered["kind"], delivered["from"], delivered["subject"]) == (
        "task",
        "boss",
        "Fix the build",
    )
    assert delivered["data"]["task_id"] == task["id"]
    [assigned] = (await worker.call("tasks", role="assigned"))["tasks"]
    assert assigned["id"] == task["id"]

    await worker.call("update_task", task_id=task["id"], status="in_progress", note="on it")
    done = await worker.call(
        "update_task", task_id=task["id"], status="done", result={"commit": "abc123"}
    )
    assert done["status"] == "done"
    assert [c["to_status"] for c in done["history"]] == ["open", "in_progress", "done"]

    told = (await boss.call("inbox"))["messages"]
    assert [(m["kind"], m["data"]["status"]) for m in told] == [
        ("task", "in_progress"),
        ("task", "done"),
    ]
    assert {m["thread_id"] for m in told} == {task["thread_id"]}
    [mine] = (await boss.call("tasks", role="created", status="done"))["tasks"]
    assert mine["result"] == {"commit": "abc123"}
    shown = await boss.result("task", task_id=task["id"])
    assert structured(shown) == done
    # The worker's note is their words: quoted, on its history line, never a line of its own.
    assert '  worker: open -> in_progress: "on it"' in text_of(shown).splitlines()

    # The creator may not report the work, nor the assignee call it off.
    assert await boss.refused("update_task", task_id=task["id"], status="failed") == "conflict"
    second = await boss.call("delegate", to="worker", title="Write the docs")
    assert await worker.refused("update_task", task_id=second["id"], status="cancelled") == (
        "forbidden"
    )


async def test_a_question_asked_in_one_process_is_answered_from_another_while_it_blocks(
    agents: Agents,
) -> None:
    alice, bob = await agents.start_many("alice", "bob")
    answers: list[Any] = []

    async def ask() -> None:
        answers.append(
            await alice.result("request", to="bob", question="Which port?", timeout_s=50)
        )

    with anyio.fail_after(WAKE_TIMEOUT_S * 2):
        async with anyio.create_task_group() as group:
            group.start_soon(ask)
            arrived = await bob.call("wait", timeout_s=WAKE_TIMEOUT_S)
            [request] = arrived["messages"]
            assert (request["kind"], request["from"], request["body"]) == (
                "request",
                "alice",
                "Which port?",
            )
            assert not answers  # alice is still blocked
            await bob.call("respond", request_id=request["id"], answer="8080", data={"port": 8080})

    [result] = answers
    answer = result.structured_content
    assert answer["request_id"] == request["id"]
    assert (answer["answered"], answer["timed_out"]) == (True, False)
    assert (answer["answer"], answer["data"]) == ("8080", {"port": 8080})
    # The answer is a colleague's words: shown inside a message frame.
    text = text_of(result)
    assert "<message-" in text
    assert "from=bob" in text
    assert await bob.refused("respond", request_id=request["id"], answer="9090") == "conflict"


async def test_a_late_answer_is_fetched_by_the_asker_only(agents: Agents) -> None:
    alice, bob, carol = await agents.start_many("alice", "bob", "carol")
    asked = await alice.call("request", to="bob", question="Still there?", timeout_s=0)
    assert (asked["answered"], asked["timed_out"]) == (False, True)
    assert await carol.refused("respond", request_id=asked["request_id"], answer="me!") == (
        "not_found"
    )
    await bob.call("respond", request_id=asked["request_id"], answer="yes")
    checked = await alice.call("check_request", request_id=asked["request_id"])
    assert (checked["answered"], checked["answer"]) == (True, "yes")
    assert await carol.refused("check_request", request_id=asked["request_id"]) == "not_found"


async def test_a_remote_backed_session_delegates_and_asks_through_the_service(
    agents: Agents, service: Service
) -> None:
    """`agentpost mcp --url`: the same tools, over REST; a blocking request holds its HTTP
    call open for as long as it waits."""
    boss, worker = await remote(agents, service, "boss"), await remote(agents, service, "worker")

    task = await boss.call("delegate", to="worker", title="Fix the build", priority="urgent")
    [delivered] = (await worker.call("inbox"))["messages"]
    assert (delivered["kind"], delivered["data"]["task_id"]) == ("task", task["id"])
    await worker.call("update_task", task_id=task["id"], status="done", note="fixed")
    [mine] = (await boss.call("tasks", role="created"))["tasks"]
    assert [c["to_status"] for c in mine["history"]] == ["open", "done"]
    [told] = (await boss.call("inbox"))["messages"]
    assert told["data"]["status"] == "done"

    answers: list[dict[str, Any]] = []

    async def ask() -> None:
        answers.append(await boss.call("request", to="worker", question="Ship?", timeout_s=50))

    with anyio.fail_after(WAKE_TIMEOUT_S * 2):
        async with anyio.create_task_group() as group:
            group.start_soon(ask)
            [asked] = (await worker.call("wait", timeout_s=WAKE_TIMEOUT_S))["messages"]
            await worker.call("respond", request_id=asked["id"], answer="ship it")
    [answer] = answers
    assert (answer["answered"], answer["answer"]) == (True, "ship it")
    assert await worker.refused("respond", request_id=asked["id"], answer="no") == "conflict"


async def test_a_full_page_of_tasks_names_the_call_for_the_older_ones_of_the_same_listing(
    agents: Agents,
) -> None:
    """The page's hint named `tasks` with before alone: a model listing the tasks it created
    was sent to the older tasks of every role, those handed to it among them."""
    alice, bob = await agents.start_many("alice", "bob")
    for n in range(3):
        await alice.call("delegate", to="bob", title=f"step {n}")
    await bob.call("delegate", to="alice", title="bob's own")

    first = await alice.result("tasks", role="created", limit=2)
    assert [t["title"] for t in structured(first)["tasks"]] == ["step 2", "step 1"]
    call = older_page_call(first)
    assert call is not None
    tool, arguments = call
    assert tool == "tasks"
    assert arguments["role"] == "created"
    older = await alice.call(tool, **arguments)
    assert [t["title"] for t in older["tasks"]] == ["step 0"]

    only = await alice.result("tasks", role="assigned", limit=2)
    assert older_page_call(only) is None  # one task: the page is not full
