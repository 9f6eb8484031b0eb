"""Refusals reach the caller as `AgentpostError` with the service's stable code, as the services
raise them: one exception type to handle, local or remote."""

from __future__ import annotations

import socket

import pytest

from agentpost.client import AsyncClient
from agentpost.domain.errors import AgentpostError, ErrorCode
from remote_office import Office

pytestmark = pytest.mark.anyio


async def refusal(call: object) -> AgentpostError:
    with pytest.raises(AgentpostError) as refused:
        await call  # type: ignore[misc]
    return refused.value


async def test_mail_to_nobody_is_an_unknown_recipient(office: Office) -> None:
    alice = await office.agent("alice")
    err = await refusal(alice.send("nobody", "hello?"))
    assert err.code is ErrorCode.UNKNOWN_RECIPIENT
    assert "nobody" in err.message
    assert await alice.sent() == []


async def test_a_wrong_key_is_unauthenticated(office: Office) -> None:
    stranger = office.client("ap_" + "x" * 43)
    err = await refusal(stranger.inbox())
    assert err.code is ErrorCode.UNAUTHENTICATED
    assert (await refusal(office.client(None).me())).code is ErrorCode.UNAUTHENTICATED


async def test_an_agent_is_forbidden_the_owners_operations(office: Office) -> None:
    alice = await office.agent("alice")
    assert (await refusal(alice.admin_list_agents())).code is ErrorCode.FORBIDDEN
    assert (await refusal(alice.admin_create_agent("mallory"))).code is ErrorCode.FORBIDDEN


async def test_sending_past_the_rate_is_rate_limited_with_retry_after(office: Office) -> None:
    alice = await office.agent("alice")
    await office.agent("bob")
    limits = await office.admin.admin_set_limits("alice", send_rate_per_minute=1)
    assert limits.send_rate_per_minute == 1

    await alice.send("bob", "one")
    err = await refusal(alice.send("bob", "two"))
    assert err.code is ErrorCode.RATE_LIMITED
    assert err.retry_after_s is not None
    assert 0 < err.retry_after_s <= 60


async def test_delegating_past_an_agents_own_task_cap_is_a_conflict(office: Office) -> None:
    alice = await office.agent("alice")
    await office.agent("bob")
    limits = await office.admin.admin_set_limits("alice", max_open_tasks_per_agent=1)
    assert limits.max_open_tasks_per_agent == 1

    await alice.delegate("bob", "one")
    err = await refusal(alice.delegate("bob", "two"))
    assert err.code is ErrorCode.CONFLICT
    assert err.details == {"limit": 1}
    assert [t.title for t in await alice.tasks("created")] == ["one"]


async def test_input_the_service_refuses_is_an_invalid_argument_naming_the_field(
    office: Office,
) -> None:
    alice = await office.agent("alice")
    await office.agent("bob")
    err = await refusal(alice.send("bob", "hi", must_read="perhaps"))  # type: ignore[arg-type]
    assert err.code is ErrorCode.INVALID_ARGUMENT
    assert [f["field"] for f in err.details["fields"]] == ["must_read"]


async def test_what_the_services_would_refuse_is_refused_before_it_is_sent_in_their_words(
    office: Office,
) -> None:
    """Checked before they are sent, by the rules the services check: a remote-backed stdio
    session's tools then answer as a local one's, not with REST's field names, nor with
    httpx's words for a URL too long to send."""
    alice = await office.agent("alice")
    refusals = [
        await refusal(call)
        for call in (
            alice.inbox(limit=0),
            alice.thread("m_1", limit=501),
            alice.search("x" * 100_000),
            alice.search("  "),
            alice.directory("x" * 201),
            alice.ack([f"m_{i}" for i in range(501)]),
            alice.wait(timeout_s=-1),
            alice.request("bob", "?", timeout_s=float("nan")),
            alice.tasks("mine"),  # type: ignore[arg-type]
            alice.tasks(status="finished"),  # type: ignore[arg-type]
            alice.update_task("t_1", "finished"),  # type: ignore[arg-type]
            alice.send("bob", "hi", priority="high"),  # type: ignore[arg-type]
            alice.delegate("bob", "Fix it", priority="high"),  # type: ignore[arg-type]
            alice.update_me(status="asleep"),  # type: ignore[arg-type]
            alice.send("bob", "hi", ttl_s=float("nan")),
            alice.send("bob", "hi", ttl_s=1e300),
            alice.delegate("bob", "Fix it", due=float("inf")),
            alice.reserve(["src/app.py"], ttl_s=float("nan")),
            alice.renew_reservations(ttl_s=float("inf")),
        )
    ]
    statuses = "status must be one of open, accepted, in_progress, done, failed, cancelled"
    assert [(err.code, err.message) for err in refusals] == [
        (ErrorCode.INVALID_ARGUMENT, "limit must be an integer from 1 to 500"),
        (ErrorCode.INVALID_ARGUMENT, "limit must be an integer from 1 to 500"),
        (
            ErrorCode.TOO_LARGE,
            "the query is 100000 characters, over the limit of 500 characters",
        ),
        (ErrorCode.INVALID_ARGUMENT, "query must contain at least one word"),
        (
            ErrorCode.TOO_LARGE,
            "the query is 201 characters, over the limit of 200 characters",
        ),
        (ErrorCode.INVALID_ARGUMENT, "at most 500 ids per ack"),
        (ErrorCode.INVALID_ARGUMENT, "timeout_s must be a finite number of seconds, 0 or more"),
        (ErrorCode.INVALID_ARGUMENT, "timeout_s must be a finite number of seconds, 0 or more"),
        (ErrorCode.INVALID_ARGUMENT, "role must be one of assigned, created, all"),
        (ErrorCode.INVALID_ARGUMENT, statuses),
        (ErrorCode.INVALID_ARGUMENT, statuses),
        (ErrorCode.INVALID_ARGUMENT, "priority must be 'normal' or 'urgent'"),
        (ErrorCode.INVALID_ARGUMENT, "priority must be 'normal' or 'urgent'"),
        (ErrorCode.INVALID_ARGUMENT, "status must be one of active, idle, blocked, done"),
        (ErrorCode.INVALID_ARGUMENT, "ttl_s is a number of seconds above 0 and at most 31536000"),
        (ErrorCode.INVALID_ARGUMENT, "ttl_s is a number of seconds above 0 and at most 31536000"),
        (ErrorCode.INVALID_ARGUMENT, "due must be a time in Unix seconds"),
        (ErrorCode.INVALID_ARGUMENT, "ttl_s is a number of seconds above 0 and at most 604800"),
        (ErrorCode.INVALID_ARGUMENT, "ttl_s is a number of seconds above 0 and at most 604800"),
    ]


async def test_an_idempotency_key_stores_a_retried_send_once(office: Office) -> None:
    alice = await office.agent("alice")
    await office.agent("bob")
    first = await alice.send("bob", "deploy?", idempotency_key="ask-1")
    again = await alice.send("bob", "deploy?", idempotency_key="ask-1")
    assert again.id == first.id
    err = await refusal(alice.send("bob", "something else", idempotency_key="ask-1"))
    assert err.code is ErrorCode.CONFLICT
    assert len(await alice.sent()) == 1


async def test_a_service_that_is_not_there_is_unavailable() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with AsyncClient(f"http://127.0.0.1:{port}", "ap_x") as client:
        err = await refusal(client.inbox())
    assert err.code is ErrorCode.UNAVAILABLE
    assert f"127.0.0.1:{port}" in err.message


def test_without_a_url_the_client_says_how_to_give_one() -> None:
    with pytest.raises(AgentpostError) as refused:
        AsyncClient()
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT
    assert "AGENTPOST_URL" in refused.value.message


async def test_the_url_and_key_default_to_the_settings(
    office: Office, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = await office.new_key("alice")
    monkeypatch.setenv("AGENTPOST_URL", office.url)
    monkeypatch.setenv("AGENTPOST_KEY", key)
    async with AsyncClient() as client:
        assert (await client.me()).name == "alice"


async def test_the_configured_key_goes_only_to_the_configured_service(
    office: Office, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTPOST_URL", "http://elsewhere.example:8470")
    monkeypatch.setenv("AGENTPOST_KEY", await office.new_key("alice"))
    async with AsyncClient(office.url) as client:  # another service, no key given: none sent
        assert (await refusal(client.me())).code is ErrorCode.UNAUTHENTICATED
