"""Who a local session is, read from where it runs: git context, host, pid.

The project is the main worktree's folder (from git's common dir), so every worktree of one
repository shares it; the derived agent name is `<project>-<branch>`, readable and stable across
restarts, so a restarted session finds its unread mail.
"""

from __future__ import annotations

import os
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.to_thread

from agentpost.domain.names import slugify


@dataclass(frozen=True, slots=True)
class LocalContext:
    host: str
    pid: int
    project: str
    worktree: str
    branch: str | None
    head: str | None = None
    """The worktree's HEAD file, which names its branch: it changes with every checkout."""
    folder: str | None = None
    """The worktree's folder as the file system names it, where git is asked (`worktree` is
    the same as text, an undecodable byte shown as U+FFFD: no path to a folder then)."""

    @property
    def derived_name(self) -> str:
        return slugify(f"{self.project}-{self.branch}" if self.branch else self.project)


GIT_TIMEOUT_S = 5.0


def run_git(
    cwd: Path | None, *args: str, timeout: float = GIT_TIMEOUT_S
) -> subprocess.CompletedProcess[str] | None:
    """`git ARGS` in `cwd`, its output as text (bytes that are not UTF-8 kept as surrogate
    escapes, so any path survives); None when git could not run or did not answer in time.
    The one way agentpost runs git: each caller decides what a failure means to it."""
    try:
        return subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            errors="surrogateescape",
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None


def _git(cwd: Path, *args: str) -> str | None:
    done = run_git(cwd, *args)
    return done.stdout.strip() if done is not None and done.returncode == 0 else None


def detect(cwd: Path | None = None, *, project_override: str | None = None) -> LocalContext:
    cwd = (cwd or Path.cwd()).resolve()
    out = _git(
        cwd,
        "rev-parse",
        "--path-format=absolute",
        "--git-common-dir",
        "--show-toplevel",
        "--git-dir",
    )
    head_file: str | None = None
    if out and len(out.splitlines()) == 3:
        common_dir, toplevel, git_dir = (Path(line) for line in out.splitlines())
        # `.git`, or a bare repository hidden in the project's folder (`shop/.bare`, a common
        # layout for worktrees): the folder names it. Else a bare `shop.git` does.
        main = common_dir.parent if common_dir.name.startswith(".") else common_dir
        project = main.name.removesuffix(".git")
        head_file = str(git_dir / "HEAD")
        branch = checked_out(cwd)
        folder = str(toplevel)
    else:
        project, branch, folder = cwd.name, None, str(cwd)
    return LocalContext(
        host=socket.gethostname(),
        pid=os.getpid(),
        project=slugify(project_override or project),
        worktree=_shown(folder),
        branch=branch,
        head=head_file,
        folder=folder,
    )


def checked_out(cwd: Path) -> str | None:
    """The branch checked out in the worktree at `cwd`; `detached-<commit>` on a detached HEAD."""
    branch = _git(cwd, "symbolic-ref", "--quiet", "--short", "HEAD")
    if branch is None:
        head = _git(cwd, "rev-parse", "--short", "HEAD")
        branch = f"detached-{head}" if head else None
    return None if branch is None else _shown(branch)


def _shown(name: str) -> str:
    """A name git or the file system gave in bytes, as Unicode text the store keeps and an
    answer can carry: a byte that is not UTF-8 becomes U+FFFD."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


class BranchWatch:
    """The branch a local session's worktree has checked out now: a `git checkout` there moves
    it. Git is asked only when the worktree's HEAD file changed, so a look while nothing moved
    costs one read of a small file."""

    def __init__(self, context: LocalContext) -> None:
        self._worktree = Path(context.folder or context.worktree)
        self._head = None if context.head is None else Path(context.head)
        self._seen: tuple[int, int, bytes] | None = None  # git is asked on the first look
        self.branch = context.branch

    def _stat(self) -> tuple[int, int, bytes] | None:
        assert self._head is not None
        try:
            found = self._head.stat()
            return found.st_mtime_ns, found.st_ino, self._head.read_bytes()
        except OSError:
            return None

    async def now(self) -> str | None:
        """The branch checked out now (the last one known while git cannot say)."""
        if self._head is None:
            return self.branch  # not a git worktree: nothing to move
        seen = await anyio.to_thread.run_sync(self._stat)
        if seen is None or seen == self._seen:
            return self.branch
        self._seen = seen  # read before git is asked: a checkout meanwhile is seen next time
        branch = await anyio.to_thread.run_sync(checked_out, self._worktree)
        if branch is not None:
            self.branch = branch
        return self.branch


def pid_alive(pid: int, start: str | None = None) -> bool:
    """True while the process runs; a zombie (killed, not yet reaped) counts as gone. Given
    the `process_start` its session recorded, only while `pid` is still that process: one the
    system handed the pid to since is not the session's. Without /proc only the pid is asked."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process runs there: /proc still tells whose it is
    # Here, not at the top: `agentpost mcp --url` reads its worktree through this module and
    # loads nothing of the store (its start is a client's).
    from agentpost.store import notes

    return notes.process_runs(pid, start) is not False


def this_host() -> str:
    return socket.gethostname()


def origin_head(worktree: str) -> str | None:
    """The branch origin's HEAD names (`main` for `origin/main`), if this host has the worktree."""
    path = Path(worktree)
    if not path.is_dir():
        return None
    ref = _git(path, "symbolic-ref", "--quiet", "--short", "refs/remotes/origin/HEAD")
    return ref.split("/", 1)[1] if ref and "/" in ref else None


PID_POLL_S = 0.2
"""How often a process is looked at where the kernel cannot say when it exits (no pidfd)."""


async def process_exit(pid: int, start: str | None = None) -> None:
    """Return once process `pid` of this host has exited (at once if it is already gone, or
    its pid is another process's than the one that started at `start`, as `pid_alive`).

    Linux tells through a pidfd, which becomes readable when the process exits: no polling,
    and a dead leader is noticed within milliseconds. Elsewhere the process is looked at
    every `PID_POLL_S`.
    """
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    if fd is None:
        while pid_alive(pid, start):  # noqa: ASYNC110 (nothing to wait on but the clock)
            await anyio.sleep(PID_POLL_S)
        return
    try:
        # Asked once the pidfd holds the process: its pid cannot pass to another meanwhile.
        if pid_alive(pid, start):
            await anyio.wait_readable(fd)
    finally:
        os.close(fd)
