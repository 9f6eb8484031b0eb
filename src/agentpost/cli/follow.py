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
from agentpost.domain.models import Message

if TYPE_CHECKING:
    from agentpost.client import AsyncClient


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
            # The newest of them, oldest first, as local `tail` shows its backlog: the inbox
            # reads oldest first, so its first page is read whole (up to MAX_LIMIT).
            unread = await client.inbox(peek=True, limit=MAX_LIMIT)
            for message in unread.messages[-backlog:]:
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
