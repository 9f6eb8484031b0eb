"""A loopback TCP proxy that loses answers: the network failing after a request arrived.

The first `lose` requests reach the service and are carried out; the connection then closes
before the answer reaches the client, as a dropped Wi-Fi or a restarted load balancer would.
It runs its own event loop on a thread, so a blocking client can go through it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType


class LosingProxy:
    def __init__(self, upstream_port: int, lose: int) -> None:
        self.upstream_port = upstream_port
        self.to_lose = lose
        self.lost = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._server: asyncio.Server | None = None
        self._carrying: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LosingProxy:
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("the proxy did not start")
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._carry, "127.0.0.1", 0)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._started.set()
        self._loop.run_forever()
        self._server.close()
        for task in self._carrying:
            task.cancel()
        self._loop.run_until_complete(
            asyncio.gather(self._server.wait_closed(), *self._carrying, return_exceptions=True)
        )
        self._loop.close()

    async def _carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._carrying.add(task)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)

        async def requests() -> None:
            while data := await reader.read(65536):
                up_writer.write(data)
                await up_writer.drain()

        forwarding = asyncio.create_task(requests())
        try:
            while data := await up_reader.read(65536):
                if self.to_lose > 0:  # the service answered: this answer is lost
                    self.to_lose -= 1
                    self.lost += 1
                    return
                writer.write(data)
                await writer.drain()
        finally:
            forwarding.cancel()
            for each in (writer, up_writer):
                each.close()
                with contextlib.suppress(OSError, asyncio.CancelledError):
                    await each.wait_closed()
            await asyncio.gather(forwarding, return_exceptions=True)
            self._carrying.discard(task)
