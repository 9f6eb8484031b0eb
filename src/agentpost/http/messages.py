"""Mail: send, the inbox (list, peek, wait, ack), one message, threads, sent, search."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query, Request

from agentpost.domain.limits import MAX_LIMIT
from agentpost.http.deps import IdempotencyKey, Me, Office
from agentpost.http.hangup import unless_hung_up
from agentpost.http.routing import api_router
from agentpost.http.schemas import AckBody, SendBody

router = api_router(prefix="/v1", tags=["messages"])

Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT)]
Before = Annotated[
    str | None, Query(description="A message's id (a page's oldest): the page older than it.")
]


def _page(messages: list[Any], **extra: Any) -> dict[str, Any]:
    return {"messages": [m.to_dict() for m in messages], **extra}


@router.post("/messages", status_code=201, operation_id="send")
async def send(
    body: SendBody,
    office: Office,
    me: Me,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    """Send a message; `Idempotency-Key` makes a retried send store it once (24 h, per agent)."""
    sent = await office.mailbox.send(
        me,
        body.to,
        body.body,
        subject=body.subject,
        data=body.data,
        thread_id=body.thread_id,
        reply_to=body.reply_to,
        priority=body.priority,
        ttl_s=body.ttl_s,
        must_read=body.must_read,
        idempotency_key=idempotency_key,
    )
    return sent.to_dict()


@router.get("/inbox", operation_id="inbox")
async def inbox(
    office: Office,
    me: Me,
    unread_only: bool = True,
    limit: Limit = 20,
    thread_id: str | None = None,
    urgent_only: bool = False,
    peek: bool = False,
    before: Before = None,
) -> dict[str, Any]:
    """Your mail, oldest first (with `unread_only=false`, the newest `limit`, or of what is older
    than `before`, a page's first id); marked read unless `peek`. `thread_id` narrows it to a
    thread, named by its id or any of its messages'."""
    found = await office.mailbox.inbox(
        me,
        unread_only=unread_only,
        limit=limit,
        thread_id=thread_id,
        urgent_only=urgent_only,
        peek=peek,
        before=before,
    )
    return _page(found.messages, unread=found.unread)


@router.get("/inbox/wait", operation_id="wait")
async def wait(
    request: Request,
    office: Office,
    me: Me,
    timeout_s: Annotated[float, Query(ge=0)] = 60,
    thread_id: str | None = None,
) -> dict[str, Any]:
    """Long-poll: answers as soon as unread mail is there (marked read), or at the timeout;
    `thread_id` (its id or any of its messages') waits for that thread's mail only."""
    found = await unless_hung_up(
        request, lambda: office.mailbox.wait(me, timeout_s=timeout_s, thread_id=thread_id)
    )
    if found is None:  # nobody to answer: nothing was marked read
        return {}
    return _page(found.messages, unread=found.unread, timed_out=found.timed_out)


@router.post("/inbox/ack", operation_id="ack")
async def ack(body: AckBody, office: Office, me: Me) -> dict[str, Any]:
    """Acknowledge messages you handled; ids that are not yours come back in `not_found`."""
    return (await office.mailbox.ack(me, body.ids)).to_dict()


@router.get("/messages/{message_id:path}", operation_id="get_message")
async def get_message(message_id: str, office: Office, me: Me) -> dict[str, Any]:
    """One message you may see (as a recipient, its sender, or a member of its channel)."""
    return (await office.history.get(me, message_id)).to_dict()


@router.get("/threads/{thread_id:path}", operation_id="thread")
async def thread(
    thread_id: str, office: Office, me: Me, limit: Limit = 50, before: Before = None
) -> dict[str, Any]:
    """A thread's messages that you may see, oldest first (the newest `limit` of them, or of
    those older than `before`); named by its thread id or by the id of any of its messages."""
    found = await office.history.thread(me, thread_id, limit, before)
    return _page(found, thread_id=found[0].thread_id if found else thread_id)


@router.get("/sent", operation_id="sent")
async def sent(office: Office, me: Me, limit: Limit = 20, before: Before = None) -> dict[str, Any]:
    """Your sent messages, newest first, each with its recipients' receipts."""
    return _page(await office.history.sent(me, limit, before))


@router.get("/search", operation_id="search")
async def search(
    office: Office,
    me: Me,
    q: str,
    limit: Limit = 20,
    before: Before = None,
) -> dict[str, Any]:
    """Full-text search over the messages you may see, newest first."""
    return _page(await office.history.search(me, q, limit, before))
