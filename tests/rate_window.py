"""Send rates count per clock minute (a fixed window, in the store): a test whose sends must
all fall in one window starts early enough in one."""

from __future__ import annotations

import time

import anyio

WINDOW_S = 60


async def inside_one_rate_window(needed_s: float) -> None:
    """Return once at least `needed_s` seconds are left in the current window (waiting for the
    next one to begin, if need be)."""
    left = WINDOW_S - time.time() % WINDOW_S
    if left < needed_s:
        await anyio.sleep(left + 0.05)
