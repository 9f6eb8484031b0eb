"""Delegated tasks and blocking questions (group `coord`): delegate, tasks, task, update_task,
request, respond, check_request.

Titles, notes, details, results and answers are other agents' words: a summary quotes a title
as a JSON string, and shows an answer, a task's detail and its result inside message frames
that name their author and trust, so none reads as the user's instruction.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from agentpost.domain.desk import Desk
from agentpost.domain.framing import frame, words_head
from agentpost.domain.models import Message, Trust
from agentpost.domain.requests import RequestAnswer
from agentpost.domain.tasks import Task, TaskChange, TaskRole, TaskStatusName
from agentpost.mcp import presenting
from agentpost.mcp.adapter import MailboxServer, ToolOutput
from agentpost.mcp.tools import JSON


def _line(task: Task) -> str:
    title = presenting.quoted(task.title)
    creator = presenting.by(task.creator, task.creator_trust)
    status = f"{task.status.value}, overdue" if task.overdue else task.status.value
    return f"- {task.id} [{status}] {creator} -> {task.assignee}: {title}"


def _thread_and_due(task: Task) -> str:
    """The thread of one task's news and, when it has one, its due."""
    if task.due is None:
        return f"Thread {task.thread_id}"
    late = " (overdue)" if task.overdue else ""
    return f"Thread {task.thread_id}; due {presenting.moment(task.due)}{late}"


def _words(task: Task, *, shortened: bool = False) -> list[tuple[str, str, Trust]]:
    """The task's words as frames hold them: the creator's detail (in full only), and the
    assignee's result, its JSON cut to a preview in a listing."""
    out = []
    if task.detail and not shortened:
        head = words_head(task.creator, task.creator_trust, task=task.id, field="detail")
        out.append((head, task.detail, task.creator_trust))
    if task.result is not None:
        result = json.dumps(task.result, ensure_ascii=False, sort_keys=True)
        if shortened and len(result) > presenting.PREVIEW_CHARS:
            result = result[: presenting.PREVIEW_CHARS] + "… (`task` shows all of it)"
        trust = task.result_trust or Trust.UNTRUSTED
        head = words_head(task.assignee, trust, task=task.id, field="result")
        out.append((head, result, trust))
    return out


def _framed(title: str, words: Sequence[tuple[str, str, Trust]]) -> str:
    untrusted = any(trust is not Trust.VERIFIED for _, _, trust in words)
    return frame([(head, text) for head, text, _ in words], title=title, untrusted=untrusted)


def _change(change: TaskChange) -> str:
    moved = change.to_status.value
    if change.from_status is not None:
        moved = f"{change.from_status.value} -> {moved}"
    note = f": {presenting.quoted(change.note)}" if change.note else ""
    if change.withheld:
        note = " (its note is withheld: written while you blocked its writer)"
    return f"  {presenting.by(change.actor, change.trust)}: {moved}{note}"


def _where(found: RequestAnswer) -> str:
    if found.response is None:
        if found.timed_out:
            return f"No answer to {found.request_id} before the timeout; `check_request` later."
        return f"No answer to {found.request_id} yet."
    return f"{found.response.sender} answered {found.request_id}:"


def register_task_tools(server: MailboxServer, desk: Desk) -> None:
    async def reply(
        structured: dict[str, Any], summary: str, messages: Sequence[Message] = ()
    ) -> ToolOutput:
        return presenting.answer(structured, summary, await presenting.notices_of(desk), messages)

    async def told(found: RequestAnswer) -> ToolOutput:
        shown = [] if found.response is None else [found.response]
        return await reply(found.to_dict(), _where(found), shown)

    async def delegate(
        to: str,
        title: str,
        detail: str | None = None,
        priority: Literal["normal", "urgent"] = "normal",
        data: JSON = None,
        due: float | None = None,
    ) -> ToolOutput:
        """Hand a task to another agent: it arrives as a message of kind `task`, and every
        change the assignee makes is told to you in its thread. `due` is Unix seconds."""
        task = await desk.delegate(to, title, detail=detail, priority=priority, data=data, due=due)
        summary = f"Delegated {task.id} to {task.assignee} (thread {task.thread_id})."
        return await reply(task.to_dict(), summary)

    async def tasks(
        role: TaskRole = "all",
        status: TaskStatusName | None = None,
        limit: int = 50,
        before: str | None = None,
    ) -> ToolOutput:
        """Your tasks, newest first, each with its history and a preview of its result:
        `assigned` to you, `created` by you, or `all`; optionally only those with `status`.
        `before` (the last task id of a page) gives the older ones."""
        found = await desk.tasks(role, status, limit, before)
        lines = [f"{len(found)} task{'' if len(found) == 1 else 's'}"] + [_line(t) for t in found]
        if found:
            lines[-1] += presenting.older_pages(
                "tasks", len(found), limit, found[-1].id, role=role, status=status
            )
        words = [w for t in found for w in _words(t, shortened=True)]
        return await reply(
            {"tasks": [t.to_dict() for t in found]}, _framed("\n".join(lines), words)
        )

    async def task(task_id: str) -> ToolOutput:
        """One task you made or were given, with its detail, history, result and thread."""
        found = await desk.task(task_id)
        lines = [_line(found)[2:], f"{_thread_and_due(found)}; history:"]
        lines += [_change(c) for c in found.history]
        if found.result_withheld:
            lines.append("Its result is withheld: given while you blocked its assignee.")
        return await reply(found.to_dict(), _framed("\n".join(lines), _words(found)))

    async def update_task(
        task_id: str, status: TaskStatusName, note: str | None = None, result: JSON = None
    ) -> ToolOutput:
        """Move a task. The assignee: open -> accepted | in_progress | done | failed, accepted ->
        in_progress | done | failed, in_progress -> done | failed. The creator: open, accepted
        or in_progress -> cancelled (no result: it is the assignee's). The other side is told,
        with your note and result. Sending your last update again (its answer lost) answers
        the task as it is and changes nothing."""
        task = await desk.update_task(task_id, status, note=note, result=result)
        return await reply(task.to_dict(), f"Task {task.id} is {task.status.value} now.")

    async def request(
        to: str, question: str, data: JSON = None, timeout_s: float = 60
    ) -> ToolOutput:
        """Ask one agent a question and wait for the answer (at most `timeout_s`, capped by
        the service). Without an answer in time, `timed_out` is set: `check_request` with the
        `request_id` fetches a later answer."""
        return await told(await desk.request(to, question, data=data, timeout_s=timeout_s))

    async def respond(request_id: str, answer: str, data: JSON = None) -> ToolOutput:
        """Answer a request sent to you (once); the asker, waiting or not, gets it."""
        sent = await desk.respond(request_id, answer, data=data)
        return await reply(
            {"request_id": request_id, **sent.to_dict()},
            f"Answered {request_id} with {sent.id}.",
        )

    async def check_request(request_id: str) -> ToolOutput:
        """Whether a request you made has been answered, and the answer."""
        return await told(await desk.check_request(request_id))

    for fn in (delegate, tasks, task, update_task, request, respond, check_request):
        server.add_tool(fn)
