"""Channels: the list, joining, leaving, and a channel's history."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query

from agentpost.domain.limits import MAX_LIMIT
from agentpost.domain.names import channel_tag
from agentpost.http.deps import Me, Office
from agentpost.http.routing import api_router

router = api_router(prefix="/v1/channels", tags=["channels"])


@router.get("", operation_id="channels")
async def channels(office: Office, me: Me) -> dict[str, Any]:
    """Every channel (#general, project channels, those agents joined): member counts, and
    whether you are in each."""
    return {"channels": [c.to_dict() for c in await office.channels.overview(me)]}


@router.put("/{channel:path}/members/me", operation_id="join_channel")
async def join(channel: str, office: Office, me: Me) -> dict[str, Any]:
    """Join a channel (created if new): you get its broadcasts and may read its history."""
    return (await office.channels.join(me, channel)).to_dict()


@router.delete("/{channel:path}/members/me", operation_id="leave_channel")
async def leave(channel: str, office: Office, me: Me) -> dict[str, Any]:
    """Leave a channel you joined."""
    return await office.channels.leave(me, channel)


@router.get("/{channel:path}/messages", operation_id="channel_history")
async def history(
    channel: str,
    office: Office,
    me: Me,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 20,
    before: str | None = None,
) -> dict[str, Any]:
    """A channel's newest `limit` messages (before a message id), oldest first."""
    found = await office.channels.history(me, channel, limit, before)
    return {"channel": channel_tag(channel), "messages": [m.to_dict() for m in found]}
