"""Long requests that end when their client hangs up.

A long-poll marks the mail it returns read, and any open wait keeps its session online. A
client that went away (a timeout of its own, a dropped network, a proxy's idle limit) must
therefore stop its wait at once: otherwise the next mail is marked read and written into a
closed connection, its sender's receipt says `read`, and the session stays online until the
wait's own deadline. (A client that leaves while its mail is being marked read is answered
into the void all the same: no server can tell a client that is about to go.)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
from starlette.requests import Request

T = TypeVar("T")


async def unless_hung_up(request: Request, work: Callable[[], Awaitable[T]]) -> T | None:
    """`work`'s result, or None once the client has gone (`work` is then cancelled). A
    refusal `work` raises reaches the caller as itself, not wrapped in a group."""
    done: list[T] = []
    refused: list[Exception] = []  # raised once the watch has stopped
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            # The body was read already: what comes next is the client leaving.
            while (await request.receive())["type"] != "http.disconnect":
                pass
            group.cancel_scope.cancel()

        group.start_soon(watch)
        try:
            done.append(await work())
        except Exception as exc:
            refused.append(exc)
        group.cancel_scope.cancel()
    if refused:
        raise refused[0]
    return done[0] if done else None
