"""Agents: the directory, presence, your own profile, sessions, blocks, usage, and (when the
owner allows it) self-registration."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

from fastapi import Query, Request

from agentpost.domain.accounts import Myself
from agentpost.domain.limits import MAX_LIMIT
from agentpost.http.deps import Me, Office, client_ip
from agentpost.http.routing import api_router
from agentpost.http.schemas import (
    HeartbeatBody,
    ProfileBody,
    RegisterBody,
    SessionBody,
    may_be_left_out,
)

router = api_router(prefix="/v1", tags=["agents"])
_NO_MOVE = HeartbeatBody()
"""A heartbeat without a body: the session stays on its branch."""


@router.get("/agents", operation_id="directory")
async def directory(
    office: Office,
    me: Me,
    q: str | None = None,
    project: str | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50,
) -> dict[str, Any]:
    """The address book: search by name, description, project or capability."""
    found = await office.directory.search(me, q, project=project, limit=limit)
    return {"agents": [a.to_dict() for a in found]}


@router.get("/presence", operation_id="who")
async def who(
    office: Office, me: Me, project: str | None = None, include_offline: bool = False
) -> dict[str, Any]:
    """Who is at work: each agent's project, branch, objective, status and presence."""
    found = await office.presence.who(project, include_offline)
    return {"agents": [p.to_dict() for p in found]}


@router.get("/me", operation_id="me")
async def me_(office: Office, me: Me) -> dict[str, Any]:
    """Your agent: profile, trust, and the session this request speaks for."""
    return Myself.of(await office.directory.me(me), me.session_id).to_dict()


@router.patch("/me", operation_id="update_me")
async def update_me(body: ProfileBody, office: Office, me: Me) -> dict[str, Any]:
    """Change your description, project or capabilities, and your session's status/objective."""
    info = await office.directory.update_profile(
        me,
        description=body.description,
        project=body.project,
        capabilities=body.capabilities,
        status=body.status,
        objective=body.objective,
    )
    return Myself.of(info, me.session_id).to_dict()


@router.post("/sessions", status_code=201, operation_id="open_session")
async def open_session(
    body: Annotated[SessionBody, may_be_left_out(SessionBody)],
    office: Office,
    me: Me,
    request: Request,
) -> dict[str, Any]:
    """Mint a session handle; send it as `Agentpost-Session` to speak for that session. A
    session that may lead its project takes the seat when it is free (`auto_lead`, unless
    the body turns it off)."""
    session = await office.presence.open_http_session(
        me,
        host=client_ip(request) or "unknown",
        project=body.project,
        worktree=body.worktree,
        branch=body.branch,
        objective=body.objective,
    )
    minted = replace(me, session_id=session.id)
    if body.auto_lead:
        await office.leadership.claim_if_eligible(minted)
    else:
        await office.leadership.stand_aside(minted)
    return {"session_id": session.id, "agent": session.agent, "project": session.project}


@router.post("/sessions/{session_id}/heartbeat", operation_id="heartbeat")
async def heartbeat(
    session_id: str, office: Office, me: Me, body: HeartbeatBody = _NO_MOVE
) -> dict[str, Any]:
    """Say a session is alive (any request on it does too), and on which branch it works now.
    A session moved onto a branch that may lead its project takes the seat when it is free
    (`auto_lead`), as when it opened."""
    await office.leadership.heartbeat_of(me, session_id, branch=body.branch)
    return {"session_id": session_id, "online": True}


@router.delete("/sessions/{session_id}", operation_id="end_session")
async def end_session(session_id: str, office: Office, me: Me) -> dict[str, Any]:
    """End a session: it shows offline at once."""
    await office.presence.end_session_of(me, session_id)
    return {"session_id": session_id, "online": False}


@router.get("/blocks", operation_id="blocked")
async def blocked(office: Office, me: Me) -> dict[str, Any]:
    """The agents whose mail you drop."""
    return {"blocked": await office.directory.blocked(me)}


@router.put("/blocks/{agent:path}", operation_id="block")
async def block(agent: str, office: Office, me: Me) -> dict[str, Any]:
    """Drop this agent's mail to you from now on, silently (the sender is not told)."""
    return {"blocked": await office.directory.block(me, agent)}


@router.delete("/blocks/{agent:path}", operation_id="unblock")
async def unblock(agent: str, office: Office, me: Me) -> dict[str, Any]:
    """Take this agent's mail again."""
    return {"blocked": await office.directory.unblock(me, agent)}


@router.get("/usage", operation_id="usage")
async def usage(office: Office, me: Me) -> dict[str, Any]:
    """What you sent and received, your unread and unacknowledged mail, and your limits."""
    return (await office.directory.usage(me)).to_dict()


@router.post("/register", status_code=201, operation_id="register")
async def register(body: RegisterBody, office: Office, request: Request) -> dict[str, Any]:
    """Create your own agent and get its key, once (only when the owner opened registration)."""
    issued = await office.keys.self_register(
        body.name, description=body.description, project=body.project, ip=client_ip(request)
    )
    return issued.to_dict()
