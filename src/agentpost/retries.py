"""What background loops that retry forever say about their failures: each failure once.

The heartbeat, the news watch, the sweeper, standing for leader, the webhook dispatcher: while
a database is down, or the SQLite file was deleted under the process, each fails the same way
at every round, some every second. One warning per failure says what is wrong; the same
failure again within `QUIET_S` is logged at debug only, so a log stays readable and a problem
that lasts is still named now and then. A loop that works again says so (`recovered`): the
failure is then forgotten, and warned of again if it comes back. Standard library only, so
every layer may use it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

QUIET_S: Final = 600.0
"""How long the same failure of the same loop is told at debug only."""
_REMEMBERED: Final = 64
"""Failures remembered per log: messages may hold ids, so the memory is bounded."""


class RetryLog:
    """Tells a retried failure as a warning once per `QUIET_S`, at debug in between."""

    def __init__(self, log: logging.Logger, clock: Callable[[], float] = time.monotonic) -> None:
        self._log = log
        self._clock = clock
        self._told: dict[tuple[str, str], float] = {}

    def failed(self, what: str, error: BaseException) -> None:
        """`what` (a loop's round: "heartbeat") failed with `error` and will be tried again."""
        key = (what, str(error))
        now = self._clock()
        told = self._told.pop(key, None)
        if told is not None and now - told < QUIET_S:
            self._told[key] = told
            self._log.debug("%s failed again, will retry: %s", what, error)
            return
        self._told[key] = now
        while len(self._told) > _REMEMBERED:
            del self._told[next(iter(self._told))]
        self._log.warning("%s failed, will retry: %s", what, error)

    def recovered(self, what: str) -> None:
        """A round of `what` has worked: its failures are over, and told again should they
        come back, however soon. Cheap when nothing failed: loops call it every round."""
        if not self._told:
            return
        over = [key for key in self._told if key[0] == what]
        for key in over:
            del self._told[key]
        if over:
            self._log.info("%s works again", what)
