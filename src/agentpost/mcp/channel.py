"""Claude Code channels: each new message pushed into a running session as it is stored.

A session that declares the experimental capability `claude/channel` may send
`notifications/claude/channel` with `{content, meta}`; Claude Code (started with
`--dangerously-load-development-channels server:agentpost`) shows it to the model as
`<channel source="agentpost" kind="…" …>content</channel>`. The content is the message in the
same nonce-delimited frame a tool answer uses, so its words stay a colleague's. `meta` holds
string values under identifier keys (Claude Code drops others); `channel` is left out for mail
that came to the agent directly, as the frame leaves it out. Claude Code writes meta values as
attributes of the `<channel>` tag, so only plain tokens (`framing.is_bare`) are sent: a value a
sender chose (a `thread_id` with quotes, `>` or a newline) is left out, never escaped, and is
still in the frame, where it is quoted.

Push is a peek: it never changes a delivery's state, so a notification the client dropped (or
never loaded) loses nothing, and `inbox` still shows the mail as unread.
"""

from __future__ import annotations

from typing import Final

from agentpost.domain.framing import frame_messages, is_bare
from agentpost.domain.models import Message

CAPABILITY: Final = "claude/channel"
METHOD: Final = "notifications/claude/channel"
BATCH: Final = 100
"""Messages read per look; a burst larger than this is told over several looks."""


def channel_params(message: Message) -> dict[str, object]:
    """The notification's params: the framed message and its identifier-keyed facts."""
    title = f"New mail from {message.sender} (agentpost; `inbox` marks it read, `ack` when done):"
    facts = {
        "kind": message.kind.value,
        "from": message.sender,
        "trust": message.trust.value,
        "message_id": message.id,
        "thread_id": message.thread_id,
        "priority": message.priority.value,
        "channel": f"#{message.channel}" if message.channel else "",
    }
    meta = {key: value for key, value in facts.items() if is_bare(value)}
    return {"content": frame_messages([message], title=title), "meta": meta}
