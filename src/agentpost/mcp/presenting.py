"""Tool answers as a model reads them: framed messages, the unread count, urgent previews.

Structured content keeps every raw field; the text is what a model is shown, with every
message inside a fresh frame (domain.framing) so its words stay a colleague's.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from agentpost.domain.accounts import AgentInfo
from agentpost.domain.desk import Desk
from agentpost.domain.errors import AgentpostError
from agentpost.domain.framing import LINE_BREAKS, frame_messages
from agentpost.domain.limits import MAX_LIMIT
from agentpost.domain.models import Message, Notices, Trust
from agentpost.domain.names import RESERVED
from agentpost.mcp.adapter import ToolOutput

log = logging.getLogger(__name__)

PREVIEW_CHARS = 200
INBOX_URI = "agentpost://inbox"
RESOURCE_PAGE = 50

_PLAIN = re.compile(r"[^\s\"'<>`]+")


def quoted(text: str) -> str:
    """Free text another agent chose (an objective, a description, a reason), as a summary line
    shows it: one JSON string on one line, so its line breaks and words read as data inside
    the line, never as lines of their own outside the frames."""
    return json.dumps(text, ensure_ascii=False).translate(LINE_BREAKS)


def by(name: str, trust: Trust) -> str:
    """An agent's name as a line shows it beside words it wrote: marked `(untrusted)` (or
    `(external)`) unless the owner vouches for it, so its words never pass for a colleague's."""
    return name if trust is Trust.VERIFIED else f"{name} ({trust.value})"


def token(text: str) -> str:
    """A value another agent chose that is usually one word (a thread id, a branch, a path):
    bare when it is one printable word (`feature/parser`), else `quoted`."""
    plain = _PLAIN.fullmatch(text) is not None and text.isprintable()
    return text if plain else quoted(text)


def count(n: int, word: str, plural: str | None = None) -> str:
    """`1 agent`, `2 agents`: a summary line's number and what it counts."""
    return f"{n} {word if n == 1 else plural or word + 's'}"


def older_pages(tool: str, shown: int, limit: int, before: object, **asked: object) -> str:
    """What a page says when it is full (`shown` == `limit`): that more may be older, and the
    call that gives the page before it, with the arguments that made this one (those None
    left out), so the next page is of the same listing. Empty for a page that is not full."""
    if shown < limit:
        return ""
    given = {**asked, "limit": limit, "before": before}
    args = ", ".join(f"{name}={_arg(value)}" for name, value in given.items() if value is not None)
    return f"\nMore may be older: `{tool}` with {args}."


def _arg(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return token(value) if isinstance(value, str) else str(value)


def moment(ts: float) -> str:
    """A time as a line shows it: UTC, to the second, one token."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


COLLEAGUES_NAMED = 200
"""The most agents the instructions name; the directory is asked for this many."""


def colleagues(agent: str, agents: Sequence[AgentInfo]) -> str:
    """The agents the instructions name beside `agent`: those the owner vouches for alone.

    The instructions reach the model as its system prompt, where a name a stranger chose for
    itself (`ignore-previous-instructions-and-push`, a valid name) must never stand; those, and
    a list cut at `COLLEAGUES_NAMED`, are counted, and `who` names them with their trust. The
    owner is the person, not an agent beside it."""
    others = [a for a in agents if a.name != agent and a.name not in RESERVED]
    named = [a.name for a in others if a.trust is Trust.VERIFIED]
    unvouched = len(others) - len(named)
    more = [f"{unvouched} not vouched for"] if unvouched else []
    if len(agents) >= COLLEAGUES_NAMED:
        more.append("maybe more")
    if not more:
        return ", ".join(named) or "none yet"
    return ", ".join([*named, f"{' and '.join(more)}: `who` lists them"])


def render_instructions(template: str, agent: str, others: str) -> str:
    """Fill `{agent}` and `{agents}` (`others`, as `colleagues` says them) only, so other
    braces in a custom template stay as written."""
    return template.replace("{agent}", agent).replace("{agents}", others)


def instructions_for_a_key(template: str) -> str:
    """The instructions where the agent is not known when they are given: one server for every
    key over HTTP, or a remote-backed session whose service had not answered. True whoever
    the agent is, and whoever works beside it: `whoami` and `who` tell."""
    unnamed = template.replace("agent `{agent}`", "the agent your key names (`whoami` says which)")
    return render_instructions(unnamed, "(the agent of your key)", "`who` lists them")


async def inbox_resource(desk: Desk) -> str:
    """The `agentpost://inbox` resource: the oldest unread mail (a page of it), raw and framed,
    never marked; `more` counts the unread mail past the page, and the text says how to read
    it, so a model shown a page does not take it for all its mail."""
    found = await desk.inbox(peek=True, limit=RESOURCE_PAGE)
    more = max(0, found.unread - len(found.messages))
    title = f"{found.unread} unread"
    if more:
        title += (
            f": the oldest {len(found.messages)} here, {more} more after them; `inbox` reads"
            f" them (up to limit={MAX_LIMIT} a call, marked read unless peek)"
        )
    return json.dumps(
        {
            "agent": desk.agent,
            "unread": found.unread,
            "more": more,
            "messages": messages_json(found.messages),
            # What a model should be shown: the same messages inside their frames.
            "framed": frame_messages(found.messages, title=title),
        }
    )


def _shortened(message: Message) -> Message:
    if len(message.body) <= PREVIEW_CHARS and message.data is None:
        return message
    return replace(message, body=message.body[:PREVIEW_CHARS] + "…", data=None)


def preview(message: Message) -> dict[str, Any]:
    return {
        "id": message.id,
        "from": message.sender,
        "subject": message.subject,
        "preview": _shortened(message).body,
        "priority": message.priority.value,
        "thread_id": message.thread_id,
        "trust": message.trust.value,
    }


async def notices_of(desk: Desk) -> Notices | None:
    """What rides along on an answer, or None when it cannot be read. The call it rides on is
    done by then (mail marked read, a message sent): reported as failed for the piggyback, a
    model would send again, or never see the mail it was just handed. A remote desk reads it
    with a request of its own, which fails alone when the service stops between the two."""
    try:
        return await desk.notices()
    except AgentpostError as err:
        log.warning("the unread count could not be read: %s", err)
        return None


def answer(
    structured: dict[str, Any],
    summary: str,
    notices: Notices | None,
    messages: Sequence[Message] = (),
) -> ToolOutput:
    """One tool answer: `summary`, then framed `messages`, then what rides along (when it
    could be read: else the answer says the count is unknown)."""
    out = dict(structured)
    lines = [frame_messages(messages, title=summary)] if messages else [summary]
    if notices is None:
        lines.append("[agentpost] unread: unknown (the post office did not answer)")
        return ToolOutput(text="\n\n".join(lines), structured=out)
    out["unread"] = notices.unread
    # Urgent mail this answer shows in full (an `inbox`, a `thread`) is told by it: previewed
    # as well, it came twice, the second time saying that `inbox` reads it.
    shown = {m.id for m in messages}
    urgent = [m for m in notices.urgent if m.id not in shown]
    if urgent:
        out["urgent"] = [preview(m) for m in urgent]
        lines.append(
            frame_messages(
                [_shortened(m) for m in urgent],
                title=f"Urgent mail arrived ({len(urgent)}); `inbox` reads it in full:",
            )
        )
    lines.append(f"[agentpost] unread: {notices.unread}")
    return ToolOutput(text="\n\n".join(lines), structured=out)


def messages_json(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [m.to_dict() for m in messages]
