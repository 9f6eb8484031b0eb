"""`Client`, the blocking twin, as a script uses it: no event loop of its own. Each script runs in
a worker thread here, so the test's loop stays free."""

from __future__ import annotations

import anyio
import pytest

from agentpost import Client
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.models import DeliveryState
from remote_office import Office

pytestmark = pytest.mark.anyio


async def test_a_script_sends_reads_waits_and_acknowledges(office: Office) -> None:
    alice_key, bob_key = await office.new_key("alice"), await office.new_key("bob")

    def script() -> list[str]:
        with Client(office.url, alice_key) as alice, Client(office.url, bob_key) as bob:
            assert bob.wait(0.1).timed_out
            sent = alice.send(["bob"], "build is green", subject="ci")
            woken = bob.wait(10)
            assert [m.id for m in woken.messages] == [sent.id]
            assert bob.ack([sent.id]).acked == [sent.id]
            [receipt] = alice.sent()[0].receipts
            assert receipt.state is DeliveryState.ACKED
            with pytest.raises(AgentpostError) as refused:
                alice.send("nobody", "hello?")
            assert refused.value.code is ErrorCode.UNKNOWN_RECIPIENT
            return [m.subject for m in bob.search("green")]

    with anyio.fail_after(30):
        assert await anyio.to_thread.run_sync(script) == ["ci"]
