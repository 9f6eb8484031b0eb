"""Real git repositories for tests: made with the `git` command, as a user's would be."""

from __future__ import annotations

import subprocess
from pathlib import Path

GIT = ["git", "-c", "user.name=T", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run([*GIT, *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout


def make_repo(path: Path, *, branch: str = "main") -> Path:
    """A repository at `path` on `branch` with one commit; its project is the folder's name."""
    path.mkdir(parents=True)
    git(path, "init", "-b", branch)
    (path / "README.md").write_text("hello\n")
    git(path, "add", "README.md")
    git(path, "commit", "-m", "first")
    return path.resolve()
