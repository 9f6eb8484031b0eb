"""The local desk: each operation of a stdio session is first admitted, reads too."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from account_helpers import owner
from agentpost.domain.errors import ErrorCode
from agentpost.mcp.desk import LocalDesk, SessionCaller
from agentpost.services import PostOffice
from backends import refused_without_change, session_caller

pytestmark = pytest.mark.anyio

Call = Callable[[LocalDesk], Awaitable[Any]]

CALLS: dict[str, Call] = {
    "whoami": lambda d: d.whoami(),
    "register": lambda d: d.register(objective="still here"),
    "register_another_name": lambda d: d.register(name="zed-two"),
    "set_status": lambda d: d.set_status(status="active", objective="going on"),
    "who": lambda d: d.who(),
    "send": lambda d: d.send("amy", "still here?"),
    "inbox": lambda d: d.inbox(),
    "inbox_peeked": lambda d: d.inbox(peek=True),
    "wait": lambda d: d.wait(timeout_s=0),
    "ack": lambda d: d.ack(["m_0"]),
    "thread": lambda d: d.thread("t_0"),
    "sent": lambda d: d.sent(),
    "search": lambda d: d.search("hello"),
    "channels": lambda d: d.channels(),
    "join": lambda d: d.join("#ops"),
    "leave": lambda d: d.leave("#general"),
    "read_channel": lambda d: d.read_channel("#general"),
    "leader": lambda d: d.leader(),
    "claim_leadership": lambda d: d.claim_leadership(),
    "release_leadership": lambda d: d.release_leadership(),
    "delegate": lambda d: d.delegate("amy", "fix it"),
    "tasks": lambda d: d.tasks(),
    "task": lambda d: d.task("task_0"),
    "update_task": lambda d: d.update_task("task_0", "done"),
    "request": lambda d: d.request("amy", "ready?", timeout_s=0),
    "respond": lambda d: d.respond("req_0", "yes"),
    "check_request": lambda d: d.check_request("req_0"),
    "reserve": lambda d: d.reserve(["src/app.py"]),
    "renew_reservations": lambda d: d.renew_reservations(),
    "release_reservations": lambda d: d.release_reservations(paths=["src/app.py"]),
    "reservations": lambda d: d.reservations(),
}


async def desk_of(office: PostOffice, name: str) -> LocalDesk:
    """A desk as `agentpost mcp` makes it: a live local session, admitted on each call."""
    caller = await session_caller(office, name)
    return LocalDesk(office, SessionCaller(caller, office.admission.admit))


@pytest.mark.parametrize("call", CALLS.values(), ids=CALLS.keys())
async def test_every_operation_of_a_disabled_agents_session_is_gone_and_changes_nothing(
    office: PostOffice, call: Call
) -> None:
    zed = await desk_of(office, "zed")
    amy = await session_caller(office, "amy")
    await office.mailbox.send(amy, "zed", "for zed when it is back")
    await office.admin.disable_agent(await owner(office), "zed")
    await refused_without_change(office, ErrorCode.GONE, call(zed))


async def test_the_old_session_is_refused_once_enabled_again_and_a_new_one_acts(
    office: PostOffice,
) -> None:
    zed = await desk_of(office, "zed")
    amy = await session_caller(office, "amy")
    await office.mailbox.send(amy, "zed", "for zed when it is back")
    admin = await owner(office)
    await office.admin.disable_agent(admin, "zed")
    await office.admin.enable_agent(admin, "zed")
    await refused_without_change(office, ErrorCode.NOT_FOUND, zed.reserve(["src/app.py"]))
    await refused_without_change(office, ErrorCode.NOT_FOUND, zed.inbox())
    again = await desk_of(office, "zed")
    assert [m.body for m in (await again.inbox()).messages] == ["for zed when it is back"]
