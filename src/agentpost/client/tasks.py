"""The operations of delegated tasks and blocking requests, each answer read into the domain
type the services return."""

from __future__ import annotations

from typing import Any

from agentpost.client.operation import Operation, Request, fields, retry_headers
from agentpost.domain.desk import PriorityName
from agentpost.domain.limits import check_wait_seconds
from agentpost.domain.models import SendResult, check_priority
from agentpost.domain.requests import RequestAnswer
from agentpost.domain.tasks import (
    Task,
    TaskRole,
    TaskStatusName,
    check_due,
    check_role,
    check_status,
)

# -- tasks --------------------------------------------------------------------------------------


def delegate(
    to: str,
    title: str,
    *,
    detail: str | None = None,
    priority: PriorityName = "normal",
    data: Any = None,
    due: float | None = None,
    idempotency_key: str | None = None,
) -> Request[Task]:
    """Hand a task to an agent: it arrives as a message of kind `task`. With
    `idempotency_key`, a retry (within 24 h) answers with the first task, making no other."""
    check_priority(priority)
    check_due(due)  # a NaN or an infinity, which no JSON carries, named as the services name it
    json = fields(to=to, title=title, detail=detail, priority=priority, data=data, due=due)
    return Request(Task.from_dict, json=json, headers=retry_headers(idempotency_key))


def tasks(
    role: TaskRole = "all",
    *,
    status: TaskStatusName | None = None,
    limit: int = 50,
    before: str | None = None,
) -> Request[list[Task]]:
    """Your tasks, newest first, each with its history: given to you, made by you, or both;
    `before` (a page's last task id) pages back."""
    _same_words_as_local(role, status)
    return Request(
        lambda a: [Task.from_dict(t) for t in a["tasks"]],
        params={"role": role, "status": status, "limit": limit, "before": before},
    )


def _same_words_as_local(role: str | None, status: str | None) -> None:
    """A role or status no task has, refused here in the words of the services: the service
    would say it in REST's (`query.role: Input should be …`), so a command or an MCP tool
    backed by a remote service would answer otherwise than on the local post office."""
    if role is not None:
        check_role(role)
    if status is not None:
        check_status(status)


def task(task_id: str) -> Request[Task]:
    """One task you made or were given, with its history."""
    return Request(Task.from_dict, path_args={"task_id": task_id})


def update_task(
    task_id: str, status: TaskStatusName, *, note: str | None = None, result: Any = None
) -> Request[Task]:
    """Move a task: the assignee reports progress, the creator may cancel; the other is told."""
    _same_words_as_local(None, status)
    return Request(
        Task.from_dict,
        path_args={"task_id": task_id},
        json=fields(status=status, note=note, result=result),
    )


# -- requests -----------------------------------------------------------------------------------


def request(
    to: str,
    question: str,
    *,
    data: Any = None,
    timeout_s: float = 60,
    idempotency_key: str | None = None,
) -> Request[RequestAnswer]:
    """Ask one agent and wait for the answer, or `timed_out` after `timeout_s` (the service
    caps it at its `max_wait_s`); `check_request` fetches a later answer. With
    `idempotency_key`, a retry asks nothing again: it waits for the first question's answer."""
    wait_s = check_wait_seconds(timeout_s)
    return Request(
        RequestAnswer.from_dict,
        json=fields(to=to, question=question, data=data, timeout_s=timeout_s),
        headers=retry_headers(idempotency_key),
        wait_s=wait_s,
    )


def respond(request_id: str, answer: str, *, data: Any = None) -> Request[SendResult]:
    """Answer a request sent to you, once; the answer is a message to the asker."""
    return Request(
        SendResult.from_dict,
        path_args={"request_id": request_id},
        json=fields(answer=answer, data=data),
    )


def check_request(request_id: str) -> Request[RequestAnswer]:
    """Where your request stands: its answer, if one came (after a timeout too)."""
    return Request(RequestAnswer.from_dict, path_args={"request_id": request_id})


class TaskOperations:
    """Listed under their OpenAPI operation ids; both clients inherit them."""

    delegate = Operation("POST", "/v1/tasks", delegate)
    tasks = Operation("GET", "/v1/tasks", tasks)
    task = Operation("GET", "/v1/tasks/{task_id}", task)
    update_task = Operation("PATCH", "/v1/tasks/{task_id}", update_task)
    request = Operation("POST", "/v1/requests", request)
    respond = Operation("POST", "/v1/requests/{request_id}/response", respond)
    check_request = Operation("GET", "/v1/requests/{request_id}", check_request)
