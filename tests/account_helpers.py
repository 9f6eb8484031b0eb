"""The owner and agents with keys, as the service's faces make them: for tests of keys,
administration, the directory and the send rules that come with accounts."""

from __future__ import annotations

from agentpost.domain.models import Caller
from agentpost.services import PostOffice

ADMIN_SECRET = "admin-secret-for-tests-0123456789"
ADDRESS = "203.0.113.7"
"""The client address every test request comes from unless it says otherwise."""


async def owner(office: PostOffice) -> Caller:
    """The owner, through the configured admin key (installed on first call)."""
    await office.keys.install_admin_key(ADMIN_SECRET)
    return await office.keys.authenticate(ADMIN_SECRET, ip=ADDRESS)


async def keyed(
    office: PostOffice,
    name: str,
    *,
    description: str = "",
    project: str | None = None,
    capabilities: list[str] | None = None,
) -> tuple[Caller, str]:
    """A new agent made by the owner, authenticated with its first key: (caller, secret)."""
    _, issued = await office.admin.create_agent(
        await owner(office),
        name,
        description=description,
        project=project,
        capabilities=capabilities,
    )
    return await office.keys.authenticate(issued.key, ip=ADDRESS), issued.key


async def keyed_agents(office: PostOffice, *names: str) -> list[Caller]:
    return [(await keyed(office, name))[0] for name in names]


async def self_registered(
    office: PostOffice, name: str, *, project: str, branch: str | None = None
) -> tuple[Caller, str]:
    """An agent that registered itself (`untrusted`), speaking for a session it minted in
    `project` on `branch`; and its key. Registration must be open."""
    issued = await office.keys.self_register(name, project=project, ip=ADDRESS)
    caller = await office.keys.authenticate(issued.key, ip=ADDRESS, own_session=False)
    session = await office.presence.open_http_session(
        caller, host="elsewhere", project=project, branch=branch
    )
    return await office.keys.authenticate(issued.key, ip=ADDRESS, session=session.id), issued.key
