"""Delegated tasks and blocking requests."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Query, Request
from pydantic import Field

from agentpost.domain.limits import MAX_LIMIT
from agentpost.domain.tasks import TaskRole, TaskStatusName
from agentpost.http.deps import IdempotencyKey, Me, Office
from agentpost.http.hangup import unless_hung_up
from agentpost.http.routing import api_router
from agentpost.http.schemas import Body, JSONValue

router = api_router(prefix="/v1", tags=["tasks"])


class DelegateBody(Body):
    to: str = Field(description="The agent who is to do the work.")
    title: str
    detail: str | None = None
    priority: Literal["normal", "urgent"] = "normal"
    data: JSONValue = None
    due: float | None = Field(
        None, description="When it is due, in Unix seconds, from 0 (1970) to 253402300799 (9999)."
    )


class UpdateTaskBody(Body):
    status: TaskStatusName
    note: str | None = None
    result: JSONValue = None


class RequestBody(Body):
    to: str = Field(description="The one agent who is asked.")
    question: str
    data: JSONValue = None
    timeout_s: float = Field(60, ge=0, description="Capped by the service's `max_wait_s`.")


class RespondBody(Body):
    answer: str
    data: JSONValue = None


# -- tasks --------------------------------------------------------------------------------------


@router.post("/tasks", status_code=201, operation_id="delegate")
async def delegate(
    body: DelegateBody, office: Office, me: Me, idempotency_key: IdempotencyKey = None
) -> dict[str, Any]:
    """Hand a task to an agent: it arrives as a message of kind `task`; `Idempotency-Key`
    makes a retry answer with the first task instead of making a second."""
    task = await office.tasks.delegate(
        me,
        body.to,
        body.title,
        body.detail,
        priority=body.priority,
        data=body.data,
        due=body.due,
        idempotency_key=idempotency_key,
    )
    return task.to_dict()


@router.get("/tasks", operation_id="tasks")
async def tasks(
    office: Office,
    me: Me,
    role: TaskRole = "all",
    status: TaskStatusName | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50,
    before: Annotated[
        str | None, Query(description="A task's id (a page's last): those older than it.")
    ] = None,
) -> dict[str, Any]:
    """Your tasks, newest first, each with its history: given to you, made by you, or both;
    `before` pages back."""
    found = await office.tasks.tasks(me, role, status, limit, before)
    return {"tasks": [t.to_dict() for t in found]}


@router.get("/tasks/{task_id}", operation_id="task")
async def task(task_id: str, office: Office, me: Me) -> dict[str, Any]:
    """One task you made or were given, with its history."""
    return (await office.tasks.task(me, task_id)).to_dict()


@router.patch("/tasks/{task_id}", operation_id="update_task")
async def update_task(task_id: str, body: UpdateTaskBody, office: Office, me: Me) -> dict[str, Any]:
    """Move a task: the assignee reports progress, the creator may cancel; the other is told."""
    found = await office.tasks.update_task(
        me, task_id, body.status, note=body.note, result=body.result
    )
    return found.to_dict()


# -- requests -----------------------------------------------------------------------------------


@router.post("/requests", operation_id="request")
async def request(
    body: RequestBody,
    office: Office,
    me: Me,
    http_request: Request,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    """Ask one agent and wait for the answer, or `timed_out` (then `check_request` later);
    `Idempotency-Key` makes a retry wait for the first question's answer, not ask again."""
    answer = await unless_hung_up(
        http_request,
        lambda: office.requests.request(
            me,
            body.to,
            body.question,
            body.data,
            timeout_s=body.timeout_s,
            idempotency_key=idempotency_key,
        ),
    )
    return {} if answer is None else answer.to_dict()


@router.post("/requests/{request_id}/response", status_code=201, operation_id="respond")
async def respond(request_id: str, body: RespondBody, office: Office, me: Me) -> dict[str, Any]:
    """Answer a request sent to you, once; the answer is a message to the asker."""
    return (await office.requests.respond(me, request_id, body.answer, body.data)).to_dict()


@router.get("/requests/{request_id}", operation_id="check_request")
async def check_request(request_id: str, office: Office, me: Me) -> dict[str, Any]:
    """Where your request stands: its answer, if one came (after a timeout too)."""
    return (await office.requests.check_request(me, request_id)).to_dict()
