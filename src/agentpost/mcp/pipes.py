"""stdin and stdout of `agentpost mcp`, read and written on the event loop.

The SDK's own stdio transport hands every read and write to worker threads: a blocked
`readline()` that no cancellation interrupts, and two thread hops per message. These two classes
give the SDK the same file-like surface without either.
"""

from __future__ import annotations

import os
import stat

import anyio


class StdinLines:
    """stdin as lines of text, read on the event loop so that cancelling the read works.

    The SDK's own stdin reader blocks a worker thread in `readline()`, which no cancellation
    interrupts: on SIGTERM the server would stay up, its session online, until the client
    closed stdin.
    """

    def __init__(self) -> None:
        self._fd = os.dup(0)
        os.set_blocking(self._fd, False)
        self._buffer = b""
        self._eof = False

    @classmethod
    def for_pipe(cls) -> StdinLines | None:
        """For a pipe or socket (what MCP clients give); None (the SDK's reader) otherwise,
        since a file or /dev/null cannot be polled."""
        try:
            mode = os.fstat(0).st_mode
        except OSError:
            return None
        return cls() if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) else None

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        while b"\n" not in self._buffer and not self._eof:
            await anyio.wait_readable(self._fd)
            try:
                chunk = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                continue
            self._eof = not chunk
            self._buffer += chunk
        if not self._buffer:
            raise StopAsyncIteration
        line, newline, self._buffer = self._buffer.partition(b"\n")
        return (line + newline).decode("utf-8", errors="replace")

    def close(self) -> None:
        os.set_blocking(self._fd, True)  # the pipe's description is shared with fd 0
        os.close(self._fd)


class StdoutLines:
    """stdout written on the event loop: the SDK's writer hands every line and every flush to
    a worker thread, two thread hops per message.

    The protocol keeps a private copy of fd 1, and fd 1 itself is pointed at stderr while we
    serve (as the SDK does), so a stray print cannot corrupt the wire.
    """

    def __init__(self) -> None:
        self._fd = os.dup(1)
        os.dup2(2, 1)
        os.set_blocking(self._fd, False)

    @classmethod
    def for_pipe(cls) -> StdoutLines | None:
        try:
            mode = os.fstat(1).st_mode
        except OSError:
            return None
        return cls() if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) else None

    async def write(self, text: str) -> None:
        data = memoryview(text.encode("utf-8"))
        while data:
            try:
                written = os.write(self._fd, data)
            except BlockingIOError:
                await anyio.wait_writable(self._fd)
                continue
            data = data[written:]

    async def flush(self) -> None:
        """Every write already reached the pipe."""

    def close(self) -> None:
        os.set_blocking(self._fd, True)
        os.dup2(self._fd, 1)
        os.close(self._fd)
