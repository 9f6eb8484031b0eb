"""Several `agentpost serve` replicas on one PostgreSQL database, as scale-out runs them: two
real processes, each with its own home, sharing the database and the admin key. What one
replica stores, the other serves; a long-poll on one wakes for a send through the other."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import pytest

from service_process import Service, running_service

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@pytest.fixture
async def replicas(tmp_path: Path, fresh_pg_url: str) -> AsyncIterator[tuple[Service, Service]]:
    admin_key = "ap_" + secrets.token_urlsafe(32)
    async with AsyncExitStack() as stack:
        started = []
        for name in ("one", "two"):
            folder = tmp_path / name
            folder.mkdir()
            env = {
                "AGENTPOST_HOME": str(folder / "home"),
                "AGENTPOST_DATABASE_URL": fresh_pg_url,
                "AGENTPOST_ADMIN_KEY": admin_key,
            }
            started.append(await stack.enter_async_context(running_service(folder, env)))
        yield started[0], started[1]


async def test_a_long_poll_on_one_replica_wakes_for_a_send_through_the_other(
    replicas: tuple[Service, Service],
) -> None:
    one, two = replicas
    alice = one.client(await one.create_agent("alice"))
    bob = two.client(await one.create_agent("bob"))  # a key made on one opens the other
    answers = []

    async def wait() -> None:
        answer = await bob.get("/v1/inbox/wait", params={"timeout_s": 60})
        answers.append(answer.json())

    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            group.start_soon(wait)
            await anyio.sleep(0.2)  # bob's wait is open on two
            sent = await alice.post("/v1/messages", json={"to": "bob", "body": "from one"})
            assert sent.status_code == 201
    [answer] = answers
    assert answer["timed_out"] is False
    assert [(m["from"], m["body"]) for m in answer["messages"]] == [("alice", "from one")]

    receipts = (await alice.get("/v1/sent")).json()["messages"][0]["receipts"]
    assert [(r["to"], r["state"]) for r in receipts] == [("bob", "read")]


async def test_a_send_retried_on_the_other_replica_is_stored_once(
    replicas: tuple[Service, Service],
) -> None:
    one, two = replicas
    key = await one.create_agent("alice")
    bob = one.client(await one.create_agent("bob"))
    headers = {"Idempotency-Key": "order-42"}
    body = {"to": "bob", "body": "once"}
    first = await one.client(key).post("/v1/messages", json=body, headers=headers)
    again = await two.client(key).post("/v1/messages", json=body, headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.json()["id"] == first.json()["id"]
    assert [m["body"] for m in (await bob.get("/v1/inbox")).json()["messages"]] == ["once"]
