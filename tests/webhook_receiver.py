"""A real HTTP receiver for webhook tests: a few lines of HTTP/1.1 over a TCP listener on
127.0.0.1 that checks every X-Agentpost-Signature with docs/SERVICE.md's own `verify`, as a
reader would copy it, answers what a test scripts (500, a redirect, 200) and records what came."""

from __future__ import annotations

import json
import math
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

SERVICE_DOC = Path(__file__).resolve().parents[1] / "docs" / "SERVICE.md"


def documented_verify() -> Callable[..., bool]:
    """The receiver's check that docs/SERVICE.md's Webhooks section shows, run as written."""
    found = re.search(
        r"```python\n(import hashlib, hmac, time\n.*?)```", SERVICE_DOC.read_text(), re.DOTALL
    )
    assert found, "docs/SERVICE.md shows no webhook receiver's check"
    namespace: dict[str, Any] = {}
    exec(found.group(1), namespace)
    verify: Callable[..., bool] = namespace["verify"]
    return verify


verify_as_documented = documented_verify()


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    signed: bool
    """The receiver's own check of X-Agentpost-Signature against the webhook's secret."""

    @property
    def payload(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    answers: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    """What to answer, in order; 200 once they run out."""
    stalls: int = 0
    """How many requests, the first ones, are taken and never answered."""
    tolerance_s: float = math.inf
    """How old a signature's `t` may be: the services' tests sign by a clock they move, so only
    those against a real `serve` ask for the documented 300 s."""
    secret: str = ""
    url: str = ""
    port: int = 0
    requests: list[Received] = field(default_factory=list)
    _arrived: anyio.Event = field(default_factory=anyio.Event)

    async def received(self, count: int) -> list[Received]:
        """The first `count` requests, once they came."""
        while len(self.requests) < count:
            await self._arrived.wait()
        return self.requests[:count]

    def verify(self, headers: dict[str, str], body: bytes) -> bool:
        header = headers.get("x-agentpost-signature")
        return header is not None and verify_as_documented(
            self.secret, header, body, tolerance_s=self.tolerance_s
        )

    async def handle(self, stream: SocketStream) -> None:
        async with stream:
            reader = BufferedByteReceiveStream(stream)
            head = (await reader.receive_until(b"\r\n\r\n", 65_536)).decode("latin-1")
            request_line, *lines = head.split("\r\n")
            _method, path, _version = request_line.split(" ")
            headers = {}
            for line in lines:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            size = int(headers.get("content-length", "0"))
            body = await reader.receive_exactly(size) if size else b""
            self.requests.append(Received(path, headers, body, self.verify(headers, body)))
            self._arrived.set()
            self._arrived = anyio.Event()
            if self.stalls:
                self.stalls -= 1
                await anyio.sleep_forever()
            status, extra = self.answers.pop(0) if self.answers else (200, {})
            lines = [f"HTTP/1.1 {status} Scripted", "Content-Length: 0", "Connection: close"]
            lines += [f"{name}: {value}" for name, value in extra.items()]
            await stream.send(("\r\n".join(lines) + "\r\n\r\n").encode())


@asynccontextmanager
async def listening(receiver: Receiver) -> AsyncIterator[Receiver]:
    """The receiver listening on 127.0.0.1, its `url` and `port` set."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    receiver.port = listener.extra(SocketAttribute.local_port)
    receiver.url = f"http://127.0.0.1:{receiver.port}/hook"
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, receiver.handle)
        try:
            yield receiver
        finally:
            tg.cancel_scope.cancel()
