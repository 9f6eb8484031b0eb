"""Being told: the server-sent event stream of your mail and receipts, and webhooks.

Event ids are cursors into your event log: a client that reconnects with `Last-Event-ID` (or
`?after=`) gets everything after it, nothing missed and nothing twice. A comment line every
15 s keeps proxies from closing an idle stream. A stream whose key is revoked (or whose agent
is disabled) meanwhile ends with an `error` event carrying the refusal.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Header, Query
from sse_starlette import EventSourceResponse, ServerSentEvent
from sse_starlette.sse import AppStatus

from agentpost.domain.errors import AgentpostError, invalid
from agentpost.domain.limits import MAX_LIMIT, MAX_SEQ, check_seq, is_decimal
from agentpost.http.deps import Me, Office
from agentpost.http.routing import api_router
from agentpost.http.schemas import WebhookBody

router = api_router(prefix="/v1", tags=["events"])

KEEPALIVE_S = 15
SHUTDOWN_GRACE_S = 5.0


def _cursor(last_event_id: str | None, after: int | None) -> int | None:
    if last_event_id is not None and last_event_id.strip():
        if not is_decimal(last_event_id.strip()):
            raise invalid("Last-Event-ID must be an event id from this stream")
        return check_seq(int(last_event_id), "Last-Event-ID")
    return after


def defer_stream_drain() -> None:
    """sse-starlette ends every event stream of the process (the MCP SDK's too) as soon as
    the server is told to stop; the answers of the long-polls woken by the stop travel on some
    (a 2025-era MCP tool call's), and were cut off. It ends them when `drain_streams` says.
    (Its state is the process's: a server started after another starts afresh.)"""
    AppStatus.enable_automatic_graceful_drain = False
    AppStatus.should_exit = False


def drain_streams() -> None:
    """End the event streams still open (see `defer_stream_drain`)."""
    AppStatus.should_exit = True


@router.get(
    "/events",
    operation_id="events",
    response_class=EventSourceResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def events(
    office: Office,
    me: Me,
    last_event_id: Annotated[str | None, Header(max_length=32)] = None,
    after: Annotated[int | None, Query(ge=0, le=MAX_SEQ)] = None,
) -> EventSourceResponse:
    """Your events as they happen: `message.created` (new mail), `message.read|acked|expired`
    (receipts of what you sent). Without a cursor the stream starts at now, and a cursor past
    every event at the newest one; its first line (an `id` without data) says where, so a
    reconnect misses nothing."""
    start = await office.events.start(me, _cursor(last_event_id, after))

    async def stream() -> AsyncIterator[ServerSentEvent]:
        # An id with no data moves a client's Last-Event-ID to where this stream starts, so a
        # reconnect before the first event resumes here instead of at a later "now".
        yield ServerSentEvent(id=str(start), comment="agentpost events")
        beat = office.settings.heartbeat_s
        try:
            async for event in office.events.follow(me, start, heartbeat_s=beat):
                yield ServerSentEvent(
                    data=json.dumps(event.to_dict()), event=event.type, id=str(event.seq)
                )
        except AgentpostError as err:  # the key was revoked meanwhile: why, and the end
            yield ServerSentEvent(data=json.dumps({"error": err.to_dict()}), event="error")

    # On shutdown the stream ends by itself (`follow` returns), and its body is finished; the
    # grace keeps sse-starlette, which hears of the shutdown too, from cutting it off first.
    return EventSourceResponse(stream(), ping=KEEPALIVE_S, shutdown_grace_period=SHUTDOWN_GRACE_S)


@router.post("/webhooks", status_code=201, operation_id="create_webhook")
async def create_webhook(body: WebhookBody, office: Office, me: Me) -> dict[str, Any]:
    """Register a URL for your events; the signing secret is shown in this answer only."""
    hook, secret = await office.webhooks.create(me, body.url, body.events)
    return {**hook.to_dict(), "secret": secret}


@router.get("/webhooks", operation_id="webhooks")
async def webhooks(office: Office, me: Me) -> dict[str, Any]:
    """Your webhooks (never their secrets)."""
    return {"webhooks": [h.to_dict() for h in await office.webhooks.list(me)]}


@router.delete("/webhooks/{webhook_id:path}", operation_id="delete_webhook")
async def delete_webhook(webhook_id: str, office: Office, me: Me) -> dict[str, Any]:
    """Stop delivering to a webhook."""
    await office.webhooks.delete(me, webhook_id)
    return {"deleted": webhook_id}


@router.get("/webhooks/{webhook_id:path}/deliveries", operation_id="webhook_deliveries")
async def deliveries(
    webhook_id: str,
    office: Office,
    me: Me,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50,
) -> dict[str, Any]:
    """The delivery log of one webhook, newest first: attempts, last status, last error."""
    found = await office.webhooks.deliveries(me, webhook_id, limit)
    return {"deliveries": [d.to_dict() for d in found]}
