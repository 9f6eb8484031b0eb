"""The jobs the SQLite runner (`store.sqlite_runner`) is given, and how their results go back.

A job is one transaction's work and the future its caller awaits on its own event loop; the
runner runs it on the loop or on one of its threads, and hands the outcome back with one
wake-up per loop for a whole batch, telling of the commit right after the answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.limits import not_unicode


@dataclass
class Job:
    fn: Callable[[Connection], Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    handed_back: Callable[[], None] | None = None
    """Called on `loop` once the result is handed back there, whether or not anyone waits."""
    touches_accounts: bool = True
    """Whether the write may change what authentication reads (`SqliteRunner.accounts_version`)."""
    lengthy: bool = False
    """A write that may hold the lock for long: it commits alone (see `SqliteRunner._writer`)."""


Outcome = tuple[Job, Any, BaseException | None]


def apply(outcomes: list[Outcome], then: Callable[[], None] | None = None) -> None:
    """Hand results back, then run `then`: the callers' tasks are woken first, so whoever
    `then` wakes in turn (waiters for the commit, the push to MCP clients) queues behind
    the answers the writes were made for."""
    try:
        for job, result, error in outcomes:
            if job.handed_back is not None:
                job.handed_back()
            if job.future.done():  # the caller gave up waiting; the write stands
                continue
            if error is not None:
                job.future.set_exception(error)
            else:
                job.future.set_result(result)
    finally:  # whatever a future raised (the loop logs it), the commit is told
        if then is not None:
            tell_commit(then)


def tell_commit(then: Callable[[], None]) -> None:
    """Run `then`, whose failure goes to the loop's exception handler: raised, it could reach
    a caller whose write ran at once (`SqliteRunner._ask_here`) as if that write had failed."""
    try:
        then()
    except Exception as exc:
        asyncio.get_running_loop().call_exception_handler(
            {"message": "telling of a commit failed", "exception": exc}
        )


def settle(
    outcomes: list[Outcome],
    then: tuple[asyncio.AbstractEventLoop, Callable[[], None]] | None = None,
) -> None:
    """Hand results back with one wake-up per event loop for a whole batch, not one per job;
    `then` runs on its loop right after that loop's results are handed back, in the same
    wake-up."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Outcome]] = {}
    if then is not None:
        by_loop[then[0]] = []
    for outcome in outcomes:
        by_loop.setdefault(outcome[0].loop, []).append(outcome)
    for loop, items in by_loop.items():
        after = then[1] if then is not None and then[0] is loop else None
        with contextlib.suppress(RuntimeError):  # that loop has closed: nobody is waiting
            loop.call_soon_threadsafe(apply, items, after)


def released(exc: BaseException) -> BaseException:
    """`exc` as its caller gets it: without the local variables of the frames it went through
    (a cursor a failed job left half-read would otherwise live on with it, and keep its
    connection's read snapshot open: a writer's `PRAGMA data_version` would then stand still,
    and the next write there fail as busy); and text sqlite3 could not bind, which only half
    of a surrogate pair makes, as the refusal it is."""
    traceback.clear_frames(exc.__traceback__)
    if isinstance(exc, UnicodeEncodeError):
        return not_unicode("a value")
    return exc


def closed() -> AgentpostError:
    return AgentpostError(ErrorCode.UNAVAILABLE, "the post office is closing")
