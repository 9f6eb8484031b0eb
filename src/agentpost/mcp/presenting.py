"""Tool answers as a model reads them: framed messages, the unread count, urgent previews.

Structured content keeps every raw field; the text is what a model is shown, with every
message inside a fresh frame (domain.framing) so its words stay a colleague's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from agentpost.domain.framing import frame_messages
from agentpost.domain.models import Message
from agentpost.mcp.adapter import ToolOutput
from agentpost.services import Notices

PREVIEW_CHARS = 200


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


def answer(
    structured: dict[str, Any],
    summary: str,
    notices: Notices,
    messages: Sequence[Message] = (),
) -> ToolOutput:
    """One tool answer: `summary`, then framed `messages`, then what rides along."""
    out = dict(structured)
    out["unread"] = notices.unread
    lines = [frame_messages(messages, title=summary)] if messages else [summary]
    if notices.urgent:
        out["urgent"] = [preview(m) for m in notices.urgent]
        lines.append(
            frame_messages(
                [_shortened(m) for m in notices.urgent],
                title=f"Urgent mail arrived ({len(notices.urgent)}); `inbox` reads it in full:",
            )
        )
    lines.append(f"[agentpost] unread: {notices.unread}")
    return ToolOutput(text="\n\n".join(lines), structured=out)


def messages_json(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [m.to_dict() for m in messages]
