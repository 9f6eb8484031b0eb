"""The mailbox tools: each translates its arguments to one call of the desk and back.

The desk (agentpost.domain.desk) is the services bound to the caller, or the Python client bound
to a remote service's key: the tools neither know nor care which.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

from agentpost.domain.desk import Desk
from agentpost.domain.models import Message
from agentpost.domain.names import channel_tag
from agentpost.mcp.adapter import MailboxServer, ToolOutput
from agentpost.mcp.presenting import (
    answer,
    by,
    count,
    messages_json,
    notices_of,
    older_pages,
    quoted,
    token,
)

JSON = dict[str, Any] | list[Any] | str | int | float | bool | None


def register_tools(server: MailboxServer, desk: Desk) -> None:
    async def reply(
        structured: dict[str, Any], summary: str, messages: list[Message] | None = None
    ) -> ToolOutput:
        return answer(structured, summary, await notices_of(desk), messages or [])

    tools: list[Callable[..., Awaitable[ToolOutput]]] = []

    def tool(fn: Callable[..., Awaitable[ToolOutput]]) -> Callable[..., Awaitable[ToolOutput]]:
        tools.append(fn)
        return fn

    @tool
    async def register(
        name: str | None = None, description: str | None = None, objective: str | None = None
    ) -> ToolOutput:
        """Optional: take an agent name, and say what you are and what you are working on.

        Sessions are registered automatically; call this only to choose a name (refused while
        another live session holds it) or to set your description and objective. Over HTTP your
        name is your key's; where the connection has a session of its own, the first call opens
        an agentpost session for it (`session_id`), apart from other windows on the same key.
        """
        await desk.register(name=name, description=description, objective=objective)
        return await whoami()

    @tool
    async def whoami() -> ToolOutput:
        """Your agent name, session, project, branch and unread count."""
        session = await desk.whoami()
        out = {
            "agent": session.agent,
            "session_id": session.id,
            "project": session.project,
            "branch": session.branch,
            "worktree": session.worktree,
            "objective": session.objective,
            "status": session.status.value,
        }
        project = f"project {session.project}" if session.project else "no project"
        return await reply(out, f"You are {session.agent} ({project}).")

    @tool
    async def who(project: str | None = None, include_offline: bool = False) -> ToolOutput:
        """Who is at work: each agent's project, branch, worktree, objective, status, presence;
        an agent the owner has not vouched for is marked (untrusted)."""
        found = await desk.who(project, include_offline)
        lines = [
            f"- {by(p.name, p.trust)}{'' if p.online else ' (offline)'}: "
            f"{p.project or '-'}@{token(p.branch) if p.branch else '-'}"
            f" [{p.status.value}] {quoted(p.objective)}"
            for p in found
        ]
        summary = "\n".join([count(len(found), "agent"), *lines])
        return await reply({"agents": [p.to_dict() for p in found]}, summary)

    @tool
    async def set_status(
        status: Literal["active", "idle", "blocked", "done"] | None = None,
        objective: str | None = None,
    ) -> ToolOutput:
        """Tell the others your status (active, idle, blocked, done) and current objective."""
        await desk.set_status(status=status, objective=objective)
        return await whoami()

    @tool
    async def send(
        to: str | list[str],
        body: str,
        subject: str | None = None,
        data: JSON = None,
        thread_id: str | None = None,
        reply_to: str | None = None,
        priority: Literal["normal", "urgent"] = "normal",
        ttl_s: float | None = None,
        must_read: bool = False,
    ) -> ToolOutput:
        """Send a message to an agent, a list of agents, or a '#channel' ('#general' = everyone).

        `data` carries structured JSON; `reply_to` a message id (the reply joins its thread);
        `ttl_s` lets unread mail expire; `must_read` mail never expires unread.
        """
        sent = await desk.send(
            to,
            body,
            subject=subject,
            data=data,
            thread_id=thread_id,
            reply_to=reply_to,
            priority=priority,
            ttl_s=ttl_s,
            must_read=must_read,
        )
        where = f"#{sent.channel}" if sent.channel else ", ".join(sent.to)
        summary = f"Sent {sent.id} to {where} (thread {token(sent.thread_id)})."
        if sent.skipped_full:
            summary += f" Not delivered to {', '.join(sent.skipped_full)}: inbox full."
        return await reply(sent.to_dict(), summary)

    @tool
    async def inbox(
        unread_only: bool = True,
        limit: int = 20,
        thread_id: str | None = None,
        urgent_only: bool = False,
        peek: bool = False,
        before: str | None = None,
    ) -> ToolOutput:
        """Read your mail, oldest first (with `unread_only=false`, the newest `limit` of it, read
        and acked too, and `before`, a page's first id, gives the page before); it is marked read
        unless `peek`. `ack` what you handled. `thread_id` narrows it to one thread, named by its
        id or by the id of any of its messages."""
        found = await desk.inbox(
            unread_only=unread_only,
            limit=limit,
            thread_id=thread_id,
            urgent_only=urgent_only,
            peek=peek,
            before=before,
        )
        summary = count(len(found.messages), "message") if found.messages else "No new mail."
        if not unread_only:  # unread mail takes no cursor: the next call reads the next page
            summary += older_pages(
                "inbox",
                len(found.messages),
                limit,
                found.messages[0].id if found.messages else None,
                unread_only=False,
                thread_id=thread_id,
                urgent_only=urgent_only or None,
                peek=peek or None,
            )
        return await reply({"messages": messages_json(found.messages)}, summary, found.messages)

    @tool
    async def ack(ids: list[str]) -> ToolOutput:
        """Acknowledge messages you handled (by id); the sender's receipt shows it."""
        done = await desk.ack(ids)
        summary = f"Acknowledged {len(done.acked)}; not found: {len(done.not_found)}."
        return await reply(done.to_dict(), summary)

    @tool
    async def wait(timeout_s: float = 60, thread_id: str | None = None) -> ToolOutput:
        """Block until unread mail arrives (then return it, marked read) or `timeout_s` passes;
        `thread_id` (its id or any of its messages') waits for that thread's mail only."""
        found = await desk.wait(timeout_s=timeout_s, thread_id=thread_id)
        summary = (
            "No mail before the timeout."
            if found.timed_out
            else count(len(found.messages), "message")
        )
        structured = {"messages": messages_json(found.messages), "timed_out": found.timed_out}
        return await reply(structured, summary, found.messages)

    @tool
    async def thread(thread_id: str, limit: int = 50, before: str | None = None) -> ToolOutput:
        """A thread's messages that you may see, oldest first (the newest `limit` of them);
        name it by its thread id or by the id of any of its messages. `before` (a page's first,
        oldest id) gives the messages before that page."""
        found = await desk.thread(thread_id, limit, before)
        thread = found[0].thread_id if found else thread_id
        summary = f"Thread {token(thread)}: {count(len(found), 'message')}"
        if found:
            summary += older_pages("thread", len(found), limit, found[0].id, thread_id=thread)
        return await reply({"thread_id": thread, "messages": messages_json(found)}, summary, found)

    @tool
    async def sent(limit: int = 20, before: str | None = None) -> ToolOutput:
        """Your sent messages, newest first, with each recipient's state and times; `before`
        (a page's last id) gives the older ones."""
        found = await desk.sent(limit, before)
        lines = [
            f"- {s.message.id} to {', '.join(s.message.to)}: "
            + (", ".join(f"{r.to}={r.state.value}" for r in s.receipts) or "no recipients")
            for s in found
        ]
        summary = "\n".join([count(len(found), "sent message"), *lines])
        if found:
            summary += older_pages("sent", len(found), limit, found[-1].message.id)
        return await reply({"messages": [s.to_dict() for s in found]}, summary)

    @tool
    async def search(query: str, limit: int = 20, before: str | None = None) -> ToolOutput:
        """Full-text search over the messages you may see, newest first: a match holds every
        word of `query`, which takes no operators (`OR` is a word too); `before` (the last id
        of a page) gives the older matches."""
        found = await desk.search(query, limit, before)
        summary = f"{count(len(found), 'match', 'matches')} for {query!r}"
        if found:
            summary += older_pages("search", len(found), limit, found[-1].id, query=query)
        return await reply({"messages": messages_json(found)}, summary, found)

    @tool
    async def channels() -> ToolOutput:
        """Every channel (#general, project channels, those agents joined): member counts, and
        whether you are in each."""
        found = await desk.channels()
        lines = [
            f"- #{c.name} ({c.members} member{'' if c.members == 1 else 's'})"
            f"{' joined' if c.joined else ''}"
            for c in found
        ]
        summary = "\n".join([count(len(found), "channel"), *lines])
        return await reply({"channels": [c.to_dict() for c in found]}, summary)

    @tool
    async def join(channel: str) -> ToolOutput:
        """Join a channel (creating it if new): you get its broadcasts and may read its history."""
        info = await desk.join(channel)
        return await reply(info.to_dict(), f"Joined #{info.name}.")

    @tool
    async def leave(channel: str) -> ToolOutput:
        """Leave a channel you joined."""
        left = await desk.leave(channel)
        return await reply({"left": left}, f"Left {left}.")

    @tool
    async def read_channel(channel: str, limit: int = 20, before: str | None = None) -> ToolOutput:
        """A channel's history, oldest first: the newest `limit` messages (before a message id)."""
        found = await desk.read_channel(channel, limit, before)
        tag = channel_tag(channel)
        summary = f"{tag}: {count(len(found), 'message')}"
        if found:
            summary += older_pages("read_channel", len(found), limit, found[0].id, channel=tag)
        return await reply({"channel": tag, "messages": messages_json(found)}, summary, found)

    for fn in tools:
        server.add_tool(fn)
