"""A send once answered is stored, whatever happens to the processes afterwards (README): real
`agentpost mcp` processes and an `agentpost serve` on one file, killed with SIGKILL at random
moments while they send, and started again; every send any of them answered is in the file."""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
from pathlib import Path

import anyio
import httpx
import pytest
from anyio.abc import Process

from raw_stdio import RawSession, legacy_initialize
from service_process import Service, running_service
from stdio_agents import server_command

KILLS = 6
SENDERS = ("mcp-a", "mcp-b")
"""Sessions, each sending to the other; the service's sender writes to the first."""
UNLIMITED = {"AGENTPOST_SEND_RATE_PER_MINUTE": "1000000", "AGENTPOST_MAX_UNACKED": "1000000"}
GONE = (
    anyio.EndOfStream,
    anyio.IncompleteRead,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    OSError,
)
"""What a call whose process was killed under it raises: no answer, so nothing was promised."""


class Sender:
    """One `agentpost mcp` process, started again whenever it is killed."""

    def __init__(self, name: str, to: str, stderr: Path) -> None:
        self.name = name
        self.to = to
        self.stderr = stderr
        self.session: RawSession | None = None

    async def start(self) -> None:
        command, args = server_command()
        env = {**os.environ, **UNLIMITED, "AGENTPOST_AGENT": self.name}
        with self.stderr.open("ab") as errlog:
            process = await anyio.open_process(
                [command, *args], cwd=self.stderr.parent, env=env, stderr=errlog
            )
        session = RawSession(process)
        hello = legacy_initialize()
        with anyio.fail_after(60):
            session.initialized = await session.request(hello["method"], hello["params"])
        await session.notify("notifications/initialized")
        self.session = session

    async def kill(self) -> None:
        assert self.session is not None
        process, self.session = self.session.process, None
        await killed(process)


async def killed(process: Process) -> None:
    process.kill()  # SIGKILL: nothing of the process's own runs after it
    with anyio.fail_after(30):
        await process.wait()
    with contextlib.suppress(*GONE):
        await process.aclose()


def stored(database: Path) -> dict[str, str]:
    with contextlib.closing(sqlite3.connect(database)) as conn:
        return dict(conn.execute("SELECT id, body FROM messages").fetchall())


@pytest.mark.anyio
async def test_every_answered_send_survives_sigkill_of_the_sessions_and_the_service(
    tmp_path: Path,
) -> None:
    answered: dict[str, str] = {}
    stop = anyio.Event()
    senders = [
        Sender(n, SENDERS[(i + 1) % 2], tmp_path / f"{n}.stderr") for i, n in enumerate(SENDERS)
    ]
    async with running_service(tmp_path, UNLIMITED) as service:
        for sender in senders:
            await sender.start()
        key = await service.create_agent("rest-sender")

        async def send_over_mcp(sender: Sender) -> None:
            count = 0
            while not stop.is_set():
                session = sender.session
                if session is None:
                    await anyio.sleep(0.02)
                    continue
                count += 1
                body = f"{sender.name} {count}"
                with contextlib.suppress(*GONE):
                    sent = await session.call("send", to=sender.to, body=body)
                    answered[sent["id"]] = body

        async def send_over_rest(service: Service) -> None:
            count = 0
            async with httpx.AsyncClient(timeout=30) as http:
                while not stop.is_set():
                    count += 1
                    body = f"rest {count}"
                    try:
                        answer = await http.post(
                            f"{service.url}/v1/messages",
                            json={"to": [SENDERS[0]], "body": body},
                            headers={"Authorization": f"Bearer {key}"},
                        )
                    except httpx.TransportError:  # killed, or not started again yet
                        await anyio.sleep(0.02)
                        continue
                    assert answer.status_code == 201, answer.text
                    answered[answer.json()["id"]] = body

        async def kill_at_random() -> None:
            chance = random.Random(20261205)
            for _ in range(KILLS):
                await anyio.sleep(chance.uniform(0.3, 1.0))
                victim = chance.choice([*senders, service])
                if isinstance(victim, Sender):
                    await victim.kill()
                    await victim.start()
                else:
                    assert service.process is not None
                    await killed(service.process)
                    with service.log.open("ab") as out:
                        out.write(b"\n--restart--\n")
                    await service.start()
            await anyio.sleep(0.5)
            stop.set()

        async with anyio.create_task_group() as group:
            for sender in senders:
                group.start_soon(send_over_mcp, sender)
            group.start_soon(send_over_rest, service)
            group.start_soon(kill_at_random)
        for sender in senders:
            await sender.kill()
        assert service.process is not None
        await killed(service.process)

    in_the_file = stored(Path(os.environ["AGENTPOST_HOME"]) / "agentpost.db")
    assert len(answered) > 50  # the sends ran throughout
    assert {i: in_the_file.get(i) for i in answered} == answered
