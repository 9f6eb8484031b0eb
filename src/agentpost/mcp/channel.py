"""Claude Code channels: each new message pushed into a running session as it is stored.

A session that declares the experimental capability `claude/channel` may send
`notifications/claude/channel` with `{content, meta}`; Claude Code (started with
`--dangerously-load-development-channels server:agentpost`) shows it to the model as
`<channel source="agentpost" kind="…" …>content</channel>`. The content is the message in the
same nonce-delimited frame a tool answer uses, so its words stay a colleague's. `meta` holds
string values under identifier keys (Claude Code drops others); `channel` is left out for mail
that came to the agent directly, as the frame leaves it out.

Push is a peek: it never changes a delivery's state, so a notification the client dropped (or
never loaded) loses nothing, and `inbox` still shows the mail as unread.
"""

from __future__ import annotations

from typing import Final

from agentpost.domain.framing import frame_messages
from agentpost.domain.models import Message

CAPABILITY: Final = "claude/channel"
METHOD: Final = "notifications/claude/channel"
BATCH: Final = 100
"""Messages read per look; a burst larger than this is told over several looks."""


def channel_params(message: Message) -> dict[str, object]:
    """The notification's params: the framed message and its identifier-keyed facts."""
    title = f"New mail from {message.sender} (agentpost; `inbox` marks it read, `ack` when done):"
    meta = {
        "kind": message.kind.value,
        "from": message.sender,
        "message_id": message.id,
        "thread_id": message.thread_id,
        "priority": message.priority.value,
    }
    if message.channel:
        meta["channel"] = f"#{message.channel}"
    return {"content": frame_messages([message], title=title), "meta": meta}
