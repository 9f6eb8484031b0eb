"""What standing for a seat costs the store: a claim that cannot succeed takes no write."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from account_helpers import ADDRESS, keyed, owner, self_registered
from agentpost.domain.errors import ErrorCode
from agentpost.domain.leadership import Leader
from agentpost.domain.models import Caller
from agentpost.services import PostOffice
from backends import OpenOffice, refused_without_change, session_caller

pytestmark = pytest.mark.anyio


def count_writes(office: PostOffice, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every write transaction the store takes from now on, named by its function."""
    writes: list[str] = []
    write = office.store.write

    async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        writes.append(getattr(fn, "__qualname__", repr(fn)))  # a partial has none
        return await write(fn, *args, **kwargs)

    monkeypatch.setattr(office.store, "write", counted)
    return writes


async def test_a_claim_of_a_seat_another_live_session_holds_takes_no_write(
    office: PostOffice, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every session over HTTP stands for its project's seat as it opens: a refusal found
    only inside the claim's transaction took the write lock, for nothing, from every writer."""
    alice = await session_caller(office, "alice")
    bob = await session_caller(office, "bob")
    await office.leadership.claim(alice)
    writes = count_writes(office, monkeypatch)
    err = await refused_without_change(office, ErrorCode.CONFLICT, office.leadership.claim(bob))
    assert (err.details, err.message) == (
        {"leader": "alice", "term": 1},
        "alice leads shop (term 1); the seat frees when that session stops",
    )
    assert await office.leadership.claim_if_eligible(bob) is None
    assert writes == []


async def test_a_claim_refused_for_its_branch_project_or_vouch_takes_no_write(
    open_office: OpenOffice, monkeypatch: pytest.MonkeyPatch
) -> None:
    office = await open_office(open_registration=True)
    feature = await session_caller(office, "feat", branch="feature-x")
    alice = await session_caller(office, "alice")
    drifter, key = await self_registered(office, "drifter", project="shop", branch="main")
    await office.admin.vouch(await owner(office), "drifter")
    vouched = await office.keys.authenticate(key, ip=ADDRESS, session=drifter.session_id)
    await office.admin.unvouch(await owner(office), "drifter")  # after its key was read
    writes = count_writes(office, monkeypatch)
    for refused in (
        office.leadership.claim(feature),
        office.leadership.claim(alice, "other"),
        office.leadership.claim(vouched),
    ):
        await refused_without_change(office, ErrorCode.FORBIDDEN, refused)
    assert writes == []


async def opened(office: PostOffice, caller: Caller, branch: str) -> Leader | None:
    """What `POST /v1/sessions` (and `register` over MCP/HTTP) does: mint a session of the
    caller's, and stand for its project's seat."""
    session = await office.presence.open_http_session(
        caller, host="elsewhere", project="shop", branch=branch
    )
    return await office.leadership.claim_if_eligible(replace(caller, session_id=session.id))


async def test_a_client_opening_sessions_in_a_loop_costs_one_write_each_and_no_claim(
    office: PostOffice, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening is not throttled as a heartbeat's move is (`CLAIM_AFTER_MOVE_S`): each new
    session stands once, and one opened as its leader's ended must take the seat at once. A
    claim that cannot succeed is a read, so a loop costs the opens' own writes and no more."""
    holder = await session_caller(office, "holder")
    await office.leadership.claim(holder)
    alice, _ = await keyed(office, "alice", project="shop")
    writes = count_writes(office, monkeypatch)
    for branch in ["main", "feature-x"] * 3:
        assert await opened(office, alice, branch) is None
    assert writes == ["PresenceService.open_http_session.<locals>.tx"] * 6

    await office.presence.end_session(holder.session_id or "")
    seat = await opened(office, alice, "main")
    assert seat is not None
    assert (seat.leader, seat.term) == ("alice", 2)
