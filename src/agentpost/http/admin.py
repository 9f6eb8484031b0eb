"""Administration, for admin keys only: agents, keys, the audit log, limits, blocks, usage.

The services refuse a caller without an admin key (`forbidden`); these routes only translate.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query, Request

from agentpost.domain.limits import MAX_SEQ
from agentpost.http.deps import Me, Office
from agentpost.http.guard import caller_of
from agentpost.http.routing import api_router
from agentpost.http.schemas import CreateAgentBody, IssueKeyBody, LimitsBody, may_be_left_out
from agentpost.services import PostOffice

_ACTS = {"admin_block": "set_block", "admin_unblock": "set_block"}
"""Acts the audit names otherwise than their route (as the MCP tool `admin_set_block` is)."""


async def _admin_first(request: Request) -> None:
    """An agent key's admin request that is malformed too is refused as an admin act, and
    kept in the audit log as the well-formed ones are (the services refuse those, before
    anything is looked at): a bad body or query string answered `invalid_argument`, telling
    its sender how to put the request right and keeping no trace of the attempt."""
    route = request.scope.get("route")
    operation = getattr(route, "operation_id", None) or ""
    act = _ACTS.get(operation, operation.removeprefix("admin_"))
    target = next(iter(request.path_params.values()), None)
    office: PostOffice = request.app.state.office
    await office.admin.check_admin(caller_of(request.scope.setdefault("state", {})), act, target)


router = api_router(prefix="/v1/admin", tags=["admin"], gate=_admin_first)


@router.post("/agents", status_code=201, operation_id="admin_create_agent")
async def create_agent(body: CreateAgentBody, office: Office, me: Me) -> dict[str, Any]:
    """Create an agent and its first key; the key is shown in this answer only."""
    agent, issued = await office.admin.create_agent(
        me,
        body.name,
        description=body.description,
        project=body.project,
        capabilities=body.capabilities,
    )
    return {"agent": agent.to_dict(), "key": issued.to_dict()}


@router.get("/agents", operation_id="admin_list_agents")
async def list_agents(office: Office, me: Me) -> dict[str, Any]:
    """Every agent, disabled ones too."""
    return {"agents": [a.to_dict() for a in await office.admin.list_agents(me)]}


@router.post("/agents/{name}/disable", operation_id="admin_disable_agent")
async def disable_agent(name: str, office: Office, me: Me) -> dict[str, Any]:
    """Disable an agent (never deleted): its keys stop working on the next request."""
    return (await office.admin.disable_agent(me, name)).to_dict()


@router.post("/agents/{name}/enable", operation_id="admin_enable_agent")
async def enable_agent(name: str, office: Office, me: Me) -> dict[str, Any]:
    """Enable a disabled agent again."""
    return (await office.admin.enable_agent(me, name)).to_dict()


@router.post("/agents/{name}/vouch", operation_id="admin_vouch_agent")
async def vouch(name: str, office: Office, me: Me) -> dict[str, Any]:
    """Vouch for a self-registered agent: its mail is `verified` from now on."""
    return (await office.admin.vouch(me, name)).to_dict()


@router.post("/agents/{name}/unvouch", operation_id="admin_unvouch_agent")
async def unvouch(name: str, office: Office, me: Me) -> dict[str, Any]:
    """Withdraw the vouch: its mail is `untrusted` from now on, and a seat it holds is freed."""
    return (await office.admin.unvouch(me, name)).to_dict()


@router.put("/agents/{name}/limits", operation_id="admin_set_limits")
async def set_limits(name: str, body: LimitsBody, office: Office, me: Me) -> dict[str, Any]:
    """Per-agent send rate, inbox cap, channel cap and open-task cap; a null goes back to the
    configured default."""
    limits = await office.admin.set_limits(
        me,
        name,
        send_rate_per_minute=body.send_rate_per_minute,
        max_unacked=body.max_unacked,
        max_channels_per_agent=body.max_channels_per_agent,
        max_open_tasks_per_agent=body.max_open_tasks_per_agent,
    )
    return limits.to_dict()


@router.post("/agents/{name}/keys", status_code=201, operation_id="admin_issue_key")
async def issue_key(
    name: str, body: Annotated[IssueKeyBody, may_be_left_out(IssueKeyBody)], office: Office, me: Me
) -> dict[str, Any]:
    """Issue another key for an agent; shown in this answer only."""
    issued = await office.keys.issue(me, name, label=body.label, admin_key=body.admin)
    return issued.to_dict()


@router.get("/keys", operation_id="admin_list_keys")
async def list_keys(office: Office, me: Me, agent: str | None = None) -> dict[str, Any]:
    """Keys (never their secrets), of one agent or of all."""
    return {"keys": [k.to_dict() for k in await office.keys.list_keys(me, agent)]}


@router.delete("/keys/{key_id}", operation_id="admin_revoke_key")
async def revoke_key(key_id: str, office: Office, me: Me) -> dict[str, Any]:
    """Revoke a key: refused from the next request on."""
    return (await office.keys.revoke(me, key_id)).to_dict()


@router.get("/audit", operation_id="admin_audit_log")
async def audit_log(
    office: Office,
    me: Me,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    before: Annotated[int | None, Query(ge=0, le=MAX_SEQ)] = None,
    actor: str | None = None,
    action: str | None = None,
) -> dict[str, Any]:
    """The audit log, newest first: administration, failed authentications, sends."""
    found = await office.admin.audit_log(me, limit=limit, before=before, actor=actor, action=action)
    return {"entries": [e.to_dict() for e in found]}


@router.put("/blocks/{recipient}/{sender}", operation_id="admin_block")
async def admin_block(recipient: str, sender: str, office: Office, me: Me) -> dict[str, Any]:
    """Drop `sender`'s mail to `recipient`."""
    return await office.admin.set_block(me, recipient, sender, True)


@router.delete("/blocks/{recipient}/{sender}", operation_id="admin_unblock")
async def admin_unblock(recipient: str, sender: str, office: Office, me: Me) -> dict[str, Any]:
    """Let `sender`'s mail reach `recipient` again."""
    return await office.admin.set_block(me, recipient, sender, False)


@router.get("/usage", operation_id="admin_usage")
async def admin_usage(office: Office, me: Me, agent: str | None = None) -> dict[str, Any]:
    """Usage of every agent, or of one."""
    return {"usage": [u.to_dict() for u in await office.admin.usage(me, agent)]}
