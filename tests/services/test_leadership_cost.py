"""What standing for a seat costs the store: a claim that cannot succeed takes no write."""

from __future__ import annotations

from typing import Any

import pytest

from account_helpers import ADDRESS, owner, self_registered
from agentpost.domain.errors import ErrorCode
from agentpost.services import PostOffice
from backends import OpenOffice, refused_without_change, session_caller

pytestmark = pytest.mark.anyio


def count_writes(office: PostOffice, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every write transaction the store takes from now on, named by its function."""
    writes: list[str] = []
    write = office.store.write

    async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        writes.append(fn.__qualname__)
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
        "alice leads shop (term 1); the seat frees when its session stops",
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
