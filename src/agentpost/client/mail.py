"""The operations of an agent: mail, the directory and presence, sessions, blocks, channels,
webhooks. Each answer is read into the domain type the services return.

`MailOperations` lists them under their OpenAPI operation ids; both clients inherit it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentpost.client.operation import (
    Operation,
    Request,
    fields,
    listed,
    nothing,
    retry_headers,
)
from agentpost.domain.accounts import AgentInfo, Myself, Usage
from agentpost.domain.desk import PriorityName, StatusName
from agentpost.domain.events import Webhook, WebhookDelivery
from agentpost.domain.limits import (
    check_ack_ids,
    check_query,
    check_ttl,
    check_wait_seconds,
    directory_words,
)
from agentpost.domain.models import (
    AckResult,
    ChannelInfo,
    Inbox,
    Message,
    Presence,
    SendResult,
    SentMessage,
    check_priority,
    check_session_status,
)


def _messages(answer: Any) -> list[Message]:
    return [Message.from_dict(m) for m in answer["messages"]]


# -- mail ---------------------------------------------------------------------------------------


def send(
    to: str | list[str],
    body: str,
    *,
    subject: str | None = None,
    data: Any = None,
    thread_id: str | None = None,
    reply_to: str | None = None,
    priority: PriorityName = "normal",
    ttl_s: float | None = None,
    must_read: bool = False,
    idempotency_key: str | None = None,
) -> Request[SendResult]:
    """Send to a name, a list of names or `#channel`. With `idempotency_key`, a retried send
    (the same key and body within 24 h) is stored once and answers as the first did; without
    one, the client makes its own for the sends it repeats after a network failure."""
    check_priority(priority)  # in the services' words: REST's would differ from a local answer
    check_ttl(ttl_s)  # and a NaN or an infinity, which no JSON carries, named as they name it
    json = fields(
        to=to,
        body=body,
        subject=subject,
        data=data,
        thread_id=thread_id,
        reply_to=reply_to,
        priority=priority,
        ttl_s=ttl_s,
        must_read=must_read,
    )
    return Request(SendResult.from_dict, json=json, headers=retry_headers(idempotency_key))


def inbox(
    *,
    unread_only: bool = True,
    limit: int = 20,
    thread_id: str | None = None,
    urgent_only: bool = False,
    peek: bool = False,
    before: str | None = None,
) -> Request[Inbox]:
    """Your mail, oldest first (with `unread_only=false`, the newest `limit`, or of what is older
    than `before`, a page's first id); marked read unless `peek`. `thread_id` narrows it to a
    thread, named by its id or any of its messages'."""
    params = {
        "unread_only": unread_only,
        "limit": limit,
        "thread_id": thread_id,
        "urgent_only": urgent_only,
        "peek": peek,
        "before": before,
    }
    return Request(Inbox.from_dict, params=params, hands_over=not peek)


def wait(timeout_s: float = 60, *, thread_id: str | None = None) -> Request[Inbox]:
    """Long-poll: answers as soon as unread mail is there (marked read), or after `timeout_s`
    with `timed_out` set (the service caps the wait at its `max_wait_s`). `thread_id`, the
    thread's id or any of its messages', waits for that thread's mail only."""
    wait_s = check_wait_seconds(timeout_s)
    params = {"timeout_s": timeout_s, "thread_id": thread_id}
    return Request(Inbox.from_dict, params=params, wait_s=wait_s, hands_over=True)


def ack(ids: str | Sequence[str]) -> Request[AckResult]:
    """Acknowledge messages you handled; ids that are not yours come back in `not_found`."""
    return Request(AckResult.from_dict, json={"ids": check_ack_ids(ids)})


def get_message(message_id: str) -> Request[Message]:
    """One message you may see (as a recipient, its sender, or a member of its channel)."""
    return Request(Message.from_dict, path_args={"message_id": message_id})


def thread(thread_id: str, *, limit: int = 50, before: str | None = None) -> Request[list[Message]]:
    """A thread's messages that you may see, oldest first (the newest `limit` of them, or of
    those older than `before`, a page's first id); named by its thread id or by the id of any
    of its messages."""
    params = {"limit": limit, "before": before}
    return Request(_messages, path_args={"thread_id": thread_id}, params=params)


def sent(*, limit: int = 20, before: str | None = None) -> Request[list[SentMessage]]:
    """Your sent messages, newest first, each with its recipients' receipts (`before`: a
    page's last id, for the older ones)."""
    return Request(
        lambda a: [SentMessage.from_dict(m) for m in a["messages"]],
        params={"limit": limit, "before": before},
    )


def search(q: str, *, limit: int = 20, before: str | None = None) -> Request[list[Message]]:
    """Full-text search over the messages you may see, newest first (`before`: a page's last
    id, for the older matches)."""
    return Request(_messages, params={"q": check_query(q), "limit": limit, "before": before})


# -- agents, presence, sessions -----------------------------------------------------------------


def directory(
    q: str | None = None, *, project: str | None = None, limit: int = 50
) -> Request[list[AgentInfo]]:
    """The address book: search by name, description, project or capability."""
    directory_words(q)  # refused as the services refuse it: too long, too many words
    return Request(
        lambda a: [AgentInfo.from_dict(x) for x in a["agents"]],
        params={"q": q, "project": project, "limit": limit},
    )


def who(project: str | None = None, *, include_offline: bool = False) -> Request[list[Presence]]:
    """Who is at work: each agent's project, branch, objective, status and presence."""
    return Request(
        lambda a: [Presence.from_dict(x) for x in a["agents"]],
        params={"project": project, "include_offline": include_offline},
    )


def me() -> Request[Myself]:
    """Your agent: its profile and trust, and the session this client speaks for."""
    return Request(Myself.from_dict)


def update_me(
    *,
    description: str | None = None,
    project: str | None = None,
    capabilities: list[str] | None = None,
    status: StatusName | None = None,
    objective: str | None = None,
) -> Request[Myself]:
    """Change your profile (description, project, capabilities) and your session's status and
    objective; what is left out stays as it is."""
    if status is not None:
        check_session_status(status)
    json = fields(
        description=description,
        project=project,
        capabilities=capabilities,
        status=status,
        objective=objective,
    )
    return Request(Myself.from_dict, json=json)


def open_session(
    *,
    project: str | None = None,
    worktree: str | None = None,
    branch: str | None = None,
    objective: str | None = None,
    auto_lead: bool = True,
) -> Request[str]:
    """Mint a session of your agent (say, one per worktree); its id. Set it as the client's
    `session` to speak for it. `auto_lead=False`: it takes no free seat by itself (a session
    that stepped down), until it claims one."""
    json = fields(project=project, worktree=worktree, branch=branch, objective=objective)
    if not auto_lead:  # sent only when off: a service older than the field refuses it
        json["auto_lead"] = False
    return Request(lambda a: str(a["session_id"]), json=json, for_session=False)


def heartbeat(session_id: str, *, branch: str | None = None) -> Request[None]:
    """Keep a session online (any request made for it does too); `branch`: the one its
    worktree has checked out now, when that moved."""
    json = fields(branch=branch) or None
    return Request(nothing, path_args={"session_id": session_id}, json=json)


def end_session(session_id: str) -> Request[None]:
    """End a session: it shows offline at once."""
    return Request(nothing, path_args={"session_id": session_id})


def _blocked(answer: Any) -> list[str]:
    return [str(name) for name in answer["blocked"]]


def blocked() -> Request[list[str]]:
    """The agents whose mail you drop."""
    return Request(_blocked)


def block(agent: str) -> Request[list[str]]:
    """Drop this agent's mail to you from now on, silently; whom you block now."""
    return Request(_blocked, path_args={"agent": agent})


def unblock(agent: str) -> Request[list[str]]:
    """Take this agent's mail again; whom you still block."""
    return Request(_blocked, path_args={"agent": agent})


def usage() -> Request[Usage]:
    """What you sent and received, your unread and unacknowledged mail, and your limits."""
    return Request(Usage.from_dict)


# -- channels -----------------------------------------------------------------------------------


def channels() -> Request[list[ChannelInfo]]:
    """Every channel (#general, project channels, those agents joined): member counts, and
    whether you are in each."""
    return Request(lambda a: [ChannelInfo.from_dict(c) for c in a["channels"]])


def join_channel(channel: str) -> Request[ChannelInfo]:
    """Join a channel (created if new): you get its broadcasts and may read its history."""
    return Request(ChannelInfo.from_dict, path_args={"channel": channel})


def leave_channel(channel: str) -> Request[str]:
    """Leave a channel you joined; the channel left, as `#name`."""
    return Request(lambda a: str(a["left"]), path_args={"channel": channel})


def channel_history(
    channel: str, *, limit: int = 20, before: str | None = None
) -> Request[list[Message]]:
    """A channel's newest `limit` messages (before a message id), oldest first."""
    return Request(
        _messages,
        path_args={"channel": channel},
        params={"limit": limit, "before": before},
    )


# -- webhooks -----------------------------------------------------------------------------------


def create_webhook(url: str, events: str | Sequence[str]) -> Request[tuple[Webhook, str]]:
    """Register a URL for your events; the webhook and its signing secret (shown only here)."""
    return Request(
        lambda a: (Webhook.from_dict(a), str(a["secret"])),
        json={"url": url, "events": listed(events)},
    )


def webhooks() -> Request[list[Webhook]]:
    """Your webhooks (never their secrets)."""
    return Request(lambda a: [Webhook.from_dict(h) for h in a["webhooks"]])


def delete_webhook(webhook_id: str) -> Request[None]:
    """Stop delivering to a webhook."""
    return Request(nothing, path_args={"webhook_id": webhook_id})


def webhook_deliveries(webhook_id: str, *, limit: int = 50) -> Request[list[WebhookDelivery]]:
    """The delivery log of one webhook, newest first: attempts, last status, last error."""
    return Request(
        lambda a: [WebhookDelivery.from_dict(d) for d in a["deliveries"]],
        path_args={"webhook_id": webhook_id},
        params={"limit": limit},
    )


class MailOperations:
    """An agent's REST operations, named by their OpenAPI operation ids."""

    send = Operation("POST", "/v1/messages", send)
    inbox = Operation("GET", "/v1/inbox", inbox)
    wait = Operation("GET", "/v1/inbox/wait", wait)
    ack = Operation("POST", "/v1/inbox/ack", ack)
    get_message = Operation("GET", "/v1/messages/{message_id}", get_message)
    thread = Operation("GET", "/v1/threads/{thread_id}", thread)
    sent = Operation("GET", "/v1/sent", sent)
    search = Operation("GET", "/v1/search", search)

    directory = Operation("GET", "/v1/agents", directory)
    who = Operation("GET", "/v1/presence", who)
    me = Operation("GET", "/v1/me", me)
    update_me = Operation("PATCH", "/v1/me", update_me)
    open_session = Operation("POST", "/v1/sessions", open_session)
    heartbeat = Operation("POST", "/v1/sessions/{session_id}/heartbeat", heartbeat)
    end_session = Operation("DELETE", "/v1/sessions/{session_id}", end_session)
    blocked = Operation("GET", "/v1/blocks", blocked)
    block = Operation("PUT", "/v1/blocks/{agent}", block)
    unblock = Operation("DELETE", "/v1/blocks/{agent}", unblock)
    usage = Operation("GET", "/v1/usage", usage)

    channels = Operation("GET", "/v1/channels", channels)
    join_channel = Operation("PUT", "/v1/channels/{channel}/members/me", join_channel)
    leave_channel = Operation("DELETE", "/v1/channels/{channel}/members/me", leave_channel)
    channel_history = Operation("GET", "/v1/channels/{channel}/messages", channel_history)

    create_webhook = Operation("POST", "/v1/webhooks", create_webhook)
    webhooks = Operation("GET", "/v1/webhooks", webhooks)
    delete_webhook = Operation("DELETE", "/v1/webhooks/{webhook_id}", delete_webhook)
    webhook_deliveries = Operation(
        "GET", "/v1/webhooks/{webhook_id}/deliveries", webhook_deliveries
    )
