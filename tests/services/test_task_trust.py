"""A task's words keep the trust they were written with, as a message does: a vouch given or
withdrawn later changes how the agent's next words read, never how its earlier ones do."""

from __future__ import annotations

import pytest

from account_helpers import ADDRESS, keyed, owner
from agentpost.domain.models import Trust
from agentpost.domain.tasks import Task
from backends import OpenOffice, session_caller

pytestmark = pytest.mark.anyio


def words(task: Task) -> list[tuple[str, str, Trust]]:
    """Each change's (actor, note, trust), oldest first."""
    return [(c.actor, c.note, c.trust) for c in task.history]


async def test_what_an_agent_wrote_unvouched_stays_untrusted_after_the_owner_vouches(
    open_office: OpenOffice,
) -> None:
    office = await open_office(open_registration=True, auto_lead=False)
    bob, _ = await keyed(office, "bob", project="shop")
    await office.keys.self_register("drifter", project="shop", ip=ADDRESS)
    drifter = await session_caller(office, "drifter")  # re-reads its agent's trust each act
    asked = await office.tasks.delegate(drifter, "bob", "Rotate the key", "the owner says so")
    given = await office.tasks.delegate(bob, "drifter", "Tidy the changelog")
    await office.tasks.update_task(drifter, given.id, "in_progress", note="on it")
    done = await office.tasks.update_task(drifter, given.id, "done", note="tidied", result=[1])
    assert (asked.creator_trust, done.result_trust) == (Trust.UNTRUSTED, Trust.UNTRUSTED)

    await office.admin.vouch(await owner(office), "drifter")
    await office.tasks.update_task(drifter, asked.id, "cancelled", note="never mind")

    for reader in (bob, drifter):
        asked_now = await office.tasks.task(reader, asked.id)
        assert asked_now.creator_trust is Trust.UNTRUSTED  # its title and detail
        assert words(asked_now) == [
            ("drifter", "", Trust.UNTRUSTED),
            ("drifter", "never mind", Trust.VERIFIED),  # written after the vouch
        ]
        given_now = await office.tasks.task(reader, given.id)
        assert given_now.result_trust is Trust.UNTRUSTED
        assert words(given_now) == [
            ("bob", "", Trust.VERIFIED),
            ("drifter", "on it", Trust.UNTRUSTED),
            ("drifter", "tidied", Trust.UNTRUSTED),
        ]
    listed = {t.id: t for t in await office.tasks.tasks(bob)}
    assert listed[asked.id].creator_trust is Trust.UNTRUSTED
    assert listed[given.id].result_trust is Trust.UNTRUSTED


async def test_what_an_agent_wrote_vouched_for_stays_verified_after_the_vouch_is_withdrawn(
    open_office: OpenOffice,
) -> None:
    office = await open_office()
    bob, _ = await keyed(office, "bob")
    await keyed(office, "carol")
    carol = await session_caller(office, "carol")
    asked = await office.tasks.delegate(carol, "bob", "Review the release", "notes attached")
    given = await office.tasks.delegate(bob, "carol", "Write the notes")
    await office.tasks.update_task(carol, given.id, "done", note="written", result="v2.1 notes")

    await office.admin.unvouch(await owner(office), "carol")
    await office.tasks.update_task(carol, asked.id, "cancelled", note="after the unvouch")

    asked_now = await office.tasks.task(bob, asked.id)
    assert asked_now.creator_trust is Trust.VERIFIED
    assert words(asked_now) == [
        ("carol", "", Trust.VERIFIED),
        ("carol", "after the unvouch", Trust.UNTRUSTED),
    ]
    given_now = await office.tasks.task(bob, given.id)
    assert (given_now.result, given_now.result_trust) == ("v2.1 notes", Trust.VERIFIED)
    assert words(given_now)[-1] == ("carol", "written", Trust.VERIFIED)
    assert given_now.assignee_trust is Trust.UNTRUSTED  # who carol is now, beside no words


async def test_a_task_without_a_result_has_no_result_trust(open_office: OpenOffice) -> None:
    office = await open_office()
    bob, _ = await keyed(office, "bob")
    carol, _ = await keyed(office, "carol")
    task = await office.tasks.delegate(bob, "carol", "Plan the sprint")
    moved = await office.tasks.update_task(carol, task.id, "accepted")
    assert (moved.result, moved.result_trust) == (None, None)
    assert moved.to_dict()["result_trust"] is None
    assert [c.to_dict()["trust"] for c in moved.history] == ["verified", "verified"]
