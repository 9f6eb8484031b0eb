"""Tasks and blocking questions over a real `agentpost serve`: REST through the Python client and
raw HTTP (status codes, body rules), and the same tools over MCP/HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from agentpost.client.async_client import AsyncClient
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.models import Kind
from agentpost.domain.requests import RequestAnswer
from agentpost.domain.tasks import TaskStatus
from service_process import Service

pytestmark = pytest.mark.anyio

WAKE_S = 20


@asynccontextmanager
async def clients(service: Service, *names: str) -> AsyncIterator[list[AsyncClient]]:
    keys = [await service.create_agent(name) for name in names]
    opened = [AsyncClient(service.url, key) for key in keys]
    try:
        yield opened
    finally:
        for client in opened:
            await client.aclose()


async def test_a_task_is_delegated_reported_on_and_read_back_over_rest(service: Service) -> None:
    async with clients(service, "boss", "worker", "stranger") as (boss, worker, stranger):
        task = await boss.delegate("worker", "Fix the build", detail="CI is red", priority="urgent")
        assert (task.status, task.assignee, task.creator) == (TaskStatus.OPEN, "worker", "boss")
        [delivered] = (await worker.inbox()).messages
        assert (delivered.kind, delivered.data["task_id"]) == (Kind.TASK, task.id)

        moved = await worker.update_task(task.id, "done", note="green", result={"ok": True})
        assert (moved.status, moved.result) == (TaskStatus.DONE, {"ok": True})
        assert await boss.task(task.id) == moved
        assert [t.id for t in await boss.tasks("created", status="done")] == [task.id]
        assert await worker.tasks("created") == []
        [told] = (await boss.inbox()).messages
        assert (told.kind, told.thread_id, told.data["status"]) == (
            Kind.TASK,
            task.thread_id,
            "done",
        )

        for call, code in (
            (stranger.task(task.id), ErrorCode.NOT_FOUND),
            (boss.update_task(task.id, "cancelled"), ErrorCode.CONFLICT),
            (worker.task("t_nope"), ErrorCode.NOT_FOUND),
        ):
            with pytest.raises(AgentpostError) as caught:
                await call
            assert caught.value.code is code


async def test_a_blocked_assignees_note_and_result_reach_the_creator_withheld_over_rest(
    service: Service,
) -> None:
    async with clients(service, "boss", "worker") as (boss, worker):
        task = await boss.delegate("worker", "Fix the build")
        await boss.block("worker")
        await worker.update_task(task.id, "done", note="see my link", result={"url": "x"})
        seen = await boss.task(task.id)
        assert seen.status is TaskStatus.DONE
        assert [(c.note, c.withheld) for c in seen.history] == [("", False), ("", True)]
        assert (seen.result, seen.result_withheld) == (None, True)  # as the wire said it
        own = await worker.task(task.id)
        assert [(c.note, c.withheld) for c in own.history][-1] == ("see my link", False)
        assert (own.result, own.result_withheld) == ({"url": "x"}, False)


async def test_task_listings_page_back_with_before_over_rest(service: Service) -> None:
    async with clients(service, "boss", "worker") as (boss, worker):
        made = [await boss.delegate("worker", f"task {n}") for n in range(3)]
        first = await worker.tasks("assigned", limit=2)
        assert [t.id for t in first] == [made[2].id, made[1].id]
        rest = await worker.tasks("assigned", limit=2, before=first[-1].id)
        assert [t.id for t in rest] == [made[0].id]
        with pytest.raises(AgentpostError) as caught:
            await worker.tasks(before="t_nope")
        assert caught.value.code is ErrorCode.NOT_FOUND


async def test_a_request_blocks_over_rest_until_another_client_answers(service: Service) -> None:
    async with clients(service, "alice", "bob", "carol") as (alice, bob, carol):
        answers: list[RequestAnswer] = []

        async def ask() -> None:
            answers.append(await alice.request("bob", "Which port?", timeout_s=40))

        with anyio.fail_after(WAKE_S):
            async with anyio.create_task_group() as group:
                group.start_soon(ask)
                [asked] = (await bob.wait(WAKE_S)).messages
                assert not answers
                with pytest.raises(AgentpostError) as caught:
                    await carol.respond(asked.id, "not mine to answer")
                assert caught.value.code is ErrorCode.NOT_FOUND  # not hers to know of
                sent = await bob.respond(asked.id, "8080", data={"port": 8080})

        [answer] = answers
        assert (answer.request_id, answer.answered, answer.answer) == (asked.id, True, "8080")
        assert answer.data == {"port": 8080}
        assert answer.response is not None
        assert answer.response.id == sent.id
        with pytest.raises(AgentpostError) as caught:
            await bob.respond(asked.id, "9090")
        assert caught.value.code is ErrorCode.CONFLICT
        assert (await alice.check_request(asked.id)).answer == "8080"


async def test_an_answer_from_an_agent_the_asker_blocked_after_asking_is_dropped_over_rest(
    service: Service,
) -> None:
    """As in local mode (tests/services/test_requests.py): the block drops the answer."""
    async with clients(service, "alice", "bob") as (alice, bob):
        asked = await alice.request("bob", "Ship it?", timeout_s=0)
        assert await alice.block("bob") == ["bob"]
        sent = await bob.respond(asked.request_id, "yes")
        assert sent.to == ["alice"]
        checked = await alice.check_request(asked.request_id)
        assert (checked.answered, checked.answer) == (False, None)
        assert (await alice.inbox(unread_only=False)).messages == []


async def test_a_retried_delegate_makes_one_task_across_a_restart(service: Service) -> None:
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    headers = {"Idempotency-Key": "review-7"}
    asked = {"to": "bob", "title": "Review #7", "data": {"pr": 7}}
    first = await alice.post("/v1/tasks", json=asked, headers=headers)
    await service.restart()
    again = await alice.post("/v1/tasks", json=asked, headers=headers)
    assert first.status_code == again.status_code == 201, again.text
    assert again.json()["id"] == first.json()["id"]
    other = await alice.post("/v1/tasks", json=asked | {"title": "Review #8"}, headers=headers)
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "conflict"
    tasks = (await bob.get("/v1/inbox")).json()["messages"]
    assert [m["subject"] for m in tasks] == ["Review #7"]


async def test_a_request_retried_with_its_key_waits_for_the_first_questions_answer(
    service: Service,
) -> None:
    async with clients(service, "alice", "bob") as (alice, bob):
        gave_up = await alice.request("bob", "Which port?", timeout_s=0, idempotency_key="p-1")
        assert gave_up.timed_out
        answers: list[RequestAnswer] = []

        async def ask_again() -> None:
            answers.append(
                await alice.request("bob", "Which port?", timeout_s=40, idempotency_key="p-1")
            )

        with anyio.fail_after(WAKE_S):
            async with anyio.create_task_group() as group:
                group.start_soon(ask_again)
                [asked] = (await bob.wait(WAKE_S)).messages
                await bob.respond(asked.id, "8080")
        [answer] = answers
        assert (answer.request_id, answer.answer) == (gave_up.request_id, "8080")
        assert len((await bob.inbox(unread_only=False, peek=True)).messages) == 1


async def test_the_rest_routes_answer_with_their_status_codes(service: Service) -> None:
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    late = await alice.post("/v1/requests", json={"to": "bob", "question": "?", "timeout_s": 0})
    assert late.status_code == 200, late.text
    asked: dict[str, Any] = late.json()
    assert (asked["answered"], asked["timed_out"]) == (False, True)
    request_id = asked["request_id"]
    answered = await bob.post(f"/v1/requests/{request_id}/response", json={"answer": "late"})
    assert answered.status_code == 201, answered.text
    again = await bob.post(f"/v1/requests/{request_id}/response", json={"answer": "again"})
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "conflict"
    checked = await alice.get(f"/v1/requests/{request_id}")
    assert (checked.json()["answered"], checked.json()["answer"]) == (True, "late")
    assert (await bob.get(f"/v1/requests/{request_id}")).status_code == 403
    assert (await alice.get("/v1/requests/m_nope")).status_code == 404

    created = await alice.post("/v1/tasks", json={"to": "bob", "title": "Review"})
    assert created.status_code == 201, created.text
    task_id = created.json()["id"]
    extra = await alice.post("/v1/tasks", json={"to": "bob", "title": "x", "from": "owner"})
    assert extra.status_code == 400
    bad_status = await bob.patch(f"/v1/tasks/{task_id}", json={"status": "finished"})
    assert bad_status.status_code == 400
    forbidden = await bob.patch(f"/v1/tasks/{task_id}", json={"status": "cancelled"})
    assert forbidden.status_code == 403
    moved = await bob.patch(f"/v1/tasks/{task_id}", json={"status": "accepted", "note": "ok"})
    assert moved.status_code == 200
    assert moved.json()["history"][-1]["note"] == "ok"
    done = {"status": "done", "note": "shipped", "result": {"pr": 7}}
    finished = await bob.patch(f"/v1/tasks/{task_id}", json=done)
    assert finished.status_code == 200
    resent = await bob.patch(f"/v1/tasks/{task_id}", json=done)  # its answer lost, say
    assert (resent.status_code, resent.json()) == (200, finished.json())
    other = await bob.patch(f"/v1/tasks/{task_id}", json={**done, "result": {"pr": 8}})
    assert (other.status_code, other.json()["error"]["code"]) == (409, "conflict")


def _neighbour(made: str) -> str:
    """An id one step from `made` (where one made in the same millisecond would fall)."""
    return made[:-1] + ("1" if made.endswith("0") else "0")


async def test_a_stranger_hears_of_a_task_or_request_what_it_hears_of_none(
    service: Service,
) -> None:
    """A task or question between two others was `forbidden` to a third, where an id nobody
    made was `not_found`: whether one was there, and which message ids were questions, could
    be asked of the service, and an id made in the same millisecond as one's own is the next
    or last of it. Now the stranger's every answer is the one for an id nobody made."""
    alice = await service.agent("alice")
    await service.agent("bob")
    carol = await service.agent("carol")
    made = await alice.post("/v1/tasks", json={"to": "bob", "title": "Rotate the keys"})
    task_id = made.json()["id"]
    asked = await alice.post("/v1/requests", json={"to": "bob", "question": "?", "timeout_s": 0})
    request_id = asked.json()["request_id"]
    no_task, no_request = _neighbour(task_id), _neighbour(request_id)

    for method, path, body, params in [
        ("GET", "/v1/tasks/{t}", None, {}),
        ("PATCH", "/v1/tasks/{t}", {"status": "accepted"}, {}),
        ("PATCH", "/v1/tasks/{t}", {"status": "cancelled"}, {}),
        ("GET", "/v1/tasks", None, {"before": "{t}"}),
        ("GET", "/v1/requests/{r}", None, {}),
        ("POST", "/v1/requests/{r}/response", {"answer": "me!"}, {}),
    ]:
        real, none = [
            await carol.request(
                method,
                path.format(t=t, r=r),
                json=body,
                params={k: v.format(t=t, r=r) for k, v in params.items()},
            )
            for t, r in ((task_id, request_id), (no_task, no_request))
        ]
        assert none.status_code == 404, none.text
        said = real.text.replace(task_id, no_task).replace(request_id, no_request)
        assert (real.status_code, said) == (none.status_code, none.text), (method, path)

    task = await alice.get(f"/v1/tasks/{task_id}")
    assert (task.json()["status"], len(task.json()["history"])) == ("open", 1)
    checked = await alice.get(f"/v1/requests/{request_id}")
    assert checked.json()["answered"] is False


async def test_a_due_no_date_can_spell_is_a_400_and_delegates_nothing(service: Service) -> None:
    """It used to be taken, and the next look for dues passed stopped the service."""
    alice = await service.agent("alice")
    await service.agent("bob")
    for due in (-1e308, 1e300):
        refused = await alice.post("/v1/tasks", json={"to": "bob", "title": "x", "due": due})
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert (error["code"], error["details"]) == (
            "invalid_argument",
            {"min": 0.0, "max": 253402300799.0},
        )
    assert (await alice.get("/v1/tasks", params={"role": "all"})).json()["tasks"] == []


async def test_the_task_and_request_tools_work_over_mcp_http(service: Service) -> None:
    alice_key = await service.create_agent("alice")
    bob_key = await service.create_agent("bob")

    @asynccontextmanager
    async def connect(key: str) -> AsyncIterator[Client]:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http,
            Client(
                streamable_http_client(f"{service.url}/mcp?tools=core,coord", http_client=http)
            ) as client,
        ):
            yield client

    async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
        result = await client.call_tool(tool, arguments)
        assert not result.is_error, result.content
        assert result.structured_content is not None
        return result.structured_content

    async with connect(alice_key) as alice, connect(bob_key) as bob:
        names = {tool.name for tool in (await alice.list_tools()).tools}
        wanted = {"delegate", "tasks", "task", "update_task", "request", "respond", "check_request"}
        assert wanted <= names

        task = await call(alice, "delegate", to="bob", title="Fix the build")
        [assigned] = (await call(bob, "tasks", role="assigned"))["tasks"]
        assert assigned["id"] == task["id"]
        [delivered] = (await call(bob, "inbox"))["messages"]
        assert (delivered["kind"], delivered["data"]["task_id"]) == ("task", task["id"])
        done = await call(bob, "update_task", task_id=task["id"], status="done", note="fixed")
        # Sent again (its answer lost): the task as it is, the creator told once, below.
        again = await call(bob, "update_task", task_id=task["id"], status="done", note="fixed")
        assert again == done
        other = await bob.call_tool(
            "update_task", {"task_id": task["id"], "status": "done", "note": "fixed twice"}
        )
        assert other.is_error
        assert (other.structured_content or {})["error"]["code"] == "conflict"
        [told] = (await call(alice, "inbox"))["messages"]
        assert (told["kind"], told["data"]["status"]) == ("task", "done")
        one = await call(alice, "task", task_id=task["id"])
        assert (one["id"], one["status"], one["history"][-1]["note"]) == (
            task["id"],
            "done",
            "fixed",
        )
        older = await call(alice, "tasks", role="created", before=task["id"])
        assert older["tasks"] == []

        answers: list[dict[str, Any]] = []

        async def ask() -> None:
            answers.append(await call(alice, "request", to="bob", question="Ship?", timeout_s=40))

        with anyio.fail_after(WAKE_S):
            async with anyio.create_task_group() as group:
                group.start_soon(ask)
                [asked] = (await call(bob, "wait", timeout_s=WAKE_S))["messages"]
                await call(bob, "respond", request_id=asked["id"], answer="yes")
        [answer] = answers
        assert (answer["answered"], answer["answer"]) == (True, "yes")
        checked = await call(alice, "check_request", request_id=asked["id"])
        assert checked["answer"] == "yes"
