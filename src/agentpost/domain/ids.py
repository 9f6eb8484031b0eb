"""Identifiers that sort by creation time, so a listing by id is a listing by age."""

from __future__ import annotations

import secrets
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case


def _b32(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def sortable_id(prefix: str, *, now: float | None = None) -> str:
    """`prefix_` + 10 chars of milliseconds + 16 random chars (a ULID in lower case)."""
    ms = int((time.time() if now is None else now) * 1000)
    return f"{prefix}_{_b32(ms, 10)}{_b32(secrets.randbits(80), 16)}"


def message_id(now: float | None = None) -> str:
    return sortable_id("m", now=now)


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
