"""The default branch that may lead is origin's HEAD as git names it now, not at start-up."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentpost.domain.errors import ErrorCode
from agentpost.domain.models import Caller
from agentpost.services import PostOffice, leadership
from agentpost.services.local_identity import detect
from backends import FakeClock, refused_without_change
from git_repo import git, make_repo

pytestmark = pytest.mark.anyio


async def test_a_change_of_origins_default_branch_is_seen_within_its_lifetime(
    office: PostOffice, clock: FakeClock, tmp_path: Path
) -> None:
    """origin's HEAD was looked up once per worktree for as long as the process ran: once a
    project moved from `trunk` to `main`, `main` could not lead until the service restarted.
    It is taken as it was for `ORIGIN_HEAD_FOR_S` (git is a process per claim), then asked
    again."""
    origin = make_repo(tmp_path / "origin", branch="trunk")
    git(origin, "branch", "main")
    git(tmp_path, "clone", "-q", str(origin), "shop")
    clone = tmp_path / "shop"
    git(clone, "checkout", "-q", "main")
    opened = await office.presence.open_local_session(detect(clone), name="on-main")
    on_main = Caller(opened.agent, opened.id)
    await refused_without_change(office, ErrorCode.FORBIDDEN, office.leadership.claim(on_main))

    git(origin, "symbolic-ref", "HEAD", "refs/heads/main")
    git(clone, "remote", "set-head", "origin", "--auto")
    clock.advance(leadership.ORIGIN_HEAD_FOR_S - 1)
    await office.presence.heartbeat(opened.id)
    await refused_without_change(office, ErrorCode.FORBIDDEN, office.leadership.claim(on_main))
    clock.advance(1)
    await office.presence.heartbeat(opened.id)
    seat = await office.leadership.claim(on_main)
    assert (seat.leader, seat.branch) == ("on-main", "main")
