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

from agentpost.domain.names import slugify


@dataclass(frozen=True, slots=True)
class LocalContext:
    host: str
    pid: int
    project: str
    worktree: str
    branch: str | None

    @property
    def derived_name(self) -> str:
        return slugify(f"{self.project}-{self.branch}" if self.branch else self.project)


def _git(cwd: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def detect(cwd: Path | None = None, *, project_override: str | None = None) -> LocalContext:
    cwd = (cwd or Path.cwd()).resolve()
    out = _git(cwd, "rev-parse", "--path-format=absolute", "--git-common-dir", "--show-toplevel")
    if out and len(out.splitlines()) == 2:
        common_dir, toplevel = (Path(line) for line in out.splitlines())
        main = common_dir.parent if common_dir.name == ".git" else common_dir
        project = main.name.removesuffix(".git")
        branch = _git(cwd, "symbolic-ref", "--quiet", "--short", "HEAD")
        if branch is None:
            head = _git(cwd, "rev-parse", "--short", "HEAD")
            branch = f"detached-{head}" if head else None
        worktree = str(toplevel)
    else:
        project, branch, worktree = cwd.name, None, str(cwd)
    return LocalContext(
        host=socket.gethostname(),
        pid=os.getpid(),
        project=slugify(project_override or project),
        worktree=worktree,
        branch=branch,
    )


def pid_alive(pid: int) -> bool:
    """True while the process runs; a zombie (killed, not yet reaped) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def this_host() -> str:
    return socket.gethostname()
