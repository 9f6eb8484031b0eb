"""Where a local session runs: project and branch from git, and whether a pid still lives."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import anyio
import pytest

from agentpost.services.local_identity import (
    BranchWatch,
    detect,
    pid_alive,
    process_exit,
    this_host,
)
from agentpost.store import notes
from processes import another_start, sleeping

GIT_ENV = {
    **os.environ,
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_SYSTEM": os.devnull,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
}


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"):
        monkeypatch.setenv(name, os.devnull)
    path = tmp_path / "My Shop"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "commit", "-q", "--allow-empty", "-m", "start")
    return path


def test_in_a_repository_the_project_is_its_folder_and_the_branch_is_checked_out(
    repo: Path,
) -> None:
    (repo / "src").mkdir()
    context = detect(repo / "src")
    assert (context.project, context.branch, context.worktree) == ("my-shop", "main", str(repo))
    assert context.derived_name == "my-shop-main"
    assert context.host == this_host()
    assert context.pid == os.getpid()


def test_every_worktree_of_a_repository_shares_its_project(repo: Path) -> None:
    worktree = repo.parent / "shop-feature"
    git(repo, "worktree", "add", "-q", "-b", "feature/Login", str(worktree))
    context = detect(worktree)
    assert (context.project, context.branch) == ("my-shop", "feature/Login")
    assert context.worktree == str(worktree)
    assert context.derived_name == "my-shop-feature-login"


@pytest.mark.parametrize(
    ("bare", "pointer", "project"),
    [("shop/.bare", "shop/.git", "shop"), ("shop.git", None, "shop")],
    ids=["hidden-in-the-project-folder", "named-dot-git"],
)
def test_worktrees_of_a_bare_repository_take_its_projects_name(
    repo: Path, tmp_path: Path, bare: str, pointer: str | None, project: str
) -> None:
    """`git clone --bare URL shop/.bare` with `shop/.git` pointing at it: every such repository
    was project `bare`, so unrelated repositories shared one leader, reservations and channel."""
    git(tmp_path, "clone", "-q", "--bare", str(repo), bare)
    if pointer is not None:
        (tmp_path / pointer).write_text("gitdir: ./.bare\n")
    top = tmp_path / "shop" if pointer is not None else tmp_path / bare
    git(top, "worktree", "add", "-q", str(tmp_path / "shop-main"), "main")
    git(top, "worktree", "add", "-q", "-b", "fix", str(tmp_path / "shop-fix"))
    main, fix = detect(tmp_path / "shop-main"), detect(tmp_path / "shop-fix")
    assert (main.project, main.branch) == (project, "main")
    assert (fix.project, fix.branch) == (project, "fix")


def test_a_detached_head_is_named_after_its_commit(repo: Path) -> None:
    git(repo, "checkout", "-q", "--detach")
    context = detect(repo)
    assert (context.branch or "").startswith("detached-")


def test_outside_git_the_folder_names_the_project(tmp_path: Path) -> None:
    folder = tmp_path / "Notes Folder"
    folder.mkdir()
    context = detect(folder)
    assert (context.project, context.branch, context.worktree) == (
        "notes-folder",
        None,
        str(folder),
    )
    assert context.derived_name == "notes-folder"


def test_repositories_named_in_scripts_without_a_latin_spelling_are_projects_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Else every such repository was the project `agent`: one channel, one leader seat."""
    for name in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"):
        monkeypatch.setenv(name, os.devnull)
    projects = []
    for folder in ("日本語", "中文", "Ünïcode Folder"):
        path = tmp_path / folder
        path.mkdir()
        git(path, "init", "-q", "-b", "main")
        git(path, "commit", "-q", "--allow-empty", "-m", "start")
        projects.append(detect(path).project)
    assert projects == ["wgv71a119e", "fiq228c", "unicode-folder"]


def test_a_project_override_wins_over_git(repo: Path) -> None:
    assert detect(repo, project_override="Billing API").project == "billing-api"


def test_this_process_is_alive() -> None:
    assert pid_alive(os.getpid())


def test_an_exited_process_is_dead_even_before_it_is_reaped() -> None:
    proc = subprocess.Popen(["true"])
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # exited, left a zombie
    try:
        assert not pid_alive(proc.pid)
    finally:
        proc.wait()
    assert not pid_alive(proc.pid)


def test_a_pid_another_process_holds_now_is_not_the_sessions_process() -> None:
    """A session whose process died unended leaves its pid to whoever the system gives it:
    that one runs, but it started at another time than the session recorded."""
    with sleeping() as proc:
        started = notes.process_start(proc.pid)
        assert started is not None
        assert pid_alive(proc.pid, started)
        assert not pid_alive(proc.pid, another_start())
        assert pid_alive(proc.pid)  # a row from before starts were recorded: the pid alone


def test_a_process_start_counts_ticks_in_this_boot_and_stays_while_the_process_runs() -> None:
    """Clock ticks since boot, and the boot: a process started later (or in another boot,
    whose ticks count afresh) has another."""
    with sleeping() as proc:
        start = notes.process_start(proc.pid)
        assert start is not None
        ticks, _, boot = start.partition("@")
        assert boot == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        assert int(ticks) >= int(another_start().partition("@")[0])  # this test began before
        assert notes.process_start(proc.pid) == start
    assert notes.process_start(proc.pid) is None  # reaped


@pytest.mark.anyio
async def test_waiting_for_a_process_whose_pid_another_holds_now_ends_at_once() -> None:
    """A leader's standing waits for its holder's process to exit: on a pid handed on it
    would wait for an unrelated process, however long that one runs."""
    with sleeping() as proc, anyio.fail_after(5):
        await process_exit(proc.pid, another_start())


@pytest.mark.anyio
async def test_waiting_for_the_sessions_own_process_lasts_while_it_runs() -> None:
    with sleeping() as proc:
        with anyio.move_on_after(0.3) as waited:
            await process_exit(proc.pid, notes.process_start(proc.pid))
        assert waited.cancelled_caught


@pytest.mark.anyio
async def test_a_branch_watch_follows_a_checkout_in_the_worktree(repo: Path) -> None:
    watch = BranchWatch(detect(repo))
    assert await watch.now() == "main"
    git(repo, "checkout", "-q", "-b", "fix/parser")
    assert await watch.now() == "fix/parser"
    git(repo, "checkout", "-q", "--detach")
    assert (await watch.now() or "").startswith("detached-")


@pytest.mark.anyio
async def test_outside_git_a_branch_watch_has_no_branch(tmp_path: Path) -> None:
    assert await BranchWatch(detect(tmp_path)).now() is None


@pytest.fixture
def repo_named_in_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository whose folder's name is not UTF-8."""
    for name in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"):
        monkeypatch.setenv(name, os.devnull)
    path = Path(os.fsdecode(bytes(tmp_path) + b"/shop-\xff"))
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "commit", "-q", "--allow-empty", "-m", "start")
    return path


def test_a_branch_and_a_worktree_named_in_bytes_that_are_not_utf8_come_as_text(
    repo_named_in_bytes: Path, tmp_path: Path
) -> None:
    """Git names branches and folders in any bytes; a session shows them as Unicode text (an
    undecodable byte as U+FFFD), which the store keeps: else the session could not open."""
    path = repo_named_in_bytes
    subprocess.run([b"git", b"checkout", b"-q", b"-b", b"fix-\xfe"], cwd=path, check=True)
    context = detect(path)
    assert context.branch == "fix-\ufffd"
    assert context.worktree == f"{tmp_path}/shop-\ufffd"
    assert context.derived_name == "shop-fix"


@pytest.mark.anyio
async def test_a_branch_watch_follows_a_checkout_in_a_worktree_whose_path_is_not_utf8(
    repo_named_in_bytes: Path,
) -> None:
    """The session shows the folder as text (U+FFFD for the odd byte), a path that is not
    there: git is asked in the folder itself, else it never answers and the branch sticks."""
    path = repo_named_in_bytes
    watch = BranchWatch(detect(path))
    assert await watch.now() == "main"
    git(path, "checkout", "-q", "-b", "fix/parser")
    assert await watch.now() == "fix/parser"
