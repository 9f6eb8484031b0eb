"""Marks on a request's way through a benchmark's server (`bench.critical_path`).

Python imports `sitecustomize` at start from the first directory of PYTHONPATH that holds one:
the benchmark puts this directory first and names the output in AGENTPOST_BENCH_MARKS. Without
that variable this module does nothing. Each mark is `name wall-seconds thread-CPU-seconds`,
appended to that file a batch at a time (a server stopped by a signal may never run `atexit`).

`in`: bytes of a request arrived (uvicorn's protocol); `out`: the answer's last byte handed to
the socket. Between them runs what a client waits for; after `out`, until the next `in`, runs
what the server does after answering, which costs a client in sequence nothing while it lasts
less than the client's own turn. In `agentpost serve`, also where the request reaches the guard
(`guard`), the MCP SDK (`sdk`), the tool (`tool`), `Mailbox.send` (`send`) and the write
transaction (`tx`, marked on whichever thread runs it), each with 0 on the way in and 1 on the
way out.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

BATCH = 512

_path = os.environ.get("AGENTPOST_BENCH_MARKS")
_marks: list[tuple[str, float, float]] = []


def _mark(name: str) -> None:
    _marks.append((name, time.perf_counter(), time.thread_time()))
    if len(_marks) >= BATCH and name == "out":
        _flush()


def _flush() -> None:
    assert _path is not None
    with open(_path, "a") as out:
        out.writelines(f"{name} {wall} {cpu}\n" for name, wall, cpu in _marks)
    _marks.clear()


def _around(owner: Any, method: str, name: str) -> None:
    """Marks `name`0 and `name`1 around a coroutine method of `owner`."""
    inner: Callable[..., Any] = getattr(owner, method)

    async def marked(*args: Any, **kwargs: Any) -> Any:
        _mark(name + "0")
        try:
            return await inner(*args, **kwargs)
        finally:
            _mark(name + "1")

    setattr(owner, method, marked)


def _install() -> None:
    from uvicorn.protocols.http import httptools_impl as http

    data_received = http.HttpToolsProtocol.data_received

    def arrived(self: Any, data: bytes) -> None:
        _mark("in")
        data_received(self, data)

    http.HttpToolsProtocol.data_received = arrived  # type: ignore[method-assign]
    send = http.RequestResponseCycle.send

    async def sent(self: Any, message: Any) -> None:
        await send(self, message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            _mark("out")

    http.RequestResponseCycle.send = sent  # type: ignore[method-assign]
    try:  # the SDK's echo server has none of these
        from agentpost.http.guard import Guard
        from agentpost.mcp.adapter.server import MailboxServer
        from agentpost.mcp.adapter.streamable_http import NoReplay
        from agentpost.services.mailbox import Mailbox
        from agentpost.store.sqlite_runner import SqliteRunner
    except ImportError:
        return
    _around(Guard, "__call__", "guard")
    _around(NoReplay, "__call__", "sdk")
    _around(MailboxServer, "_call_tool", "tool")
    _around(Mailbox, "send", "send")
    run_batch = SqliteRunner._run_batch

    def transaction(self: Any, *args: Any, **kwargs: Any) -> bool:
        _mark("tx0")
        try:
            return run_batch(self, *args, **kwargs)
        finally:
            _mark("tx1")

    SqliteRunner._run_batch = transaction  # type: ignore[method-assign]


if _path:
    _install()
