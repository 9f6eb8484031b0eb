"""The files git tracks in a worktree of this host: what decides whether two globs overlap.

Kept out of the domain (it runs git) and out of the store's transactions (it may take a while in
a large repository): a reservation asks before it writes (again, should another agent's glob
arrive meanwhile: services.reservations), and gives up after a timeout.
"""

from __future__ import annotations

from pathlib import Path

import anyio.to_thread

from agentpost.services.local_identity import run_git, this_host

LS_FILES_TIMEOUT_S = 5.0
MAX_FILES = 500_000
"""Beyond this the list is cut: two globs are then compared by their text alone."""


def local_worktree(host: str | None, worktree: str | None) -> str | None:
    """The worktree when it is a folder of this host (a local session's), else None."""
    if host != this_host() or not worktree:
        return None
    return worktree if Path(worktree).is_dir() else None


def _ls_files(worktree: str) -> list[str]:
    done = run_git(Path(worktree), "ls-files", "-z", timeout=LS_FILES_TIMEOUT_S)
    if done is None or done.returncode != 0:
        return []
    listed = [f for f in done.stdout.split("\0") if f]
    return listed if len(listed) <= MAX_FILES else []


async def tracked_files(worktree: str) -> list[str]:
    """`git ls-files` of the worktree; nothing when git cannot tell in time."""
    return await anyio.to_thread.run_sync(_ls_files, worktree)
