"""Sending inside another use case's transaction (`send_in`), and the post office's own notices
(`system_post_in`): the same rules as `send`, and a refusal undoes the caller's writes too."""

from __future__ import annotations

import pytest

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.models import Kind, Trust
from agentpost.services import PostOffice
from agentpost.store import agents as agent_rows
from agentpost.store.database import Connection
from backends import OpenOffice, agents, refused_without_change, session_caller

pytestmark = pytest.mark.anyio


async def test_a_message_sent_in_a_transaction_is_delivered_when_it_commits(
    office: PostOffice,
) -> None:
    alice, bob = await agents(office, "alice", "bob")
    sent = await office.store.write(
        lambda conn: office.mailbox.send_in(conn, alice, "bob", "in a tx", kind=Kind.TASK)
    )
    [message] = (await office.mailbox.inbox(bob)).messages
    assert (message.id, message.sender, message.kind, message.body) == (
        sent.id,
        "alice",
        Kind.TASK,
        "in a tx",
    )


async def test_a_refused_send_in_undoes_what_its_transaction_wrote_before(
    office: PostOffice,
) -> None:
    alice, _ = await agents(office, "alice", "bob")

    def tx(conn: Connection) -> None:
        agent_rows.create_agent(conn, "carol", now=office.store.clock())
        office.mailbox.send_in(conn, alice, "nobody", "lost")

    error = await refused_without_change(
        office, ErrorCode.UNKNOWN_RECIPIENT, office.store.write(tx)
    )
    assert error.details == {"recipient": "nobody"}


async def test_send_in_keeps_the_rate_limit(open_office: OpenOffice) -> None:
    office = await open_office(send_rate_per_minute=1)
    alice, _ = await agents(office, "alice", "bob")
    await office.store.write(lambda conn: office.mailbox.send_in(conn, alice, "bob", "one"))
    await refused_without_change(
        office,
        ErrorCode.RATE_LIMITED,
        office.store.write(lambda conn: office.mailbox.send_in(conn, alice, "bob", "two")),
    )


async def test_the_post_office_posts_to_a_project_channel_it_is_no_member_of(
    open_office: OpenOffice,
) -> None:
    office = await open_office(send_rate_per_minute=1)
    dev = await session_caller(office, "dev", project="shop")
    qa = await session_caller(office, "qa", project="shop")
    for n in range(3):  # never rate-limited
        sent = await office.store.write(
            lambda conn, n=n: office.mailbox.system_post_in(
                conn, "#shop", f"notice {n}", subject="leader", data={"term": n}
            )
        )
        assert (sent.channel, sent.to) == ("shop", ["dev", "qa"])
    for reader in (dev, qa):
        found = (await office.mailbox.inbox(reader)).messages
        assert [m.body for m in found] == ["notice 0", "notice 1", "notice 2"]
        assert {(m.sender, m.kind, m.trust, m.channel) for m in found} == {
            ("system", Kind.SYSTEM, Trust.VERIFIED, "shop")
        }
    history = await office.channels.history(dev, "#shop", 10, None)
    assert [m.data for m in history] == [{"term": 0}, {"term": 1}, {"term": 2}]


async def test_a_system_notice_passes_over_a_full_inbox_rather_than_fail(
    open_office: OpenOffice,
) -> None:
    office = await open_office(max_unacked=1)
    alice, bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "fills the inbox")
    sent = await office.store.write(
        lambda conn: office.mailbox.system_post_in(conn, "bob", "you lead now")
    )
    assert sent.to == []
    assert sent.skipped_full == ["bob"]
    assert [m.body for m in (await office.mailbox.inbox(bob)).messages] == ["fills the inbox"]


async def test_a_system_notice_to_an_unknown_agent_is_refused(office: PostOffice) -> None:
    with pytest.raises(AgentpostError) as caught:
        await office.store.write(
            lambda conn: office.mailbox.system_post_in(conn, "nobody", "hello")
        )
    assert caught.value.code is ErrorCode.UNKNOWN_RECIPIENT
