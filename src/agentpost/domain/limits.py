"""Size and shape rules for what an agent sends, checked before anything is stored."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentpost.domain.errors import AgentpostError, ErrorCode, invalid

MAX_RECIPIENTS = 100
MAX_LIMIT = 500
"""The largest page any listing returns."""
MAX_QUERY_CHARS = 500
"""The longest full-text search query."""
MAX_DIRECTORY_QUERY_CHARS = 200
MAX_DIRECTORY_WORDS = 10
MAX_DIRECTORY_WORD = 100
"""A directory search: each word is matched against every agent's profile."""
IDEMPOTENCY_S = 86_400.0
"""How long the answer to a request made under an idempotency key is kept for a retry."""
QUOTED_CHARS = 40
"""The most of a refused value a refusal quotes: enough to tell which value it was, however
much was sent."""
MAX_MAIL_TTL_S = 365 * 86_400.0
"""The longest a message may wait to be read before it expires (`ttl_s`, `default_ttl_s`): a
year, far past any use; mail meant to last has none."""
MAX_DATA_DEPTH = 64
"""How deeply `data` may nest: far beyond any real document, and far below the depth at
which a JSON serializer on the way out (pydantic's, in every face) would refuse it."""


@dataclass(frozen=True, slots=True)
class Limits:
    max_subject_chars: int = 200
    max_body_bytes: int = 32768
    max_data_bytes: int = 65536
    max_wait_s: float = 300
    max_unacked: int = 1000
    send_rate_per_minute: int = 60


def too_large(what: str, size: int, limit: int, unit: str) -> AgentpostError:
    return AgentpostError(
        ErrorCode.TOO_LARGE,
        f"{what} is {size} {unit}, over the limit of {limit} {unit}",
        details={"limit": limit, "size": size},
    )


def quoted(value: object) -> str:
    """A refused value as a refusal quotes it, in its message and its details: at most
    `QUOTED_CHARS` of it, cut with `…`. Quoted whole, a megabyte sent as a tag or a name came
    back in the answer twice, into a model's context and the caller's logs."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= QUOTED_CHARS else text[:QUOTED_CHARS] + "…"


def check_cap(kept: int, limit: int, refusal: str, *, adding: int = 1) -> None:
    """Refuse (`conflict`, `details.limit`) `adding` more of a thing an agent keeps when it
    would then keep more than `limit`: every cap on things kept (channels joined, webhooks,
    live reservations, open tasks) refuses alike. `refusal` says the cap and how to make room."""
    if kept + adding > limit:
        raise AgentpostError(ErrorCode.CONFLICT, refusal, details={"limit": limit})


def check_text(text: str, what: str) -> str:
    """Free text must be storable everywhere: PostgreSQL holds no NUL character, and neither
    database nor any JSON answer holds half of a surrogate pair (which a JSON `\\ud800` or
    undecodable bytes on a command line make)."""
    if "\x00" in text:
        raise invalid(f"{what} may not contain NUL characters")
    if not text.isascii():
        utf8_size(text, what)
    return text


MAX_ID_CHARS = 64
"""The longest id an argument may name: the ids agentpost makes are far shorter (a message's is
28 characters), and a refusal that named a longer one would hand it back whole."""


def check_id(value: object, what: str, kind: str = "message") -> str:
    """The id of a message, a task or a request that an argument names: blank names none, so
    it is a bad argument rather than one that is not there (as a blank thread id is)."""
    if not isinstance(value, str) or not value.strip():
        raise invalid(f"{what} must be a {kind} id")
    if len(value) > MAX_ID_CHARS:  # no id is that long: said without quoting it back
        raise invalid(f"{what} must be a {kind} id, at most {MAX_ID_CHARS} characters")
    return value


def never_stored(text: str) -> bool:
    """Whether no row can hold `text` (a NUL character, refused on the way in): a lookup by it
    finds nothing, without asking PostgreSQL, which refuses such text even in a lookup."""
    return isinstance(text, str) and "\x00" in text


def utf8_size(text: str, what: str) -> int:
    """The bytes `text` takes in UTF-8; refused when it is not Unicode text at all."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise not_unicode(what) from None


def not_unicode(what: str) -> AgentpostError:
    """The refusal of text holding half of a surrogate pair, wherever it is found."""
    return invalid(f"{what} must be Unicode text: it holds an unpaired surrogate")


def holds_half_pair(value: Any) -> bool:
    """Whether a string anywhere in `value` (a JSON value: its keys too) holds half of a
    surrogate pair, which no database, encoder or answer can hold. Iterative, so no nesting
    meets Python's recursion limit."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return False


def is_one_line(text: str) -> bool:
    """No line break of any kind: `\r`, `\u2028` and the others a reader splits on too."""
    return text == "" or text.splitlines() == [text]


def as_one_line(text: str) -> str:
    """Text stored before a rule grew stricter, made fit to be a subject again: each line
    break a space."""
    return " ".join(text.splitlines())


def check_subject(subject: str, limits: Limits, what: str = "subject") -> str:
    """`what`: the argument a refusal names (a task's `title` is its message's subject)."""
    check_text(subject, what)
    if len(subject) > limits.max_subject_chars:
        raise too_large(what, len(subject), limits.max_subject_chars, "characters")
    if not is_one_line(subject):
        raise invalid(f"{what} must be one line")
    return subject


def check_body(body: str, limits: Limits, *, envelope: bool = False, what: str = "body") -> str:
    """An `envelope`'s body is the post office's words around text checked already against
    its own limit (a task's note): its size is theirs plus the envelope's. `what`: the
    argument a refusal names (a request's `question`, a response's `answer`)."""
    if "\x00" in body:
        raise invalid(f"{what} may not contain NUL characters")
    size = utf8_size(body, what)
    if size > limits.max_body_bytes and not envelope:
        raise too_large(what, size, limits.max_body_bytes, "bytes")
    return body


def encode_data(
    data: Any, limits: Limits, *, envelope: bool = False, what: str = "data"
) -> str | None:
    """The JSON text stored for `data`, or None when there is none; a refusal names it `what`
    (the field the caller sent). An `envelope` is the post office's own around values checked
    already, each against its own limit: it may nest one level deeper, and its size is theirs
    plus the envelope's."""
    if data is None:
        return None
    check_depth(data, MAX_DATA_DEPTH + 1 if envelope else MAX_DATA_DEPTH, what)
    try:
        text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise invalid(f"{what} must be JSON: {exc}") from None
    size = utf8_size(text, what)
    if size > limits.max_data_bytes and not envelope:
        raise too_large(what, size, limits.max_data_bytes, "bytes")
    return text


def check_depth(value: Any, limit: int, what: str) -> None:
    """Refuse a value whose lists and objects nest deeper than `limit`, before anything walks
    it recursively (the JSON encoder, a serializer on the way out). Level by level, so a
    hostile value never meets Python's recursion limit here either."""
    level = [value]
    for depth in range(1, limit + 2):
        containers = [item for item in level if isinstance(item, dict | list | tuple)]
        if not containers:
            return
        if depth > limit:
            raise invalid(f"{what} nests deeper than {limit} levels", limit=limit)
        level = [
            child
            for container in containers
            for child in (container.values() if isinstance(container, dict) else container)
        ]


MAX_SEQ = 2**63 - 1
"""The largest position in a log (a signed 64-bit integer, as both databases store it)."""


def is_decimal(text: str) -> bool:
    """Whether `text` is a non-negative integer written in ASCII digits, as HTTP writes them.
    `str.isdigit` alone also takes "²" and other digits `int` refuses, which a header decoded
    as Latin-1 may hold."""
    return text.isascii() and text.isdigit()


def check_seq(value: int, what: str) -> int:
    """A cursor or page anchor: a position in a log, 0 or more."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEQ:
        raise invalid(f"{what} must be a position in the log: an integer from 0 to {MAX_SEQ}")
    return value


def check_limit(limit: int, *, name: str = "limit") -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise invalid(f"{name} must be an integer from 1 to {MAX_LIMIT}")
    return limit


def check_query(query: object) -> str:
    """A full-text search's words: some, and not too many to read. A word holds a letter or
    a digit: both databases index nothing else, so a query of emoji or punctuation alone
    would find nothing, however much mail held it."""
    if not isinstance(query, str):
        raise invalid("query must contain at least one word")
    if len(query) > MAX_QUERY_CHARS:
        raise too_large("the query", len(query), MAX_QUERY_CHARS, "characters")
    check_text(query, "query")
    if not any(c.isalnum() for c in query):
        raise invalid("query must contain at least one word")
    return query


def directory_words(query: object) -> list[str]:
    """A directory search's words. Text over its limit is `too_large`, as a search's query or
    a subject is; too many words, a count, `invalid_argument`, as too many ids to ack are."""
    if query is None:
        return []
    if not isinstance(query, str):
        raise invalid("query must be text")
    if len(query) > MAX_DIRECTORY_QUERY_CHARS:
        raise too_large("the query", len(query), MAX_DIRECTORY_QUERY_CHARS, "characters")
    words = query.split()
    if len(words) > MAX_DIRECTORY_WORDS:
        raise invalid(f"query takes at most {MAX_DIRECTORY_WORDS} words")
    longest = max(map(len, words), default=0)
    if longest > MAX_DIRECTORY_WORD:
        raise too_large("a word of the query", longest, MAX_DIRECTORY_WORD, "characters")
    return words


def check_ack_ids(ids: object) -> list[str]:
    """The ids one `ack` names (one id alone is a list of one), at most a page of them."""
    if isinstance(ids, str):
        ids = [ids]
    if not isinstance(ids, Sequence) or not all(isinstance(i, str) for i in ids):
        raise invalid("ids must be a list of message ids")
    if len(ids) > MAX_LIMIT:
        raise invalid(f"at most {MAX_LIMIT} ids per ack")
    return list(ids)


def check_wait_seconds(timeout_s: float) -> float:
    """How long a wait may last, as asked: 0 or more, finite. (The ceiling is the service's
    own, `check_timeout`; a client that does not know it checks this much.)"""
    if (
        isinstance(timeout_s, bool)
        or not isinstance(timeout_s, int | float)
        or not math.isfinite(timeout_s)
        or timeout_s < 0
    ):
        raise invalid("timeout_s must be a finite number of seconds, 0 or more")
    return float(timeout_s)


def check_timeout(timeout_s: float, limits: Limits) -> float:
    """Clamp a wait to the configured ceiling; a wait is never an error once it is non-negative."""
    return min(check_wait_seconds(timeout_s), float(limits.max_wait_s))


def check_seconds(value: object, what: str, *, at_most: float) -> float:
    """A lifetime in seconds, above 0 and bounded: an unbounded one (`1e300`) would be stored
    as a time no clock reaches and no date can spell."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 < value <= at_most
    ):
        raise invalid(
            f"{what} is a number of seconds above 0 and at most {at_most:.0f}",
            **{what: quoted(repr(value)), "max": at_most},
        )
    return float(value)


def check_ttl(ttl_s: float | None) -> float | None:
    """A message's time to live, if it has one."""
    return None if ttl_s is None else check_seconds(ttl_s, "ttl_s", at_most=MAX_MAIL_TTL_S)
