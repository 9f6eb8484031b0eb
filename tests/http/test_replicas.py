"""Several `agentpost serve` replicas on one PostgreSQL database, as scale-out runs them: two
real processes, each with its own home, sharing the database and the admin key. What one
replica stores, the other serves; a long-poll on one wakes for a send through the other; a
replica of a newer release that migrates the database stops the older ones still running."""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import AsyncIterator, Awaitable
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import asyncpg
import httpx
import pytest

import agentpost
from agentpost.domain.reservations import MAX_LIVE, MAX_PATHS
from agentpost.services.presence import MAX_HTTP_SESSIONS
from agentpost.store.migrate import SCHEMA_HEAD
from agentpost.store.postgres import libpq_url
from service_process import Service, eventually, running_service

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


def replica_env(folder: Path, url: str, admin_key: str) -> dict[str, str]:
    folder.mkdir()
    return {
        "AGENTPOST_HOME": str(folder / "home"),
        "AGENTPOST_DATABASE_URL": url,
        "AGENTPOST_ADMIN_KEY": admin_key,
    }


@pytest.fixture
async def replicas(tmp_path: Path, fresh_pg_url: str) -> AsyncIterator[tuple[Service, Service]]:
    admin_key = "ap_" + secrets.token_urlsafe(32)
    async with AsyncExitStack() as stack:
        started = []
        for name in ("one", "two"):
            env = replica_env(tmp_path / name, fresh_pg_url, admin_key)
            started.append(await stack.enter_async_context(running_service(tmp_path / name, env)))
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


async def at_once(*requests: Awaitable[httpx.Response]) -> list[httpx.Response]:
    """The requests sent together, each on its own connection."""
    answers: list[httpx.Response] = []

    async def one(request: Awaitable[httpx.Response]) -> None:
        answers.append(await request)

    async with anyio.create_task_group() as group:
        for request in requests:
            group.start_soon(one, request)
    return answers


async def minted(client: httpx.AsyncClient, count: int) -> list[str]:
    """`count` new sessions of the client's agent."""
    sessions = []
    for _ in range(count):
        answer = await client.post("/v1/sessions", json={})
        assert answer.status_code == 201, answer.text
        sessions.append(answer.json()["session_id"])
    return sessions


def speaking_for(session: str) -> dict[str, str]:
    return {"Agentpost-Session": session}


async def test_reservations_sent_to_both_replicas_at_once_never_pass_the_cap(
    replicas: tuple[Service, Service],
) -> None:
    """The cap is counted in the write transaction, and the replicas' write transactions
    take turns: of many reserves for one agent at once on both (each of its own session, so
    no session's row makes them wait for each other), one fills the last place."""
    one, two = replicas
    key = await one.create_agent("alice", project="shop")
    alice = (one.client(key), two.client(key))
    sessions = await minted(alice[0], 8)
    for batch in range(MAX_LIVE // MAX_PATHS):
        paths = [f"held/{batch}/{n}" for n in range(MAX_PATHS)]
        if batch == MAX_LIVE // MAX_PATHS - 1:
            paths = paths[:-1]  # one place left
        assert (await alice[0].post("/v1/reservations", json={"paths": paths})).status_code == 200
    answers = await at_once(
        *(
            alice[n % 2].post(
                "/v1/reservations", json={"paths": [f"last/{n}"]}, headers=speaking_for(session)
            )
            for n, session in enumerate(sessions)
        )
    )
    assert sorted(a.status_code for a in answers) == [200] + [409] * 7
    listed = (await alice[1].get("/v1/reservations")).json()["reservations"]
    assert len(listed) == MAX_LIVE


async def test_sessions_minted_at_both_replicas_at_once_never_pass_the_cap(
    replicas: tuple[Service, Service],
) -> None:
    """Counted in the write transaction, which the replicas take in turns: without those
    turns, 104 of an agent's sessions were minted where 100 is the most it may hold."""
    one, two = replicas
    key = await one.create_agent("alice")
    alice = (one.client(key), two.client(key))
    await minted(alice[0], MAX_HTTP_SESSIONS - 10)
    answers = await at_once(*(alice[n % 2].post("/v1/sessions", json={}) for n in range(30)))
    assert sorted(a.status_code for a in answers) == [201] * 10 + [409] * 20
    for alice_at in alice:
        assert (await alice_at.post("/v1/sessions", json={})).status_code == 409


async def test_a_session_that_stood_aside_through_one_replica_takes_no_seat_through_the_other(
    replicas: tuple[Service, Service],
) -> None:
    """Standing aside (minted without `auto_lead`, or stepping down) was remembered only by
    the replica that heard it: the session's next move onto `main`, sent by the load balancer
    to the other replica, took the free seat it had given up."""
    one, two = replicas
    key = await one.create_agent("alice")
    body = {"project": "rocket", "branch": "feature-x", "auto_lead": False}
    aside = (await one.client(key).post("/v1/sessions", json=body)).json()["session_id"]
    body = {"project": "rocket", "branch": "main", "worktree": "/elsewhere"}
    down = (await one.client(key).post("/v1/sessions", json=body)).json()["session_id"]
    released = await one.client(key, **speaking_for(down)).post("/v1/leadership/release")
    assert released.json()["released"] is True
    alice = two.client(key, **speaking_for(aside))
    for session, branch in ((aside, "main"), (down, "master")):  # each a branch that may lead
        beat = await alice.post(f"/v1/sessions/{session}/heartbeat", json={"branch": branch})
        assert beat.status_code == 200, beat.text
        assert (await alice.get("/v1/leadership")).json()["leader"] is None

    claimed = (await alice.post("/v1/leadership/claim")).json()  # its word is its own to take back
    assert (claimed["leader"], claimed["session_id"]) == ("alice", aside)


NEWER = f"{int(SCHEMA_HEAD) + 1:04d}"
"""The revision the newer release's migration brings."""


def newer_release(folder: Path) -> dict[str, str]:
    """This agentpost with one migration more, as its next release would have it: a column
    this one does not know. The environment that runs it in place of this one."""
    shutil.copytree(
        Path(agentpost.__file__).parent,
        folder / "agentpost",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    migrate = folder / "agentpost" / "store" / "migrate.py"
    head = f'SCHEMA_HEAD = "{SCHEMA_HEAD}"'
    assert head in migrate.read_text()
    migrate.write_text(migrate.read_text().replace(head, f'SCHEMA_HEAD = "{NEWER}"'))
    (folder / "agentpost" / "store" / "migrations" / "versions" / f"{NEWER}_future.py").write_text(
        f"""import sqlalchemy as sa
from alembic import op

revision = "{NEWER}"
down_revision = "{SCHEMA_HEAD}"


def upgrade() -> None:
    op.add_column("tasks", sa.Column("future_trust", sa.Text, nullable=False, server_default="x"))
"""
    )
    paths = [str(folder), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {"PYTHONPATH": os.pathsep.join(paths)}


async def stored_messages(url: str) -> int:
    conn = await asyncpg.connect(libpq_url(url))
    try:
        return int(await conn.fetchval("SELECT count(*) FROM messages"))
    finally:
        await conn.close()


async def test_an_older_replica_refuses_every_call_once_a_newer_release_migrated_beside_it(
    tmp_path: Path, fresh_pg_url: str
) -> None:
    """A rolling upgrade: the first replica of the newer release migrates the database while
    one of this release serves. The older one answered `/ready` 503, yet served reads and
    writes sent to it directly, writing rows whose new columns took their defaults."""
    admin_key = "ap_" + secrets.token_urlsafe(32)
    async with AsyncExitStack() as stack:
        env = replica_env(tmp_path / "older", fresh_pg_url, admin_key)
        older = await stack.enter_async_context(running_service(tmp_path / "older", env))
        alice = older.client(await older.create_agent("alice"))
        bob_key = await older.create_agent("bob")
        bob = older.client(bob_key)
        sent = await alice.post("/v1/messages", json={"to": "bob", "body": "before"})
        assert sent.status_code == 201, sent.text

        env = replica_env(tmp_path / "newer", fresh_pg_url, admin_key)
        env.update(newer_release(tmp_path / "release"))
        newer = await stack.enter_async_context(running_service(tmp_path / "newer", env))
        ready = await newer.client().get("/ready")
        assert (ready.status_code, ready.json()["schema"]) == (200, NEWER)

        async def refused() -> bool:
            return (await bob.get("/v1/inbox")).status_code == 503

        await eventually(refused)
        inbox = await bob.get("/v1/inbox")
        send = await alice.post("/v1/messages", json={"to": "bob", "body": "after"})
        unready = await older.client().get("/ready")
        for answer in (inbox, send, unready):
            assert answer.status_code == 503
            assert answer.json()["error"] == {
                "code": "unavailable",
                "message": f"the database's schema ({NEWER}) is newer than this agentpost"
                f" knows ({SCHEMA_HEAD}); a newer agentpost migrated it while this process ran;"
                " restart this process (the MCP server, the service) on the newer release",
            }
        assert await stored_messages(fresh_pg_url) == 1

        served = await newer.client(bob_key).get("/v1/inbox")
        assert [m["body"] for m in served.json()["messages"]] == ["before"]
