"""Admission: a local session acts only while its agent is enabled and its session lives."""

from __future__ import annotations

import pytest

from account_helpers import owner
from agentpost.domain.errors import ErrorCode
from agentpost.services import PostOffice
from backends import refused_without_change, session_caller

pytestmark = pytest.mark.anyio


async def test_a_live_session_of_an_enabled_agent_is_admitted(office: PostOffice) -> None:
    zed = await session_caller(office, "zed")
    await office.admission.admit(zed)


async def test_a_session_of_a_disabled_agent_is_gone_and_changes_nothing(
    office: PostOffice,
) -> None:
    zed = await session_caller(office, "zed")
    await office.admin.disable_agent(await owner(office), "zed")
    refused = await refused_without_change(office, ErrorCode.GONE, office.admission.admit(zed))
    assert refused.message == "agent 'zed' is disabled"


async def test_a_session_disabling_ended_stays_ended_once_the_agent_is_enabled_again(
    office: PostOffice,
) -> None:
    zed = await session_caller(office, "zed")
    admin = await owner(office)
    await office.admin.disable_agent(admin, "zed")
    await office.admin.enable_agent(admin, "zed")
    refused = await refused_without_change(office, ErrorCode.NOT_FOUND, office.admission.admit(zed))
    assert refused.message.startswith("this session has ended")
    assert refused.details == {"session": zed.session_id}
    await office.admission.admit(await session_caller(office, "zed"))  # a new one acts
