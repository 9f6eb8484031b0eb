"""A loop that retries forever names each failure once, not at every round."""

from __future__ import annotations

import logging

import pytest

from agentpost.retries import QUIET_S, RetryLog
from backends import FakeClock

log = logging.getLogger("agentpost.test_retries")


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_same_failure_again_is_told_once(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    retries = RetryLog(log, clock)
    with caplog.at_level(logging.DEBUG, logger=log.name):
        for _ in range(5):
            retries.failed("heartbeat", RuntimeError("the database is gone"))
            clock.advance(1)
    assert warnings(caplog) == ["heartbeat failed, will retry: the database is gone"]
    assert len(caplog.records) == 5  # the others at debug


def test_another_failure_or_another_loop_is_told_too(caplog: pytest.LogCaptureFixture) -> None:
    retries = RetryLog(log, FakeClock())
    with caplog.at_level(logging.WARNING, logger=log.name):
        retries.failed("heartbeat", RuntimeError("busy"))
        retries.failed("heartbeat", RuntimeError("gone"))
        retries.failed("sweep", RuntimeError("gone"))
        retries.failed("heartbeat", RuntimeError("busy"))
    assert warnings(caplog) == [
        "heartbeat failed, will retry: busy",
        "heartbeat failed, will retry: gone",
        "sweep failed, will retry: gone",
    ]


def test_a_failure_that_lasts_is_told_again_after_the_quiet_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    retries = RetryLog(log, clock)
    with caplog.at_level(logging.WARNING, logger=log.name):
        retries.failed("heartbeat", RuntimeError("gone"))
        clock.advance(QUIET_S - 1)
        retries.failed("heartbeat", RuntimeError("gone"))
        clock.advance(1)
        retries.failed("heartbeat", RuntimeError("gone"))
    assert len(warnings(caplog)) == 2


def test_failures_with_ever_new_messages_are_remembered_within_bounds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Messages may hold ids: the oldest are forgotten (and told again), the memory stays small."""
    retries = RetryLog(log, FakeClock())
    with caplog.at_level(logging.WARNING, logger=log.name):
        for n in range(10_000):
            retries.failed("webhook dispatcher", RuntimeError(f"delivery {n}"))
        retries.failed("webhook dispatcher", RuntimeError("delivery 9999"))
        retries.failed("webhook dispatcher", RuntimeError("delivery 0"))
    assert len(warnings(caplog)) == 10_001
    assert warnings(caplog)[-1].endswith("delivery 0")


def test_a_loop_that_recovered_and_fails_again_warns_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Quiet is for a failure that lasts: once its loop has worked again, the same failure
    is news, however soon it comes back."""
    clock = FakeClock()
    retries = RetryLog(log, clock)
    with caplog.at_level(logging.INFO, logger=log.name):
        retries.failed("heartbeat", RuntimeError("gone"))
        retries.failed("sweep", RuntimeError("gone"))
        clock.advance(5)
        retries.recovered("heartbeat")
        retries.recovered("heartbeat")  # said once
        clock.advance(5)
        retries.failed("heartbeat", RuntimeError("gone"))
        retries.failed("sweep", RuntimeError("gone"))  # still the same failure: quiet
    told = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert told == [
        ("WARNING", "heartbeat failed, will retry: gone"),
        ("WARNING", "sweep failed, will retry: gone"),
        ("INFO", "heartbeat works again"),
        ("WARNING", "heartbeat failed, will retry: gone"),
    ]
