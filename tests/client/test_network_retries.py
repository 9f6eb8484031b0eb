"""A request the network failed goes again where that cannot do twice what it asks.

Through `LosingProxy`: the request reaches the real service and is carried out, and the
connection closes before the answer comes back, as a dropped network does."""

from __future__ import annotations

from functools import partial

import anyio
import httpx
import pytest

from agentpost.client import AsyncClient, Client
from agentpost.client.wire import may_resend
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.models import DeliveryState
from losing_proxy import LosingProxy
from remote_office import Office

pytestmark = pytest.mark.anyio


async def test_a_send_whose_answer_was_lost_is_sent_again_and_stored_once(office: Office) -> None:
    alice_key = await office.new_key("alice")
    bob = await office.agent("bob")
    with LosingProxy(office.service.port, lose=1) as proxy:
        async with AsyncClient(proxy.url, alice_key) as alice:
            sent = await alice.send("bob", "once, whatever the network did")
    assert proxy.lost == 1
    inbox = await bob.inbox()
    assert [m.id for m in inbox.messages] == [sent.id]


async def test_the_blocking_client_sends_again_too(office: Office) -> None:
    alice_key = await office.new_key("alice")
    bob = await office.agent("bob")

    def send_through(url: str) -> str:
        with Client(url, alice_key) as alice:
            return alice.send("bob", "once").id

    with LosingProxy(office.service.port, lose=2) as proxy:
        sent = await anyio.to_thread.run_sync(send_through, proxy.url)
    assert proxy.lost == 2
    assert [m.id for m in (await bob.inbox()).messages] == [sent]


async def test_a_read_whose_answer_was_lost_is_read_again(office: Office) -> None:
    alice_key = await office.new_key("alice")
    with LosingProxy(office.service.port, lose=1) as proxy:
        async with AsyncClient(proxy.url, alice_key) as alice:
            assert (await alice.inbox(peek=True)).unread == 0
    assert proxy.lost == 1


async def test_a_write_without_an_idempotency_key_is_not_sent_again(office: Office) -> None:
    """An ack carries no key: sent twice, its second answer would not be the first's. The
    caller is told the service could not be heard, and the ack itself went through."""
    alice = await office.agent("alice")
    bob_key = await office.new_key("bob")
    sent = await alice.send("bob", "to ack")
    with LosingProxy(office.service.port, lose=1) as proxy:
        async with AsyncClient(proxy.url, bob_key) as bob:
            with pytest.raises(AgentpostError) as lost:
                await bob.ack([sent.id])
            assert lost.value.code is ErrorCode.UNAVAILABLE
            assert proxy.lost == 1
            receipts = await alice.sent()
    assert [r.state for r in receipts[0].receipts] == [DeliveryState.ACKED]


async def test_with_no_network_retries_a_lost_answer_is_unavailable_and_the_send_stored_once(
    office: Office,
) -> None:
    alice_key = await office.new_key("alice")
    bob = await office.agent("bob")
    with LosingProxy(office.service.port, lose=1) as proxy:
        async with AsyncClient(proxy.url, alice_key, network_retries=0) as alice:
            with pytest.raises(AgentpostError) as lost:
                await alice.send("bob", "made, though its answer never came")
    assert lost.value.code is ErrorCode.UNAVAILABLE
    assert len((await bob.inbox()).messages) == 1


@pytest.mark.parametrize("retries", [-1, 1.5, True, "2"])
def test_network_retries_must_be_a_whole_number(retries: object) -> None:
    with pytest.raises(AgentpostError) as refused:
        Client("http://127.0.0.1:1", "ap_x", network_retries=retries)  # type: ignore[arg-type]
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT
    assert refused.value.details == {"network_retries": retries}


@pytest.mark.parametrize("hand_over", ["inbox", "wait"])
async def test_a_read_that_marked_mail_read_is_not_read_again_when_its_answer_was_lost(
    office: Office, hand_over: str
) -> None:
    """`inbox` (but for a peek) and `wait` hand the mail over, marking it read: asked again,
    the answer would leave out what the lost one held. The caller hears the service could not
    be heard, and finds the mail among what it read."""
    alice = await office.agent("alice")
    bob_key = await office.new_key("bob")
    sent = await alice.send("bob", "handed over once")
    with LosingProxy(office.service.port, lose=1) as proxy:
        async with AsyncClient(proxy.url, bob_key) as bob:
            read_it = bob.inbox if hand_over == "inbox" else partial(bob.wait, timeout_s=1)
            with pytest.raises(AgentpostError) as lost:
                await read_it()
            assert lost.value.code is ErrorCode.UNAVAILABLE
            assert proxy.lost == 1
            read = await bob.inbox(unread_only=False, peek=True)
    assert [m.id for m in read.messages] == [sent.id]


@pytest.mark.parametrize(
    "error",
    [httpx.UnsupportedProtocol("no such scheme"), httpx.LocalProtocolError("bad header")],
    ids=["unsupported-protocol", "local-protocol"],
)
def test_what_the_network_did_not_cause_is_not_sent_again(error: httpx.TransportError) -> None:
    """It would fail the same way again, after the pauses."""
    assert not may_resend("GET", {}, error, hands_over=False)
    assert may_resend("GET", {}, httpx.ReadError("reset"), hands_over=False)
