"""Between a checked draft and its delivery: whether the sender may send, whom the message
goes to, and whose inbox is full. Each check runs in the send's own transaction, so what it
decides on is what the send stores against, and a refusal rolls it all back."""

from __future__ import annotations

from typing import Any

from agentpost.config import Settings
from agentpost.domain.accounts import AgentLimits
from agentpost.domain.errors import AgentpostError, ErrorCode, invalid, not_found
from agentpost.domain.ids import is_message_id
from agentpost.domain.models import Caller
from agentpost.domain.names import OWNER, POST_OFFICE, SYSTEM
from agentpost.services import accounts
from agentpost.services.channels import member_channels, members, require_member
from agentpost.store import agents as agent_rows
from agentpost.store import mail, rates, reading
from agentpost.store.database import Connection, Store

SEND_WINDOW_S = 60
SEND_RATE_KEY = "send:"
"""Prefix of each agent's send-rate window in the store."""


def admit_sender(
    conn: Connection, caller: Caller, known: dict[str, bool], *, create: bool, now: float
) -> None:
    """The caller may send; with `create`, a new name becomes an agent in `conn` (and in
    `known`), and a disabled one is `gone`, as `ensure_agent` has it."""
    if create and caller.agent not in known:
        agent_rows.create_agent(conn, caller.agent, now=now)
        known[caller.agent] = True
    elif create and not known[caller.agent]:
        raise AgentpostError(ErrorCode.GONE, f"agent {caller.agent!r} is disabled")
    if caller.agent not in known:
        raise AgentpostError(ErrorCode.UNAUTHENTICATED, f"no agent {caller.agent!r}")
    if not known[caller.agent]:
        raise AgentpostError(ErrorCode.GONE, f"agent {caller.agent!r} is disabled")


def count_send(
    conn: Connection, dialect: Any, caller: Caller, now: float, limit: int, act: str = ""
) -> None:
    """One more send in the caller's window of a minute; refused past `limit`. `act` names
    what counts as one when it is no message (for the refusal to say)."""
    count, reset_s = rates.hit(conn, dialect, f"{SEND_RATE_KEY}{caller.agent}", now, SEND_WINDOW_S)
    if count > limit:
        also = f", and {act} counts as one" if act else ""
        raise AgentpostError(
            ErrorCode.RATE_LIMITED,
            f"{caller.agent} may send {limit} messages a minute{also}",
            details={"limit": limit},
            retry_after_s=max(1.0, round(reset_s, 1)),
        )


def count_act(conn: Connection, store: Store, settings: Settings, caller: Caller, act: str) -> None:
    """An act that leaves a row no sweep purges (an audit row, a notice to many) counts
    against the caller's send rate as a send would: over it, the act is refused with its
    transaction, rather than let a loop of them grow the store without end."""
    limits = accounts.limits_in_effect(conn, settings, [caller.agent])
    rate = limits[caller.agent].send_rate_per_minute
    count_send(conn, store.dialect, caller, store.clock(), rate, act)


def parent_thread(
    conn: Connection, caller: Caller, reply_to: str, thread: str | None, now: float
) -> str:
    """A reply's thread: its parent's, which the caller must be able to see."""
    channels = member_channels(conn, caller.agent)
    parent = reading.visible_message(conn, caller.agent, channels, reply_to, now)
    if parent is None:
        raise not_found(f"no message {reply_to!r} that you can see", reply_to=reply_to)
    if thread is not None and thread != parent.thread_id:
        raise invalid("thread_id of a reply can only be its parent's thread; omit it")
    parent_thread: str = parent.thread_id
    return parent_thread


def check_thread_label(conn: Connection, thread: str) -> None:
    """A new message's `thread_id` shaped like a message's id must name a thread that is:
    labelled with the id of a message (a reply's, say) that is no thread's, a new thread
    would stand in for that message's own wherever the id names a thread, before the
    conversation it was part of."""
    if is_message_id(thread) and not reading.thread_exists(conn, thread):
        raise invalid(
            f"thread_id {thread} is a message's id, not a thread's: reply_to that message "
            "to answer in its thread, or give another thread_id",
            thread_id=thread,
        )


def full_inboxes(
    conn: Connection,
    names: list[str],
    limits_of: dict[str, AgentLimits],
    default_cap: int,
    now: float,
) -> list[str]:
    """Those of `names` whose open mail reached their cap (their own, or the setting)."""
    if not names:
        return []
    caps = {n: limits_of[n].max_unacked if n in limits_of else default_cap for n in names}
    return mail.at_cap(conn, caps, now)


def direct_recipients(
    conn: Connection,
    names: list[str],
    known: dict[str, bool],
    roster: list[str] | None,
    now: float,
) -> list[str]:
    """Named recipients, each an enabled agent (on the roster, if there is one); a roster name
    nobody has used yet becomes an agent here, and so does the owner (the person at the
    command line, who may not have used it yet) where there is no roster."""
    for name in names:
        if name not in known:
            if name in (roster if roster is not None else (OWNER,)):
                agent_rows.create_agent(conn, name, now=now)
                continue
            raise AgentpostError(
                ErrorCode.UNKNOWN_RECIPIENT,
                f"no agent named {name!r}; `who` lists them (offline ones too, when asked)",
                details={"recipient": name},
            )
        if not known[name]:
            raise AgentpostError(ErrorCode.GONE, f"agent {name!r} is disabled")
        if roster is not None and name not in roster:
            raise AgentpostError(
                ErrorCode.UNKNOWN_RECIPIENT,
                f"{name!r} is not on the roster",
                details={"recipient": name},
            )
    return names


def channel_recipients(conn: Connection, sender: str, channel: str) -> list[str]:
    """A channel's members but the sender and the post office's own names; only a member
    posts."""
    require_member(conn, channel, sender, "before you post to it")
    return [n for n in members(conn, channel) if n != sender and n not in (SYSTEM, POST_OFFICE)]
