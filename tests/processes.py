"""Real processes standing in for a local session's: a `sleep` that runs until the test ends.

A pid the system handed on to another process cannot be made on demand (the kernel picks pids),
so a test makes the row look like it: the session's recorded start is set to another process's
(`handed_on`), while its pid still names a running process, as after a reuse.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from agentpost.store import notes


@contextmanager
def sleeping() -> Iterator[subprocess.Popen[bytes]]:
    """A process of this test's that runs (and stays this test's child) until the block ends."""
    proc = subprocess.Popen(["sleep", "600"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def another_start() -> str:
    """A start no process but this test's own has: what a row records whose pid was handed on."""
    start = notes.process_start(os.getpid())
    assert start is not None, "these tests need /proc"
    return start
