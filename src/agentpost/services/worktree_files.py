"""The files git tracks in a worktree of this host: what decides whether two globs overlap.

Kept out of the domain (it runs git) and out of the store's transactions (it may take a while in
a large repository): a reservation asks once, before it writes, and gives up after a timeout.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import anyio.to_thread

from agentpost.services.local_identity import this_host

LS_FILES_TIMEOUT_S = 5.0
MAX_FILES = 500_000
"""Beyond this the list is cut: two globs are then compared by their text alone."""


def local_worktree(host: str | None, worktree: str | None) -> str | None:
    """The worktree when it is a folder of this host (a local session's), else None."""
    if host != this_host() or not worktree:
        return None
    return worktree if Path(worktree).is_dir() else None


def _ls_files(worktree: str) -> list[str]:
    try:
        done = subprocess.run(
            ["git", "-C", worktree, "ls-files", "-z"],
            capture_output=True,
            timeout=LS_FILES_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if done.returncode != 0:
        return []
    files = done.stdout.decode("utf-8", "surrogateescape").split("\0")
    listed = [f for f in files if f]
    return listed if len(listed) <= MAX_FILES else []


async def tracked_files(worktree: str) -> list[str]:
    """`git ls-files` of the worktree; nothing when git cannot tell in time."""
    return await anyio.to_thread.run_sync(_ls_files, worktree)
