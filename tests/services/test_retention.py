"""Retention: what the hourly sweep forgets besides mail, and what it must keep."""

from __future__ import annotations

import pytest

from account_helpers import ADDRESS, keyed_agents, owner
from agentpost.domain.errors import AgentpostError
from agentpost.services import PostOffice
from backends import FakeClock, OpenOffice

pytestmark = pytest.mark.anyio

DAY = 86_400.0
UNKNOWN = "ap_" + "x" * 43


async def failed_authentication(office: PostOffice) -> None:
    with pytest.raises(AgentpostError):
        await office.keys.authenticate(UNKNOWN, ip=ADDRESS)


async def audited(office: PostOffice, **options: str) -> list[str]:
    entries = await office.admin.audit_log(await owner(office), limit=500, **options)
    return [e.action for e in entries]


# -- the audit log ----------------------------------------------------------------------------


async def test_the_sweep_purges_audit_rows_older_than_audit_retention_days(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    """Failed authentications, blocks and the rest were kept forever: anyone who can reach
    the service could grow the log without end with wrong keys."""
    office = await open_office(audit_retention_days=2)
    alice, _bob = await keyed_agents(office, "alice", "bob")
    await failed_authentication(office)
    await office.directory.block(alice, "bob")
    clock.advance(DAY)
    await office.directory.unblock(alice, "bob")
    clock.advance(1.5 * DAY)
    await office.mailbox.sweep()
    assert await audited(office, actor="alice") == ["block.removed"]
    assert await audited(office, action="auth.failed") == []


async def test_the_audit_log_is_kept_a_year_by_default(
    office: PostOffice, clock: FakeClock
) -> None:
    """Longer than mail (`retention_days`, 30): who did what, and who failed to get in, is
    worth looking back on after the mail is gone."""
    await failed_authentication(office)
    clock.advance(364 * DAY)
    await office.mailbox.sweep()
    assert await audited(office, action="auth.failed") == ["auth.failed"]
    clock.advance(2 * DAY)
    await office.mailbox.sweep()
    assert await audited(office, action="auth.failed") == []


async def test_a_large_audit_log_is_purged_in_batches_to_the_last_row(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    office = await open_office(audit_retention_days=1)
    for _ in range(5):
        await failed_authentication(office)
    clock.advance(2 * DAY)
    await office.mailbox.sweep(batch=2)
    assert await audited(office, action="auth.failed") == []
