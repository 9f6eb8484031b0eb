"""Names of agents and channels: one grammar, a few reserved words, and slugs from free text."""

from __future__ import annotations

import hashlib
import re
import unicodedata

from agentpost.domain.errors import invalid
from agentpost.domain.limits import quoted

NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
_NAME = re.compile(NAME_PATTERN)

OWNER = "owner"
SYSTEM = "system"
POST_OFFICE = "agentpost"
RESERVED = frozenset({OWNER, SYSTEM, POST_OFFICE})

GENERAL = "general"
"""The channel every enabled agent belongs to."""


def is_valid_name(name: str) -> bool:
    return bool(_NAME.fullmatch(name))


def check_name(name: str, what: str = "agent name") -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise invalid(
            f"{what} {quoted(name)!r} must match {NAME_PATTERN}"
            " (lower case, digits, '.', '_', '-')",
            name=quoted(name),
        )
    return name


def check_channel(channel: str) -> str:
    """Accept `#name` or `name`; return the bare name."""
    bare = channel[1:] if isinstance(channel, str) and channel.startswith("#") else channel
    return check_name(bare, "channel")


def channel_tag(channel: str) -> str:
    """`#name`, as answers show a channel, whether the caller wrote `name` or `#name`."""
    return "#" + channel.removeprefix("#")


_LATIN_BY_HAND = str.maketrans(
    {"ø": "o", "æ": "ae", "œ": "oe", "ł": "l", "đ": "d", "ð": "d", "þ": "th", "ı": "i"}
    | {"ħ": "h", "ŧ": "t", "ŋ": "n", "ĸ": "k", "ŀ": "l", "ſ": "s"}
)
"""Latin letters that taking accents off does not reach (they have no decomposition)."""


def slugify(text: str, *, max_len: int = 64) -> str:
    """A readable name from free text (a folder, a branch): lower case, accents dropped
    (`Ünïcode Straße` is `unicode-strasse`), runs of other characters to '-'.

    Text in a script with no Latin spelling (`日本語`) is spelled in punycode instead, so two
    such folders stay two projects rather than all becoming the same empty name; and a name
    cut to `max_len` ends in a few characters of its text's hash, so two long names that begin
    alike stay two names."""
    folded = text.casefold().translate(_LATIN_BY_HAND)
    latin = _latin(folded)
    if any(ch.isalnum() and not _latin(ch) for ch in folded):
        latin = "".join(_latin(ch) or ch for ch in folded).encode("punycode").decode("ascii")
    slug = re.sub(r"[^a-z0-9._-]+", "-", latin).strip("-._")
    slug = re.sub(r"-{2,}", "-", slug)
    if len(slug) > max_len:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:6]
        slug = f"{slug[: max_len - 7].rstrip('-._')}-{digest}"
    return slug or "agent"


def _latin(text: str) -> str:
    """`text` in ASCII letters, as far as taking accents off gets it there."""
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
