"""`AsyncClient` against a real `agentpost serve`: what an agent does with its mail, as domain
types, and what the owner does with agents and keys."""

from __future__ import annotations

import anyio
import pytest

from agentpost.domain.accounts import IssuedKey, Myself
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.models import (
    AckResult,
    ChannelInfo,
    DeliveryState,
    Inbox,
    Message,
    Priority,
    SendResult,
    Trust,
)
from remote_office import Office

pytestmark = pytest.mark.anyio


async def test_mail_goes_from_send_to_inbox_to_ack_with_receipts(office: Office) -> None:
    alice, bob = await office.agent("alice"), await office.agent("bob")

    sent = await alice.send("bob", "the parser is fixed", subject="parser", data={"pr": 42})
    assert isinstance(sent, SendResult)
    assert (sent.to, sent.thread_id, sent.channel) == (["bob"], sent.id, None)

    found = await bob.inbox()
    assert isinstance(found, Inbox)
    [message] = found.messages
    assert isinstance(message, Message)
    assert (message.id, message.sender, message.to) == (sent.id, "alice", ["bob"])
    assert (message.subject, message.body, message.data) == (
        "parser",
        "the parser is fixed",
        {"pr": 42},
    )
    assert (message.state, message.trust, message.priority) == (
        DeliveryState.READ,
        Trust.VERIFIED,
        Priority.NORMAL,
    )
    assert found.unread == 0

    done = await bob.ack([sent.id, "m_nobody"])
    assert done == AckResult(acked=[sent.id], not_found=["m_nobody"])

    [receipted] = await alice.sent()
    assert receipted.message.id == sent.id
    assert [(r.to, r.state) for r in receipted.receipts] == [("bob", DeliveryState.ACKED)]
    assert (await bob.get_message(sent.id)).state is DeliveryState.ACKED


@pytest.mark.parametrize(
    "thread_id", ["feature/login", "..", ".", "50% done", "#42?", "two\nlines"]
)
async def test_any_thread_id_a_send_takes_reads_back_through_the_client(
    office: Office, thread_id: str
) -> None:
    """Path segments hold the id whole: a '/' is no step down, nor '..' a step up."""
    alice, bob = await office.agent("alice"), await office.agent("bob")
    sent = await alice.send("bob", "in a thread of its own name", thread_id=thread_id)
    assert [m.id for m in await bob.thread(thread_id)] == [sent.id]


async def test_what_no_url_can_hold_is_refused_before_it_is_sent(office: Office) -> None:
    alice = await office.agent("alice")
    for call in (alice.thread(""), alice.get_message(""), alice.directory(project="x" * 70_000)):
        with pytest.raises(AgentpostError) as refused:
            await call
        assert refused.value.code is ErrorCode.INVALID_ARGUMENT


async def test_a_channel_name_reaches_the_service_as_given(office: Office) -> None:
    alice = await office.agent("alice")
    assert (await alice.join_channel("#design")).name == "design"
    for name in ("##design", ".."):
        with pytest.raises(AgentpostError) as refused:
            await alice.join_channel(name)
        assert refused.value.code is ErrorCode.INVALID_ARGUMENT, name


async def test_a_name_holding_a_slash_is_refused_as_a_name_not_as_a_missing_route(
    office: Office,
) -> None:
    """As over MCP: `invalid_argument`, naming the value, never a bare "Not Found"."""
    alice = await office.agent("alice")
    for call, name in (
        (alice.join_channel, "team/backend"),
        (alice.leave_channel, "team/backend"),
        (alice.channel_history, "team/backend"),
        (alice.block, "a/b"),
        (alice.unblock, "a/b"),
    ):
        with pytest.raises(AgentpostError) as refused:
            await call(name)
        assert refused.value.code is ErrorCode.INVALID_ARGUMENT
        assert name in str(refused.value)
    with pytest.raises(AgentpostError) as unknown:
        await alice.get_message("m_1/2")
    assert unknown.value.code is ErrorCode.NOT_FOUND
    assert "m_1/2" in str(unknown.value)


async def test_a_webhook_id_holding_a_slash_is_not_found_by_name_not_as_a_missing_route(
    office: Office,
) -> None:
    alice = await office.agent("alice")
    for call in (alice.delete_webhook, alice.webhook_deliveries):
        with pytest.raises(AgentpostError) as unknown:
            await call("wh_1/2")
        assert unknown.value.code is ErrorCode.NOT_FOUND
        assert "wh_1/2" in str(unknown.value)


async def test_peek_reads_without_marking_and_unread_counts_the_rest(office: Office) -> None:
    alice, bob = await office.agent("alice"), await office.agent("bob")
    first = await alice.send("bob", "one")
    await alice.send("bob", "two", priority="urgent")

    peeked = await bob.inbox(peek=True)
    assert [m.state for m in peeked.messages] == [DeliveryState.QUEUED] * 2
    assert peeked.unread == 2
    urgent = await bob.inbox(urgent_only=True, peek=True)
    assert [m.body for m in urgent.messages] == ["two"]
    read = await bob.inbox(limit=1)
    assert [m.id for m in read.messages] == [first.id]
    assert read.unread == 1


async def test_wait_returns_as_soon_as_mail_arrives_or_times_out(office: Office) -> None:
    alice, bob = await office.agent("alice"), await office.agent("bob")

    quiet = await bob.wait(0.2)
    assert (quiet.timed_out, quiet.messages, quiet.unread) == (True, [], 0)

    async with anyio.create_task_group() as group:
        woken: list[Inbox] = []

        async def waiter() -> None:
            woken.append(await bob.wait(60))

        group.start_soon(waiter)
        await anyio.sleep(0.3)  # let the long-poll reach the service before the mail does
        with anyio.fail_after(10):
            sent = await alice.send("bob", "wake up")
    [found] = woken
    assert not found.timed_out
    assert [m.id for m in found.messages] == [sent.id]


async def test_a_reply_joins_the_thread_and_search_finds_what_you_may_see(office: Office) -> None:
    alice, bob = await office.agent("alice"), await office.agent("bob")
    await office.agent("carol")
    question = await alice.send("bob", "where is the flaky test?")
    answer = await bob.send("alice", "in test_parser_roundtrip", reply_to=question.id)
    await alice.send("carol", "unrelated: flaky coffee machine")
    assert answer.thread_id == question.thread_id

    thread = await alice.thread(question.thread_id)
    assert [m.id for m in thread] == [question.id, answer.id]
    assert thread[1].reply_to == question.id

    assert {m.id for m in await bob.search("flaky")} == {question.id}
    with pytest.raises(AgentpostError) as refused:
        await bob.thread("t_nobody_knows")
    assert refused.value.code is ErrorCode.NOT_FOUND


async def test_channels_are_joined_read_and_left(office: Office) -> None:
    alice, bob = await office.agent("alice"), await office.agent("bob")

    joined = await alice.join_channel("#release")
    assert joined == ChannelInfo(name="release", members=1, joined=True, implicit=False)
    await bob.join_channel("release")
    broadcast = await alice.send("#release", "cutting 1.2 now")
    assert (broadcast.channel, broadcast.to) == ("release", ["bob"])

    listed = {c.name: c for c in await bob.channels()}
    assert (listed["release"].members, listed["release"].joined) == (2, True)
    assert listed["general"].implicit
    assert [m.body for m in await bob.channel_history("#release")] == ["cutting 1.2 now"]

    assert await bob.leave_channel("#release") == "#release"
    with pytest.raises(AgentpostError) as refused:
        await bob.channel_history("release")
    assert refused.value.code is ErrorCode.FORBIDDEN


async def test_a_blocked_senders_mail_is_dropped_silently(office: Office) -> None:
    alice, bob = await office.agent("alice"), await office.agent("bob")

    assert await bob.block("alice") == ["alice"]
    assert await bob.blocked() == ["alice"]
    await alice.send("bob", "you will not see this")  # the sender is not told
    assert (await bob.inbox(peek=True)).messages == []

    assert await bob.unblock("alice") == []
    later = await alice.send("bob", "and this you will")
    assert [m.id for m in (await bob.inbox()).messages] == [later.id]


async def test_the_profile_and_the_directory(office: Office) -> None:
    alice = await office.agent("alice", description="backend", project="apollo")
    await office.agent("bob", description="frontend")

    me = await alice.me()
    assert isinstance(me, Myself)
    assert (me.name, me.description, me.project, me.trust) == (
        "alice",
        "backend",
        "apollo",
        Trust.VERIFIED,
    )
    changed = await alice.update_me(capabilities=["python", "sql"], status="blocked")
    assert changed.capabilities == ["python", "sql"]
    assert changed.session_id == me.session_id  # the key's own session, as it spoke for
    assert [a.name for a in await alice.directory("frontend")] == ["bob"]
    [presence] = [p for p in await alice.who() if p.name == "alice"]
    assert (presence.status.value, presence.online) == ("blocked", True)
    usage = await alice.usage()
    assert (usage.agent, usage.sent_total) == ("alice", 0)


async def test_a_minted_session_speaks_for_itself_until_it_ends(office: Office) -> None:
    alice = await office.agent("alice")
    session_id = await alice.open_session(branch="feature-x", objective="fix the parser")
    alice.session = session_id
    assert (await alice.me()).session_id == session_id
    await alice.heartbeat(session_id)
    [seen] = [p for p in await alice.who() if p.name == "alice"]
    assert (seen.sessions, seen.branch) == (1, "feature-x")  # minting opened no other

    await alice.end_session(session_id)
    with pytest.raises(AgentpostError) as refused:
        await alice.me()  # the client still names the ended session
    assert refused.value.code is ErrorCode.NOT_FOUND
    alice.session = None
    keys_own = await alice.me()
    assert keys_own.name == "alice"
    assert keys_own.session_id not in (None, session_id)


async def test_the_owner_creates_an_agent_and_revokes_its_key(office: Office) -> None:
    admin = office.admin
    created, issued = await admin.admin_create_agent("dave", description="ops")
    assert isinstance(issued, IssuedKey)
    assert (created.name, issued.agent, issued.key[:3]) == ("dave", "dave", "ap_")
    dave = office.client(issued.key)
    assert (await dave.me()).name == "dave"

    another = await admin.admin_issue_key("dave", label="laptop")
    keys = {k.id: k for k in await admin.admin_list_keys("dave")}
    assert set(keys) == {issued.id, another.id}
    assert keys[another.id].label == "laptop"

    revoked = await admin.admin_revoke_key(issued.id)
    assert revoked.revoked_at is not None
    with pytest.raises(AgentpostError) as refused:
        await dave.me()
    assert refused.value.code is ErrorCode.UNAUTHENTICATED
    assert (await office.client(another.key).me()).name == "dave"

    assert "dave" in {a.name for a in await admin.admin_list_agents()}
    actions = {e.action for e in await admin.admin_audit_log(limit=50)}
    assert {"agent.created", "key.revoked"} <= actions


async def test_the_owner_withdraws_a_vouch_and_the_agents_next_mail_is_untrusted(
    office: Office,
) -> None:
    admin = office.admin
    dave = await office.agent("dave")
    erin = await office.agent("erin")
    await dave.send("erin", "vouched for")
    withdrawn = await admin.admin_unvouch_agent("dave")
    assert (withdrawn.name, withdrawn.trust) == ("dave", "untrusted")
    await dave.send("erin", "no longer")
    assert [(m.body, m.trust.value) for m in (await erin.inbox()).messages] == [
        ("vouched for", "verified"),
        ("no longer", "untrusted"),
    ]
    assert (await admin.admin_vouch_agent("dave")).trust == "verified"
    log = await admin.admin_audit_log(limit=10)
    actions = [e.action for e in log if e.action.startswith("agent.")]
    assert actions[:2] == ["agent.vouched", "agent.unvouched"]


async def test_the_health_check_needs_no_key(office: Office) -> None:
    health = await office.client(None).health()
    assert health["status"] == "ok"


async def test_the_readiness_check_needs_no_key(office: Office) -> None:
    ready = await office.client(None).ready()
    assert ready["status"] == "ready"


async def test_the_whole_inbox_pages_back_with_before(office: Office) -> None:
    alice, bob = await office.agent("alice"), await office.agent("bob")
    sent = [await alice.send("bob", f"note {n}") for n in range(3)]
    newest = await bob.inbox(unread_only=False, limit=2, peek=True)
    assert [m.id for m in newest.messages] == [sent[1].id, sent[2].id]
    older = await bob.inbox(unread_only=False, limit=2, peek=True, before=sent[1].id)
    assert [m.id for m in older.messages] == [sent[0].id]
    with pytest.raises(AgentpostError) as refused:
        await bob.inbox(before=sent[1].id)
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT
    assert (await bob.inbox(peek=True)).unread == 3


async def test_the_largest_send_every_field_limit_allows_is_stored_however_json_spells_it(
    office: Office,
) -> None:
    """A request carries the fields as JSON spells them: a control character in the body is six
    bytes there (`\\u0001`). A send within every field limit was refused as a request over
    max_request_bytes, where a local session stored it."""
    alice, bob = await office.agent("alice"), await office.agent("bob")
    body = "\x01" * 32768  # max_body_bytes, each byte spelt in six
    data = {"a": "\x01" * 10920}  # 65,536 bytes as the limit counts it, with its escapes
    sent = await alice.send("bob", body, subject='"' * 200, data=data, thread_id="t" * 64)
    [got] = (await bob.inbox()).messages
    assert (got.id, got.body, got.data) == (sent.id, body, data)
