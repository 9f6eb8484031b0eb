"""Blocking questions: the asker waits for the answer (woken by the change signal, not polling),
a late answer is fetched with `check_request`, and a request is answered once, by its addressee."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.models import Caller, DeliveryState, Kind
from agentpost.domain.requests import RequestAnswer
from agentpost.services import PostOffice
from backends import FakeClock, OpenOffice, agents, refused_without_change

pytestmark = pytest.mark.anyio

WAKE_S = 10
"""How long a test allows for what happens within milliseconds."""


async def asked(office: PostOffice, caller: Caller) -> str:
    """The id of the request that reaches `caller`'s inbox, once it is there."""
    with anyio.fail_after(WAKE_S):
        found = await office.mailbox.wait(caller, timeout_s=WAKE_S)
    [request] = found.messages
    assert request.kind is Kind.REQUEST
    return request.id


async def test_a_request_is_answered_while_the_asker_waits(office: PostOffice) -> None:
    alice, bob = await agents(office, "alice", "bob")
    answers: list[RequestAnswer] = []

    async def ask() -> None:
        answers.append(
            await office.requests.request(alice, "bob", "Which port?", {"svc": "api"}, timeout_s=60)
        )

    with anyio.fail_after(WAKE_S):
        async with anyio.create_task_group() as group:
            group.start_soon(ask)
            request_id = await asked(office, bob)
            [request] = await office.history.thread(bob, request_id)
            assert (request.sender, request.body, request.data) == (
                "alice",
                "Which port?",
                {"svc": "api"},
            )
            response = await office.requests.respond(bob, request_id, "8080", {"port": 8080})

    [answer] = answers
    assert answer.request_id == request_id
    assert (answer.answered, answer.timed_out) == (True, False)
    assert (answer.answer, answer.data) == ("8080", {"port": 8080})
    assert answer.response is not None
    assert (answer.response.sender, answer.response.id) == ("bob", response.id)
    assert answer.response.state is DeliveryState.READ
    # The response is also mail to the asker, in the request's thread, and was handed over.
    [mail] = (await office.mailbox.inbox(alice, unread_only=False, peek=True)).messages
    assert (mail.id, mail.kind, mail.reply_to) == (response.id, Kind.RESPONSE, request_id)
    assert mail.thread_id == response.thread_id == request_id
    assert mail.state is DeliveryState.READ


async def test_a_request_times_out_then_the_late_answer_is_fetched_by_check_request(
    office: PostOffice,
) -> None:
    alice, bob = await agents(office, "alice", "bob")
    timed_out = await office.requests.request(alice, "bob", "Still there?", timeout_s=0)
    assert timed_out == RequestAnswer(timed_out.request_id, answered=False, timed_out=True)
    pending = await office.requests.check_request(alice, timed_out.request_id)
    assert (pending.answered, pending.answer, pending.timed_out) == (False, None, False)

    await office.requests.respond(bob, timed_out.request_id, "yes, sorry")
    [late] = (await office.mailbox.inbox(alice, peek=True)).messages
    assert (late.kind, late.state) == (Kind.RESPONSE, DeliveryState.QUEUED)
    checked = await office.requests.check_request(alice, timed_out.request_id)
    assert (checked.answered, checked.answer) == (True, "yes, sorry")
    assert checked.response is not None
    assert checked.response.sender == "bob"
    assert (await office.mailbox.inbox(alice)).messages == []  # handed over: read


async def test_a_late_answer_past_its_ttl_is_handed_over_as_expired_not_read(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    """Unread past its TTL, the answer is a tombstone on its sender's receipt already (before
    any sweep); fetching it later does not turn that receipt into `read`."""
    office = await open_office(default_ttl_s=30)
    alice, bob = await agents(office, "alice", "bob")
    timed_out = await office.requests.request(alice, "bob", "Still there?", timeout_s=0)
    answer = await office.requests.respond(bob, timed_out.request_id, "yes, sorry")
    clock.advance(30)
    checked = await office.requests.check_request(alice, timed_out.request_id)
    assert checked.response is not None
    assert checked.response.state is DeliveryState.EXPIRED
    [receipt] = next(
        s.receipts for s in await office.history.sent(bob) if s.message.id == answer.id
    )
    assert receipt.state is DeliveryState.EXPIRED


async def test_a_request_kept_past_the_retention_keeps_its_answer_and_is_answered_once(
    office: PostOffice, clock: FakeClock
) -> None:
    """Bob answered without acknowledging the question (it stays), Alice acknowledged the
    answer: the sweep must not purge the answer from under the question it answers."""
    alice, bob = await agents(office, "alice", "bob")
    timed_out = await office.requests.request(alice, "bob", "Still there?", timeout_s=0)
    answer = await office.requests.respond(bob, timed_out.request_id, "yes, sorry")
    await office.mailbox.ack(alice, [answer.id])
    clock.advance(31 * 86_400)
    await office.mailbox.sweep()
    checked = await office.requests.check_request(alice, timed_out.request_id)
    assert (checked.answered, checked.answer) == (True, "yes, sorry")
    again = office.requests.respond(bob, timed_out.request_id, "no")
    assert (await refused_without_change(office, ErrorCode.CONFLICT, again)).code


async def test_a_wait_is_capped_by_max_wait_s(open_office: OpenOffice) -> None:
    office = await open_office(max_wait_s=0.05)
    alice, _ = await agents(office, "alice", "bob")
    with anyio.fail_after(WAKE_S):
        answer = await office.requests.request(alice, "bob", "Anyone?", timeout_s=10_000)
    assert answer.timed_out


async def test_a_request_is_answered_once(office: PostOffice) -> None:
    alice, bob = await agents(office, "alice", "bob")
    asked_ = await office.requests.request(alice, "bob", "Ship it?", timeout_s=0)
    await office.requests.respond(bob, asked_.request_id, "yes")
    await refused_without_change(
        office, ErrorCode.CONFLICT, office.requests.respond(bob, asked_.request_id, "no!")
    )
    assert (await office.requests.check_request(alice, asked_.request_id)).answer == "yes"


async def test_only_the_addressee_may_respond(office: PostOffice) -> None:
    alice, _, carol = await agents(office, "alice", "bob", "carol")
    asked_ = await office.requests.request(alice, "bob", "Ship it?", timeout_s=0)
    # The asker knows of it; to a stranger there is no such request.
    for someone, code in ((alice, ErrorCode.FORBIDDEN), (carol, ErrorCode.NOT_FOUND)):
        await refused_without_change(
            office, code, office.requests.respond(someone, asked_.request_id, "ok")
        )


async def test_only_the_asker_may_check_a_request(office: PostOffice) -> None:
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    asked_ = await office.requests.request(alice, "bob", "Ship it?", timeout_s=0)
    # The addressee knows of it; to a stranger there is no such request.
    for someone, code in ((bob, ErrorCode.FORBIDDEN), (carol, ErrorCode.NOT_FOUND)):
        await refused_without_change(
            office, code, office.requests.check_request(someone, asked_.request_id)
        )


async def test_what_is_no_request_is_not_found_and_bad_input_changes_nothing(
    office: PostOffice,
) -> None:
    alice, bob = await agents(office, "alice", "bob")
    plain = await office.mailbox.send(alice, "bob", "just mail")
    calls = [
        (ErrorCode.NOT_FOUND, office.requests.respond(bob, plain.id, "ok")),
        (ErrorCode.NOT_FOUND, office.requests.respond(bob, "m_nope", "ok")),
        (ErrorCode.NOT_FOUND, office.requests.check_request(alice, plain.id)),
        (ErrorCode.NOT_FOUND, office.requests.check_request(alice, "m_nope")),
        (ErrorCode.INVALID_ARGUMENT, office.requests.request(alice, "#general", "?")),
        (ErrorCode.INVALID_ARGUMENT, office.requests.request(alice, "bob", "?", timeout_s=-1)),
        (ErrorCode.INVALID_ARGUMENT, office.requests.request(alice, "bob", " ", timeout_s=0)),
        (ErrorCode.UNKNOWN_RECIPIENT, office.requests.request(alice, "nobody", "?")),
    ]
    for code, call in calls:
        await refused_without_change(office, code, call)
    asked_ = await office.requests.request(alice, "bob", "Ship it?", timeout_s=0)
    await refused_without_change(
        office, ErrorCode.INVALID_ARGUMENT, office.requests.respond(bob, asked_.request_id, "")
    )


async def test_a_refused_question_or_answer_is_named_as_the_caller_sent_it(
    office: PostOffice,
) -> None:
    """`question` and `answer` become a message's body, but the caller sent no `body`."""
    alice, bob = await agents(office, "alice", "bob")
    asked_ = await office.requests.request(alice, "bob", "Ship it?", timeout_s=0)
    too_long = "x" * (office.settings.max_body_bytes + 1)
    questions = [
        (" ", "question must be non-empty text"),
        (too_long, "question is"),
        ("a\x00b", "question may not"),
    ]
    for question, start in questions:
        with pytest.raises(AgentpostError) as refused:
            await office.requests.request(alice, "bob", question, timeout_s=0)
        assert refused.value.message.startswith(start), refused.value.message
    for answer, start in [("", "answer must be non-empty text"), (too_long, "answer is")]:
        with pytest.raises(AgentpostError) as refused:
            await office.requests.respond(bob, asked_.request_id, answer)
        assert refused.value.message.startswith(start), refused.value.message


async def test_of_concurrent_responds_exactly_one_wins(open_office: OpenOffice) -> None:
    offices = [await open_office() for _ in range(4)]
    alice, bob = await agents(offices[0], "alice", "bob")
    asked_ = await offices[0].requests.request(alice, "bob", "Who wins?", timeout_s=0)
    outcomes = await asyncio.gather(
        *(o.requests.respond(bob, asked_.request_id, f"answer {n}") for n, o in enumerate(offices)),
        return_exceptions=True,
    )
    won = [o for o in outcomes if not isinstance(o, BaseException)]
    lost = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(won) == 1, outcomes
    assert all(isinstance(e, AgentpostError) and e.code is ErrorCode.CONFLICT for e in lost)
    checked = await offices[0].requests.check_request(alice, asked_.request_id)
    assert checked.response is not None
    assert checked.response.id == won[0].id
    responses = [
        m
        for m in (await offices[0].mailbox.inbox(alice, unread_only=False, peek=True)).messages
        if m.kind is Kind.RESPONSE
    ]
    assert len(responses) == 1


async def test_a_retried_request_under_the_same_idempotency_key_asks_once_and_gets_its_answer(
    office: PostOffice,
) -> None:
    """The asker's connection dropped while it waited: it asks again with the same key."""
    alice, bob = await agents(office, "alice", "bob")
    first = await office.requests.request(
        alice, "bob", "Which port?", {"svc": "api"}, timeout_s=0, idempotency_key="port-1"
    )
    assert first.timed_out
    answers: list[RequestAnswer] = []

    async def ask_again() -> None:
        answers.append(
            await office.requests.request(
                alice, "bob", "Which port?", {"svc": "api"}, timeout_s=60, idempotency_key="port-1"
            )
        )

    with anyio.fail_after(WAKE_S):
        async with anyio.create_task_group() as group:
            group.start_soon(ask_again)
            request_id = await asked(office, bob)  # one question, not two
            await office.requests.respond(bob, request_id, "8080")
    [answer] = answers
    assert (answer.request_id, answer.answered, answer.answer) == (first.request_id, True, "8080")
    later = await office.requests.request(
        alice, "bob", "Which port?", {"svc": "api"}, timeout_s=0, idempotency_key="port-1"
    )
    assert (later.request_id, later.answered, later.answer) == (first.request_id, True, "8080")
    assert len((await office.mailbox.inbox(bob, unread_only=False, peek=True)).messages) == 1


async def test_another_question_under_the_same_idempotency_key_is_a_conflict(
    office: PostOffice,
) -> None:
    alice, _bob = await agents(office, "alice", "bob")
    await office.requests.request(alice, "bob", "Which port?", timeout_s=0, idempotency_key="q")
    await refused_without_change(
        office,
        ErrorCode.CONFLICT,
        office.requests.request(alice, "bob", "Which host?", timeout_s=0, idempotency_key="q"),
    )


async def test_a_question_refused_for_too_many_open_waits_is_not_asked(
    open_office: OpenOffice,
) -> None:
    """The refusal says "retry after 5 s": had the question gone out anyway, each retry would
    ask it once more."""
    office = await open_office(max_open_waits=1)
    alice, _bob = await agents(office, "alice", "bob")
    with office.store.watch(alice.agent):  # alice's one wait, held open elsewhere
        refused = await refused_without_change(
            office,
            ErrorCode.RATE_LIMITED,
            office.requests.request(alice, "bob", "Which port?", timeout_s=1),
        )
    assert refused.retry_after_s is not None


async def test_an_answer_reaches_an_asker_whose_inbox_is_full(open_office: OpenOffice) -> None:
    """The asker may be blocked waiting for just this answer: a full inbox must not keep it
    out, or the asker waits in vain and the answerer is told to retry a wait nobody ends."""
    office = await open_office(max_unacked=1)
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    asked_ = await office.requests.request(alice, "bob", "Ship it?", timeout_s=0)
    await office.mailbox.send(carol, "alice", "fills the inbox")
    await refused_without_change(
        office, ErrorCode.INBOX_FULL, office.mailbox.send(bob, "alice", "plain mail")
    )
    answer = await office.requests.respond(bob, asked_.request_id, "yes")
    assert (answer.to, answer.skipped_full) == (["alice"], [])
    checked = await office.requests.check_request(alice, asked_.request_id)
    assert (checked.answered, checked.answer) == (True, "yes")


async def test_an_answer_past_a_full_inbox_still_counts_against_the_send_rate(
    open_office: OpenOffice,
) -> None:
    office = await open_office(max_unacked=1, send_rate_per_minute=2)
    alice, bob, carol, _ = await agents(office, "alice", "bob", "carol", "dave")
    asked_ = await office.requests.request(alice, "bob", "Ship it?", timeout_s=0)
    await office.mailbox.send(carol, "alice", "fills the inbox")
    await office.mailbox.send(bob, "carol", "uses bob's minute")
    await office.mailbox.send(bob, "dave", "and the rest of it")
    await refused_without_change(
        office, ErrorCode.RATE_LIMITED, office.requests.respond(bob, asked_.request_id, "yes")
    )


# -- blocks --------------------------------------------------------------------------------------


async def test_an_answer_from_an_agent_the_asker_blocked_after_asking_is_dropped(
    office: PostOffice,
) -> None:
    """A block drops the blocked agent's mail silently, and an answer is mail: the asker who
    blocked the addressee after asking hears no answer from it, now or once unblocked (as other
    mail dropped meanwhile never arrives), while the answerer sees its answer sent, once."""
    alice, bob = await agents(office, "alice", "bob")
    asked_ = await office.requests.request(alice, "bob", "Ship it?", timeout_s=0)
    await office.directory.block(alice, "bob")
    answer = await office.requests.respond(bob, asked_.request_id, "rm -rf /, then ship")
    assert answer.to == ["alice"]  # the block stays silent

    for _ in ("blocked", "unblocked"):
        checked = await office.requests.check_request(alice, asked_.request_id)
        assert (checked.answered, checked.answer, checked.response) == (False, None, None)
        assert (await office.mailbox.inbox(alice, unread_only=False)).messages == []
        assert [m.id for m in await office.history.thread(alice, asked_.request_id)] == [
            asked_.request_id
        ]
        await office.directory.unblock(alice, "bob")
    again = office.requests.respond(bob, asked_.request_id, "no")
    assert (await refused_without_change(office, ErrorCode.CONFLICT, again)).code


async def test_an_asker_waiting_on_an_agent_it_then_blocks_hears_no_answer_and_times_out(
    office: PostOffice,
) -> None:
    alice, bob = await agents(office, "alice", "bob")
    answers: list[RequestAnswer] = []

    async def ask() -> None:
        answers.append(await office.requests.request(alice, "bob", "Ship it?", timeout_s=1))

    with anyio.fail_after(WAKE_S):
        async with anyio.create_task_group() as group:
            group.start_soon(ask)
            request_id = await asked(office, bob)
            await office.directory.block(alice, "bob")
            await office.requests.respond(bob, request_id, "yes")
    [answer] = answers
    assert answer == RequestAnswer(request_id, answered=False, timed_out=True)
