"""`agentpost tail --url`: the key's mail on a remote post office, live.

A remote service has no owner's view of every message: a key sees its own agent's mail. So
remote `tail` shows that agent's newest unread mail first (at most `--backlog`), then each message
delivered to it as the service's event stream tells of it. Everything is read as a peek
(`inbox` with `peek`, `get_message`): following marks nothing read.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import aclosing
from typing import TYPE_CHECKING

import anyio

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.events import EventType
from agentpost.domain.limits import MAX_LIMIT
from agentpost.domain.models import DeliveryState, Message

if TYPE_CHECKING:
    from agentpost.client import AsyncClient


async def newest_unread(client: AsyncClient, count: int) -> list[Message]:
    """The newest `count` unread messages, oldest first, as local `tail` shows its backlog.
    Unread mail reads oldest first and takes no cursor: past one page of it, the whole inbox
    is read back from its newest page, its unread mail picked out, until there is enough."""
    unread = await client.inbox(peek=True, limit=MAX_LIMIT)
    if unread.unread <= len(unread.messages):
        return unread.messages[-count:]
    found: list[Message] = []
    before: str | None = None
    while len(found) < count:
        page = await client.inbox(unread_only=False, peek=True, limit=MAX_LIMIT, before=before)
        found[:0] = [m for m in page.messages if m.state is DeliveryState.QUEUED]
        if len(page.messages) < MAX_LIMIT:
            break
        before = page.messages[0].id
    return found[-count:]


async def follow_remote(client: AsyncClient, backlog: int, show: Callable[[Message], None]) -> None:
    """Show the backlog, then every new message, until cancelled or refused (which raises).

    The stream opens before the backlog is read, so a message stored in between is shown once,
    not lost; a message gone before it could be read (expired, deleted) is skipped."""
    await client.me()  # a refused key or an unreachable service says so now, not never
    opened = anyio.Event()
    send, receive = anyio.create_memory_object_stream[str](math.inf)
    failed: list[AgentpostError] = []

    async def listen() -> None:
        try:
            async with send, aclosing(client.events(on_open=opened.set)) as events:
                async for event in events:
                    if event.type == EventType.MESSAGE_CREATED and event.message_id:
                        await send.send(event.message_id)
        except AgentpostError as err:  # the key was refused meanwhile
            failed.append(err)
        finally:
            opened.set()

    async def show_all() -> None:
        await opened.wait()
        shown: set[str] = set()
        if backlog > 0 and not failed:
            for message in await newest_unread(client, backlog):
                shown.add(message.id)
                show(message)
        async with receive:
            async for message_id in receive:
                if message_id in shown:
                    continue
                try:
                    message = await client.get_message(message_id)
                except AgentpostError as err:
                    if err.code is not ErrorCode.NOT_FOUND:
                        raise
                    continue
                show(message)

    async with anyio.create_task_group() as group:
        group.start_soon(listen)
        try:
            await show_all()
        except AgentpostError as err:
            failed.append(err)
        group.cancel_scope.cancel()
    if failed:
        raise failed[0]
