"""Identifiers that sort by creation time, so a listing by id is a listing by age."""

from __future__ import annotations

import re
import secrets
import threading
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case


_PAIRS = [high + low for high in _ALPHABET for low in _ALPHABET]
"""Every 10 bits as their two digits: an id costs half the steps of one digit at a time."""


def _b32(value: int, length: int) -> str:
    """The lowest `length` (even) base32 digits of `value`, most significant first."""
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in range(5 * length - 10, -1, -10)])


_RANDOM_BITS = 80
_last = (-1, 0)  # the millisecond and random part of the last id made in this process
_last_lock = threading.Lock()


def sortable_id(prefix: str, *, now: float | None = None) -> str:
    """`prefix_` + 10 chars of milliseconds + 16 random chars (a ULID in lower case).

    Ids made in the same millisecond by this process follow one another (the random part of
    the next is the last one's plus one, as ULID's monotonic mode has it), so several made
    in one call (the reservations of a batch of paths) list in the order they were made."""
    global _last
    ms = int((time.time() if now is None else now) * 1000)
    with _last_lock:
        last_ms, last_random = _last
        if ms == last_ms and last_random + 1 < 1 << _RANDOM_BITS:
            random = last_random + 1
        else:
            random = secrets.randbits(_RANDOM_BITS)
        _last = (ms, random)
    return f"{prefix}_{_b32(ms << _RANDOM_BITS | random, 26)}"  # 10 digits of time, 16 random


def message_id(now: float | None = None) -> str:
    return sortable_id("m", now=now)


_MESSAGE_ID = re.compile(f"m_[{_ALPHABET}]{{26}}")


def is_message_id(text: str) -> bool:
    """Whether `text` has the shape of a message's id (it may name none)."""
    return _MESSAGE_ID.fullmatch(text) is not None


def session_id(now: float | None = None) -> str:
    return sortable_id("s", now=now)


def key_id(now: float | None = None) -> str:
    return sortable_id("k", now=now)


def webhook_id(now: float | None = None) -> str:
    return sortable_id("wh", now=now)


def delivery_id(now: float | None = None) -> str:
    return sortable_id("whd", now=now)


def task_id(now: float | None = None) -> str:
    return sortable_id("t", now=now)


def reservation_id(now: float | None = None) -> str:
    return sortable_id("r", now=now)
