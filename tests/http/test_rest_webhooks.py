"""Webhooks through `agentpost serve`: registered over REST, delivered by the running service to
a real receiver on 127.0.0.1 that checks each signature, retried after a failure."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from service_process import Service, running_service
from webhook_receiver import Receiver, listening

pytestmark = pytest.mark.anyio


async def deliveries(client: httpx.AsyncClient, hook_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = (await client.get(f"/v1/webhooks/{hook_id}/deliveries")).json()[
        "deliveries"
    ]
    return found


async def test_new_mail_is_delivered_signed_and_retried_after_a_failure(service: Service) -> None:
    alice = await service.agent("alice")
    bob = await service.agent("bob")
    receiver = Receiver(answers=[(500, {})], tolerance_s=300)  # fails once, then takes it
    async with listening(receiver):
        created = await bob.post(
            "/v1/webhooks", json={"url": receiver.url, "events": ["message.created"]}
        )
        assert created.status_code == 201, created.text
        hook = created.json()
        receiver.secret = hook["secret"]
        assert receiver.secret.startswith("whsec_")
        assert "secret" not in (await bob.get("/v1/webhooks")).json()["webhooks"][0]

        sent = (await alice.post("/v1/messages", json={"to": "bob", "body": "hook me"})).json()
        with anyio.fail_after(20):
            first, retry = await receiver.received(2)

    assert first.signed
    assert retry.signed
    assert first.headers["x-agentpost-delivery"] == retry.headers["x-agentpost-delivery"]
    assert retry.headers["x-agentpost-event"] == "message.created"
    assert retry.payload["message_id"] == sent["id"]
    assert retry.payload["data"]["from"] == "alice"
    for _ in range(200):  # the service records the outcome just after the receiver answered
        log = await deliveries(bob, hook["id"])
        if log[0]["state"] == "delivered":
            break
        await anyio.sleep(0.05)
    assert log[0]["state"] == "delivered"
    assert log[0]["attempts"] == 2


async def test_a_delivery_in_flight_when_serve_stops_is_sent_again_at_the_next_start(
    tmp_path: Path,
) -> None:
    """Not after its lease (the attempt's timeout and half a minute): a restart is not a
    crash, and the process that stops knows which deliveries it abandoned."""
    receiver = Receiver(stalls=1, tolerance_s=300)  # takes the first POST and never answers it
    env = {"AGENTPOST_WEBHOOK_TIMEOUT_S": "120"}
    async with running_service(tmp_path, env) as service, listening(receiver):
        alice = await service.agent("alice")
        bob = await service.agent("bob")
        created = await bob.post(
            "/v1/webhooks", json={"url": receiver.url, "events": ["message.created"]}
        )
        receiver.secret = created.json()["secret"]
        await alice.post("/v1/messages", json={"to": "bob", "body": "hook me"})
        with anyio.fail_after(20):
            [stalled] = await receiver.received(1)
        await service.restart()
        with anyio.fail_after(20):
            _, again = await receiver.received(2)
    assert again.signed
    assert again.headers["x-agentpost-delivery"] == stalled.headers["x-agentpost-delivery"]


async def test_unread_mail_tells_the_senders_webhook_when_its_ttl_falls_due(
    service: Service,
) -> None:
    alice = await service.agent("alice")
    await service.agent("bob")  # who never reads
    receiver = Receiver(tolerance_s=300)
    async with listening(receiver):
        created = await alice.post(
            "/v1/webhooks", json={"url": receiver.url, "events": ["message.expired"]}
        )
        receiver.secret = created.json()["secret"]
        sent_at = time.time()
        sent = await alice.post(
            "/v1/messages", json={"to": "bob", "body": "lunch in 10?", "ttl_s": 1}
        )
        with anyio.fail_after(20):  # not at the next hourly sweep
            (expired,) = await receiver.received(1)
    assert time.time() >= sent_at + 1
    assert expired.signed
    assert expired.headers["x-agentpost-event"] == "message.expired"
    assert expired.payload["message_id"] == sent.json()["id"]
    assert expired.payload["data"] == {"to": "bob"}


async def test_a_metadata_address_is_refused_and_nothing_is_stored(service: Service) -> None:
    bob = await service.agent("bob")
    refused = await bob.post(
        "/v1/webhooks",
        json={"url": "http://169.254.169.254/latest/meta-data", "events": ["message.created"]},
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "invalid_argument"
    assert (await bob.get("/v1/webhooks")).json() == {"webhooks": []}


async def test_another_agent_cannot_read_your_webhooks_log(service: Service) -> None:
    bob = await service.agent("bob")
    mallory = await service.agent("mallory")
    hook = (
        await bob.post(
            "/v1/webhooks", json={"url": "http://127.0.0.1:9/x", "events": ["message.created"]}
        )
    ).json()
    assert (await mallory.get(f"/v1/webhooks/{hook['id']}/deliveries")).status_code == 404
    assert (await mallory.delete(f"/v1/webhooks/{hook['id']}")).status_code == 404


async def test_a_revoked_keys_webhook_is_gone_and_the_agents_other_keys_keep_theirs(
    service: Service,
) -> None:
    alice = await service.agent("alice")
    leaked = service.client(await service.create_agent("bob"))
    issued = await service.admin.post("/v1/admin/agents/bob/keys", json={"label": "laptop"})
    assert issued.status_code == 201, issued.text
    laptop = service.client(issued.json()["key"])
    keys = (await service.admin.get("/v1/admin/keys", params={"agent": "bob"})).json()["keys"]
    [key_id] = [k["id"] for k in keys if k["id"] != issued.json()["id"]]
    leaked_url = {"url": "http://127.0.0.1:9/leaked", "events": ["message.created"]}
    kept_url = {"url": "http://127.0.0.1:9/kept", "events": ["message.created"]}
    made = (await leaked.post("/v1/webhooks", json=leaked_url)).json()
    kept = (await laptop.post("/v1/webhooks", json=kept_url)).json()

    assert (await service.admin.delete(f"/v1/admin/keys/{key_id}")).status_code == 200
    listed = (await laptop.get("/v1/webhooks")).json()["webhooks"]
    assert [w["id"] for w in listed] == [kept["id"]]
    assert (await laptop.get(f"/v1/webhooks/{made['id']}/deliveries")).status_code == 404
    sent = await alice.post("/v1/messages", json={"to": "bob", "body": "still heard"})
    assert sent.status_code == 201


# -- a stranger's webhooks ----------------------------------------------------------------------

OPEN = {"AGENTPOST_OPEN_REGISTRATION": "true", "AGENTPOST_WEBHOOK_MAX_ATTEMPTS": "1"}


async def registered(service: Service, name: str) -> httpx.AsyncClient:
    """An agent that registered itself over REST (`untrusted`), speaking with its key."""
    answer = await service.client().post("/v1/register", json={"name": name})
    assert answer.status_code == 201, answer.text
    return service.client(answer.json()["key"])


async def log_of(client: httpx.AsyncClient, hook_id: str) -> dict[str, Any]:
    """The webhook's one delivery, once its attempt is recorded."""
    for _ in range(400):
        log = await deliveries(client, hook_id)
        if log and log[0]["state"] != "pending":
            return log[0]
        await anyio.sleep(0.05)
    raise AssertionError(f"no attempt recorded: {log}")


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:6379/", "http://10.0.0.5/admin", "http://[::1]/", "http://100.64.0.1/"],
)
async def test_a_self_registered_agent_may_not_point_a_webhook_at_an_internal_address(
    tmp_path: Path, url: str
) -> None:
    """Anyone may register when registration is open: its webhooks would make the server POST
    JSON of the stranger's choosing to the services beside it."""
    async with running_service(tmp_path, OPEN) as service:
        drifter = await registered(service, "drifter")
        asked = {"url": url, "events": ["message.created"]}
        refused = await drifter.post("/v1/webhooks", json=asked)
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["code"] == "invalid_argument"
        assert "public addresses only" in error["message"]
        assert (await drifter.get("/v1/webhooks")).json() == {"webhooks": []}


async def test_a_strangers_webhook_by_a_name_for_loopback_is_not_delivered_until_vouched(
    tmp_path: Path,
) -> None:
    """A name is resolved at each delivery, so it is made, and refused where it leads; once the
    owner vouches for the agent, its webhook reaches the neighbours as the owner's agents' do."""
    receiver = Receiver(tolerance_s=300)
    async with running_service(tmp_path, OPEN) as service, listening(receiver):
        alice = await service.agent("alice")
        drifter = await registered(service, "drifter")
        named = f"http://localhost:{receiver.port}/hook"
        created = await drifter.post(
            "/v1/webhooks", json={"url": named, "events": ["message.created"]}
        )
        assert created.status_code == 201, created.text
        hook = created.json()
        receiver.secret = hook["secret"]

        await alice.post("/v1/messages", json={"to": "drifter", "body": "to the stranger"})
        refused = await log_of(drifter, hook["id"])
        assert refused["state"] == "failed"
        assert "loopback" in refused["last_error"]
        assert "public addresses only" in refused["last_error"]
        assert receiver.requests == []

        assert (await service.admin.post("/v1/admin/agents/drifter/vouch")).status_code == 200
        sent = (await alice.post("/v1/messages", json={"to": "drifter", "body": "vouched"})).json()
        with anyio.fail_after(20):
            (arrived,) = await receiver.received(1)
    assert arrived.signed
    assert arrived.payload["message_id"] == sent["id"]


async def test_an_agent_the_owner_unvouches_has_its_internal_webhook_stop(
    tmp_path: Path,
) -> None:
    receiver = Receiver(tolerance_s=300)
    async with running_service(tmp_path, OPEN) as service, listening(receiver):
        alice = await service.agent("alice")
        bob = await service.agent("bob")
        created = await bob.post(
            "/v1/webhooks", json={"url": receiver.url, "events": ["message.created"]}
        )
        hook = created.json()
        receiver.secret = hook["secret"]
        await alice.post("/v1/messages", json={"to": "bob", "body": "while vouched for"})
        with anyio.fail_after(20):
            await receiver.received(1)
        assert (await service.admin.post("/v1/admin/agents/bob/unvouch")).status_code == 200
        await alice.post("/v1/messages", json={"to": "bob", "body": "after"})
        for _ in range(400):
            log = await deliveries(bob, hook["id"])
            if len(log) == 2 and log[0]["state"] != "pending":
                break
            await anyio.sleep(0.05)
        assert log[0]["state"] == "failed"
        assert "public addresses only" in log[0]["last_error"]
        assert len(receiver.requests) == 1


async def test_an_agent_the_owner_made_keeps_its_webhook_to_loopback_with_registration_open(
    tmp_path: Path,
) -> None:
    receiver = Receiver(tolerance_s=300)
    async with running_service(tmp_path, OPEN) as service, listening(receiver):
        alice = await service.agent("alice")
        bob = await service.agent("bob")
        created = await bob.post(
            "/v1/webhooks", json={"url": receiver.url, "events": ["message.created"]}
        )
        assert created.status_code == 201, created.text
        receiver.secret = created.json()["secret"]
        await alice.post("/v1/messages", json={"to": "bob", "body": "as before"})
        with anyio.fail_after(20):
            (arrived,) = await receiver.received(1)
    assert arrived.signed
