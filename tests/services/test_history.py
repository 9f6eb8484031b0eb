"""History: threads, one message, sent mail with its receipts, search — what each reader may
see of what was said, and paging back through it."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import pytest

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.models import DeliveryState
from agentpost.services import PostOffice
from backends import agents, refused_without_change, session_caller

pytestmark = pytest.mark.anyio


async def refusal(call: Awaitable[Any]) -> AgentpostError:
    with pytest.raises(AgentpostError) as caught:
        await call
    return caught.value


@pytest.mark.parametrize("query", ["🎉", '"', "-- ?!", "🎉 ..."])
async def test_a_search_with_no_letter_or_digit_is_refused_for_it_could_find_nothing(
    office: PostOffice, query: str
) -> None:
    """Neither database indexes emoji or punctuation: such a query answered "no match" for
    mail that held it."""
    alice, bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", f"shipped {query}")
    refused = await refused_without_change(
        office, ErrorCode.INVALID_ARGUMENT, office.history.search(bob, query)
    )
    assert refused.message == "query must contain at least one word"
    assert [m.body for m in await office.history.search(bob, f"{query} shipped")] == [
        f"shipped {query}"
    ]


async def test_a_search_for_a_nul_character_is_refused(office: PostOffice) -> None:
    alice, _bob = await agents(office, "alice", "bob")
    await refused_without_change(
        office, ErrorCode.INVALID_ARGUMENT, office.history.search(alice, "nul\x00byte")
    )


async def test_sent_lists_own_messages_newest_first_with_each_recipients_state(
    office: PostOffice,
) -> None:
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    older = await office.mailbox.send(alice, ["bob", "carol"], "older")
    newer = await office.mailbox.send(alice, "bob", "newer")
    await office.mailbox.inbox(bob, limit=1)
    await office.mailbox.ack(carol, [older.id])
    sent = await office.history.sent(alice)
    assert [s.message.id for s in sent] == [newer.id, older.id]
    assert [(r.to, r.state) for r in sent[1].receipts] == [
        ("bob", DeliveryState.READ),
        ("carol", DeliveryState.ACKED),
    ]
    assert [(r.to, r.state) for r in sent[0].receipts] == [("bob", DeliveryState.QUEUED)]
    assert await office.history.sent(bob) == []


async def test_a_reply_joins_its_parents_thread_and_the_thread_reads_oldest_first(
    office: PostOffice,
) -> None:
    alice, bob = await agents(office, "alice", "bob")
    question = await office.mailbox.send(alice, "bob", "question")
    answer = await office.mailbox.send(bob, "alice", "answer", reply_to=question.id)
    assert answer.thread_id == question.thread_id == question.id
    for reader in (alice, bob):
        thread = await office.history.thread(reader, question.thread_id)
        assert [m.body for m in thread] == ["question", "answer"]
    assert (await office.history.get(alice, answer.id)).reply_to == question.id


async def test_a_thread_may_be_named_by_any_of_its_messages(office: PostOffice) -> None:
    """A reader holds a reply's id more often than its thread's."""
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    question = await office.mailbox.send(alice, "bob", "question", thread_id="topic")
    answer = await office.mailbox.send(bob, "alice", "answer", reply_to=question.id)
    for named in ("topic", question.id, answer.id):
        assert [m.body for m in await office.history.thread(alice, named)] == [
            "question",
            "answer",
        ]
    await refused_without_change(
        office, ErrorCode.NOT_FOUND, office.history.thread(carol, answer.id)
    )


async def test_a_long_thread_shows_its_newest_messages_oldest_first(office: PostOffice) -> None:
    alice, _bob = await agents(office, "alice", "bob")
    for n in range(5):
        await office.mailbox.send(alice, "bob", f"m{n}", thread_id="long")
    assert [m.body for m in await office.history.thread(alice, "long", limit=3)] == [
        "m2",
        "m3",
        "m4",
    ]


async def test_a_third_agent_sees_nothing_of_a_private_thread(office: PostOffice) -> None:
    alice, _bob, carol = await agents(office, "alice", "bob", "carol")
    secret = await office.mailbox.send(alice, "bob", "between us", thread_id="private")
    error = await refused_without_change(
        office, ErrorCode.NOT_FOUND, office.history.thread(carol, "private")
    )
    assert "between us" not in str(error)
    await refused_without_change(office, ErrorCode.NOT_FOUND, office.history.get(carol, secret.id))
    await refused_without_change(
        office,
        ErrorCode.NOT_FOUND,
        office.mailbox.send(carol, "alice", "me too", reply_to=secret.id),
    )
    assert await office.history.search(carol, "between") == []


async def test_a_thread_shows_each_reader_only_what_they_may_see(office: PostOffice) -> None:
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    await office.mailbox.send(alice, "bob", "to bob", thread_id="mixed")
    await office.mailbox.send(alice, "carol", "to carol", thread_id="mixed")
    assert [m.body for m in await office.history.thread(bob, "mixed")] == ["to bob"]
    assert [m.body for m in await office.history.thread(carol, "mixed")] == ["to carol"]
    assert [m.body for m in await office.history.thread(alice, "mixed")] == ["to bob", "to carol"]


async def test_channel_members_see_channel_threads_including_replies_before_they_joined(
    office: PostOffice,
) -> None:
    lead = await session_caller(office, "lead", project="shop")
    dev = await session_caller(office, "dev", project="shop")
    late = await session_caller(office, "late", project="blog")
    post = await office.mailbox.send(lead, "#shop", "plan")
    await office.mailbox.send(dev, "#shop", "ok", reply_to=post.id)
    await refusal(office.history.thread(late, post.thread_id))
    await office.channels.join(late, "shop")
    assert [m.body for m in await office.history.thread(late, post.thread_id)] == ["plan", "ok"]
    reply = await office.mailbox.send(late, "lead", "a private word", reply_to=post.id)
    assert reply.thread_id == post.thread_id
    assert [m.body for m in await office.history.thread(dev, post.thread_id)] == ["plan", "ok"]


async def test_a_blocked_senders_broadcast_is_in_no_thread_search_or_lookup_of_the_blocker(
    office: PostOffice,
) -> None:
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    for caller in (alice, bob, carol):
        await office.channels.join(caller, "#ops")
    await office.directory.block(bob, "carol")
    blocked = await office.mailbox.send(carol, "#ops", "pelican news")
    reply = await office.mailbox.send(alice, "#ops", "pelican reply", reply_to=blocked.id)

    assert await office.history.search(bob, "pelican") == [await office.history.get(bob, reply.id)]
    assert [m.id for m in await office.history.thread(bob, blocked.thread_id)] == [reply.id]
    assert (await refusal(office.history.get(bob, blocked.id))).code is ErrorCode.NOT_FOUND
    assert len(await office.history.search(alice, "pelican")) == 2


async def test_search_finds_only_messages_the_caller_may_see(office: PostOffice) -> None:
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    await office.mailbox.send(alice, "bob", "the deploy key rotates friday")
    await office.mailbox.send(alice, "carol", "deploy notes for carol")
    await office.mailbox.send(carol, "#general", "deploy freeze for everyone")
    found_by_bob = [m.body for m in await office.history.search(bob, "deploy")]
    assert found_by_bob == ["deploy freeze for everyone", "the deploy key rotates friday"]
    assert len(await office.history.search(alice, "deploy")) == 3
    assert [m.body for m in await office.history.search(bob, "DEPLOY friday")] == [
        "the deploy key rotates friday"
    ]


async def test_search_pages_back_from_a_pages_last_match_and_never_past_what_one_may_see(
    office: PostOffice,
) -> None:
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    for n in range(5):
        await office.mailbox.send(alice, "bob", f"deploy step {n}")
    hidden = await office.mailbox.send(alice, "carol", "deploy for carol alone")

    first = await office.history.search(bob, "deploy", limit=2)
    assert [m.body for m in first] == ["deploy step 4", "deploy step 3"]
    second = await office.history.search(bob, "deploy", limit=2, before=first[-1].id)
    assert [m.body for m in second] == ["deploy step 2", "deploy step 1"]
    last = await office.history.search(bob, "deploy", limit=2, before=second[-1].id)
    assert [m.body for m in last] == ["deploy step 0"]

    for cursor in (hidden.id, "m_nosuch", "m_\x00"):
        refused = await refusal(office.history.search(bob, "deploy", before=cursor))
        assert refused.code is ErrorCode.NOT_FOUND
    assert (await refusal(office.history.search(bob, "deploy", before=""))).code is (
        ErrorCode.INVALID_ARGUMENT
    )
    assert [m.body for m in await office.history.search(carol, "deploy", before=hidden.id)] == []


@pytest.mark.parametrize(
    "query",
    ['"deploy', 'deploy"', "deploy AND (", "NOT deploy", "deploy*", "col:deploy", "NEAR(x y)"],
)
async def test_search_syntax_in_a_query_is_taken_as_words_never_an_error(
    office: PostOffice, query: str
) -> None:
    alice, bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "deploy")
    found = await office.history.search(bob, query)
    assert all(m.body == "deploy" for m in found)


async def test_a_match_holds_every_word_of_the_query_and_or_is_one_of_them(
    office: PostOffice,
) -> None:
    """As the tool's description says: `t0 OR t1` asks for messages holding all three words."""
    alice, bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "t0 deploy")
    await office.mailbox.send(alice, "bob", "t1 deploy")
    assert await office.history.search(bob, "t0 OR t1") == []
    assert [m.body for m in await office.history.search(bob, "deploy t1")] == ["t1 deploy"]


async def test_search_for_quoted_and_bracketed_words_finds_them(office: PostOffice) -> None:
    alice, bob = await agents(office, "alice", "bob")
    await office.mailbox.send(alice, "bob", "deploy AND rollback")
    assert len(await office.history.search(bob, "deploy AND (")) == 1
    assert len(await office.history.search(bob, '"rollback"')) == 1


@pytest.mark.parametrize(
    ("query", "found"),
    [
        ("postgres", True),
        ("store/postgres.py", True),
        ("postgres/store", False),  # the parts of a word, in its order
        ("example", True),
        ("github pull", True),
        ("usr", False),
    ],
)
async def test_search_finds_the_words_of_a_path_an_address_or_a_url(
    office: PostOffice, query: str, found: bool
) -> None:
    """PostgreSQL's parser took `src/agentpost/store/postgres.py` (or an address, or a URL)
    for one word, so a search for `postgres` found nothing there that SQLite found."""
    alice, bob = await agents(office, "alice", "bob")
    body = (
        "see src/agentpost/store/postgres.py, ask ops@example.com or https://github.com/o/r/pull/7"
    )
    await office.mailbox.send(alice, "bob", body)
    assert [m.body for m in await office.history.search(bob, query)] == ([body] if found else [])


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("", ErrorCode.INVALID_ARGUMENT),
        ("   ", ErrorCode.INVALID_ARGUMENT),
        ("x" * 501, ErrorCode.TOO_LARGE),  # text over its limit, as README's table says
    ],
)
async def test_an_empty_query_is_invalid_and_a_huge_one_too_large(
    office: PostOffice, query: str, code: ErrorCode
) -> None:
    (bob,) = await agents(office, "bob")
    await refused_without_change(office, code, office.history.search(bob, query))
    assert await office.history.search(bob, "x" * 500) == []


async def test_sent_pages_back_from_a_pages_last_message_and_only_through_ones_own(
    office: PostOffice,
) -> None:
    """`sent` showed only the newest 500 of one's mail, with no way past them."""
    alice, bob = await agents(office, "alice", "bob")
    ids = [(await office.mailbox.send(alice, "bob", f"step {n}")).id for n in range(5)]
    theirs = await office.mailbox.send(bob, "alice", "not alice's own")

    first = await office.history.sent(alice, limit=2)
    assert [s.message.body for s in first] == ["step 4", "step 3"]
    second = await office.history.sent(alice, limit=2, before=first[-1].message.id)
    assert [s.message.body for s in second] == ["step 2", "step 1"]
    last = await office.history.sent(alice, limit=2, before=second[-1].message.id)
    assert [s.message.id for s in last] == [ids[0]]
    assert [(r.to, r.state) for r in last[0].receipts] == [("bob", DeliveryState.QUEUED)]
    assert await office.history.sent(alice, before=ids[0]) == []

    # A cursor is one of one's own; one holding a NUL, which no id holds, is not found either
    # (PostgreSQL, asked for it, refused the text itself: `invalid_argument` there alone).
    for cursor in (theirs.id, "m_nosuch", "m_\x00"):
        refused = await refusal(office.history.sent(alice, before=cursor))
        assert refused.code is ErrorCode.NOT_FOUND
    assert (await refusal(office.history.sent(alice, before=""))).code is (
        ErrorCode.INVALID_ARGUMENT
    )


async def test_a_thread_pages_back_from_a_pages_first_message_and_never_past_what_one_may_see(
    office: PostOffice,
) -> None:
    alice, bob, carol = await agents(office, "alice", "bob", "carol")
    root = await office.mailbox.send(alice, "bob", "step 0")
    for n in range(1, 5):
        await office.mailbox.send(alice, "bob", f"step {n}", reply_to=root.id)
    hidden = await office.mailbox.send(alice, "carol", "for carol alone")

    newest = await office.history.thread(bob, root.id, limit=2)
    assert [m.body for m in newest] == ["step 3", "step 4"]
    older = await office.history.thread(bob, root.id, limit=2, before=newest[0].id)
    assert [m.body for m in older] == ["step 1", "step 2"]
    oldest = await office.history.thread(bob, root.id, limit=2, before=older[0].id)
    assert [m.id for m in oldest] == [root.id]
    assert await office.history.thread(bob, root.id, before=root.id) == []  # past its start

    for cursor in (hidden.id, "m_nosuch", "m_\x00"):
        refused = await refusal(office.history.thread(bob, root.id, before=cursor))
        assert refused.code is ErrorCode.NOT_FOUND
    refused = await refusal(office.history.thread(carol, root.id))
    assert refused.code is ErrorCode.NOT_FOUND  # a first page is never empty
