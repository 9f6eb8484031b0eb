"""What a direct send reads of its sender and recipients, in the one statement it spends."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from sqlalchemy import Connection

from agentpost.domain.models import Trust
from agentpost.store import agents, blocks, limits, parties
from agentpost.store.database import Store
from backends import FakeClock

pytestmark = pytest.mark.anyio


async def add(store: Store, *names: str) -> None:
    def tx(conn: Connection) -> None:
        for name in names:
            agents.create_agent(conn, name, now=store.clock())

    await store.write(tx)


async def look(store: Store, sender: str, *names: str) -> parties.Parties:
    return await store.read(lambda c: parties.of_send(c, sender, names))


async def test_a_senders_trust_comes_with_the_names_a_send_looks_up(
    store: Store, clock: FakeClock
) -> None:
    """A send stamps its message with the sender's trust: read in the statement that finds
    the recipients, not in one more."""
    await add(store, "alice", "drifter")
    await store.write(lambda c: agents.update_agent(c, "drifter", trust="untrusted"))
    await store.write(lambda c: agents.update_agent(c, "alice", disabled_at=clock()))

    found = await look(store, "drifter", "alice", "carol")
    assert (found.known, found.trust) == ({"drifter": True, "alice": False}, Trust.UNTRUSTED)
    found = await look(store, "alice", "drifter")
    assert (found.known, found.trust) == ({"alice": False, "drifter": True}, Trust.VERIFIED)
    found = await look(store, "carol", "alice")
    assert (found.known, found.trust) == ({"alice": False}, None)


async def test_the_owners_limits_come_for_those_that_have_any(store: Store) -> None:
    await add(store, "alice", "bob", "carol")
    override: limits.Override = (5, 7, None, 3)
    await store.write(lambda c: limits.set_overrides(c, store.dialect, "bob", override))
    await store.write(
        lambda c: limits.set_overrides(c, store.dialect, "alice", (None, 9, None, None))
    )

    found = await look(store, "alice", "bob", "carol", "nobody")

    assert found.overrides == {"alice": (None, 9, None, None), "bob": override}
    assert found.overrides == await store.read(
        lambda c: limits.overrides(c, ["alice", "bob", "carol", "nobody"])
    )


async def test_those_who_block_the_sender_and_only_the_sender(store: Store) -> None:
    await add(store, "alice", "bob", "carol", "dave")

    async def block(recipient: str, sender: str) -> None:
        await store.write(
            lambda c: blocks.add(c, store.dialect, recipient, sender, by=recipient, now=0.0)
        )

    await block("bob", "alice")
    await block("carol", "dave")  # blocks someone else
    await block("alice", "alice")

    found = await look(store, "alice", "bob", "carol", "nobody")
    assert found.blocking == {"bob", "alice"}
    names: Sequence[str] = ["bob", "carol", "nobody"]
    assert set(found.blocking) & set(names) == await store.read(
        lambda c: blocks.blocking(c, "alice", names)
    )
    assert (await look(store, "dave", "carol")).blocking == {"carol"}
    assert (await look(store, "carol", "bob")).blocking == frozenset()
