"""A loopback TCP proxy whose connections a test cuts when it likes, and which may turn new
ones away for a while (closed as they open, as a service that is restarting does): for a client
that must carry on after its connection was lost, on the test's own event loop."""

from __future__ import annotations

from types import TracebackType

import anyio
import anyio.abc
from anyio.abc import SocketAttribute


class CuttingProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.refusing = False
        """New connections are closed as they open."""
        self._carried: set[anyio.CancelScope] = set()
        self._group: anyio.abc.TaskGroup | None = None
        self._listener: anyio.abc.SocketListener | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cut(self) -> None:
        """Close every connection carried now, both ends."""
        for scope in self._carried:
            scope.cancel()

    async def __aenter__(self) -> CuttingProxy:
        self._listener = listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        self.port = listener.extra(SocketAttribute.local_port)
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        self._group.start_soon(listener.serve, self._carry)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._group is not None
        assert self._listener is not None
        self._group.cancel_scope.cancel()
        try:
            await self._group.__aexit__(kind, exc, tb)
        finally:
            await self._listener.aclose()

    async def _carry(self, client: anyio.abc.SocketStream) -> None:
        async with client:
            if self.refusing:
                return
            with anyio.CancelScope() as scope:
                self._carried.add(scope)
                try:
                    upstream = await anyio.connect_tcp("127.0.0.1", self.upstream_port)
                    async with upstream, anyio.create_task_group() as group:

                        async def pipe(
                            source: anyio.abc.SocketStream, sink: anyio.abc.SocketStream
                        ) -> None:
                            async for chunk in source:
                                await sink.send(chunk)
                            group.cancel_scope.cancel()  # one side closed: so does the other

                        group.start_soon(pipe, client, upstream)
                        group.start_soon(pipe, upstream, client)
                except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    pass
                finally:
                    self._carried.discard(scope)
