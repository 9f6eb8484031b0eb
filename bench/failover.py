"""Issue 4: leader failover after the holder's process is killed (≤ 1 s locally).

Three `agentpost mcp` sessions run on branch `main` of a scratch git repository, each standing
for the seat (`auto_lead`). Each round SIGKILLs the leader's server process and measures from
just before the kill to the moment the next leader's claim was stored (the `created_at` of the
announcement it posts on `#<project>`, stamped by the store's clock in the same transaction).
A fresh session then replaces the killed one, so every round starts with three.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import anyio
from anyio.abc import TaskGroup
from mcp.client.stdio import StdioServerParameters
from sqlalchemy import select

from agentpost.domain.models import Kind
from agentpost.services import PostOffice
from agentpost.store.schema import messages
from bench.common import (
    MODERN,
    Report,
    agentpost_command,
    agentpost_env,
    connect,
    environ,
    log,
    ms,
    pct,
    scratch_home,
    server_log,
    settings_for,
    structured,
)

NAME = "failover"
ROUNDS = 20
SESSIONS = 3
TARGET_S = 1.0
GIT = ["git", "-c", "user.name=b", "-c", "user.email=b@example.com", "-c", "commit.gpgsign=false"]


def _repo(home: Path) -> Path:
    repo = home / "fleet"
    repo.mkdir()
    for args in (["init", "-b", "main"], ["commit", "--allow-empty", "-m", "first"]):
        subprocess.run([*GIT, *args], cwd=repo, check=True, capture_output=True)
    return repo


class Fleet:
    """The sessions: each one's client lives in its own task until stopped or killed."""

    def __init__(self, group: TaskGroup, home: Path, repo: Path, errlog: object) -> None:
        self.group, self.home, self.repo, self.errlog = group, home, repo, errlog
        self.started = 0
        self.stop = anyio.Event()

    async def start(self) -> None:
        self.started += 1
        command, args = agentpost_command()
        env = agentpost_env(
            self.home, AGENTPOST_AGENT=f"fleet-{self.started}", AGENTPOST_AUTO_LEAD="true"
        )
        params = StdioServerParameters(command=command, args=args, env=env, cwd=str(self.repo))
        ready = anyio.Event()

        async def run() -> None:
            try:
                async with connect(params, MODERN, errlog=self.errlog) as client:  # type: ignore[arg-type]
                    structured(await client.call_tool("whoami", {}))
                    ready.set()
                    await self.stop.wait()
            except Exception:
                ready.set()

        self.group.start_soon(run)
        await ready.wait()


async def _seat(office: PostOffice) -> tuple[str | None, int, str | None]:
    seats = await office.leadership.leaders()
    if not seats:
        return None, 0, None
    return seats[0].leader, seats[0].term, seats[0].session_id


async def _settled(office: PostOffice, past_term: int) -> tuple[int, str]:
    """The term and session of the leader after `past_term`, once there is one."""
    with anyio.fail_after(30):
        while True:
            leader, term, session_id = await _seat(office)
            if leader is not None and term > past_term and session_id is not None:
                return term, session_id
            await anyio.sleep(0.01)


async def _claimed_at(office: PostOffice, term: int) -> float:
    """When the claim of `term` was stored: its announcement's time, from the same commit."""
    query = select(messages.c.created_at).where(
        messages.c.kind == Kind.SYSTEM.value, messages.c.body.contains(f"(term {term})")
    )
    return float(await office.store.read(lambda conn: conn.execute(query).scalar_one()))


async def run() -> Report:
    report = Report(NAME)
    took: list[float] = []
    with scratch_home(NAME) as home, server_log(home, "servers") as errlog:
        repo = _repo(home)
        settings = settings_for(home)
        with environ(agentpost_env(home)):
            office = await PostOffice.open(settings)
        try:
            async with anyio.create_task_group() as group:
                fleet = Fleet(group, home, repo, errlog)
                for _ in range(SESSIONS):
                    await fleet.start()
                term, session_id = await _settled(office, 0)
                log(NAME, f"{ROUNDS} rounds, {SESSIONS} sessions")
                for _ in range(ROUNDS):
                    pid = (await office.presence.session(session_id)).pid
                    assert pid is not None
                    t_kill = time.time()
                    os.kill(pid, signal.SIGKILL)
                    term, session_id = await _settled(office, term)
                    took.append(await _claimed_at(office, term) - t_kill)
                    await fleet.start()
                fleet.stop.set()
        finally:
            await office.aclose()
    worst = max(took)
    report.add(
        f"failover: leader's process SIGKILLed -> next leader's claim stored, p50 ({ROUNDS})",
        "(reported)",
        ms(pct(took, 50)),
    )
    report.add(
        f"failover: leader's process SIGKILLed -> next leader's claim stored, max ({ROUNDS})",
        f"≤ {ms(TARGET_S)}",
        ms(worst),
        worst <= TARGET_S,
    )
    report.notes.append(f"{SESSIONS} local sessions on main, each standing for the seat")
    report.data = {"took_s": took}
    return report
