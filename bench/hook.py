"""Issue 4: `agentpost hook claude` answers within 200 ms (wall time of the whole process).

The installed console script is run as Claude Code runs a hook: a new process, the hook's JSON
on stdin (UserPromptSubmit), AGENTPOST_AGENT naming the agent. Two cases, 30 runs each: nothing
new (prints nothing), and five new messages waiting before every run (prints a note of five;
the mail is sent in this process through the services between runs, outside the timing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from agentpost.services import PostOffice
from bench.common import (
    RAISED_LIMITS,
    Report,
    agentpost_env,
    expect,
    log,
    median,
    ms,
    pct,
    scratch_home,
    settings_for,
)

NAME = "hook"
RUNS = 30
WAITING = 5
TARGET_S = 0.200
EVENT = json.dumps({"session_id": "bench", "cwd": "/tmp", "hook_event_name": "UserPromptSubmit"})


def _hook(env: dict[str, str]) -> tuple[float, str]:
    script = Path(sys.executable).parent / "agentpost"
    started = time.perf_counter()
    done = subprocess.run(
        [str(script), "hook", "claude"], input=EVENT, capture_output=True, text=True, env=env
    )
    took = time.perf_counter() - started
    expect(done.returncode == 0 and not done.stderr, f"hook failed: {done.stderr}")
    return took, done.stdout


async def run() -> Report:
    report = Report(NAME, config=dict(RAISED_LIMITS))
    quiet: list[float] = []
    waiting: list[float] = []
    with scratch_home(NAME) as home:
        settings = settings_for(home)
        env = {**os.environ, **agentpost_env(home, AGENTPOST_AGENT="bench-reader")}
        office = await PostOffice.open(settings)
        try:
            reader = await office.presence.ensure_agent("bench-reader")
            sender = await office.presence.ensure_agent("bench-sender")
            await office.mailbox.send(sender, "bench-reader", "before the first note")
            _hook(env)  # the first note starts the cursor
            log(NAME, f"{RUNS} runs with nothing new, {RUNS} with {WAITING} messages waiting")
            for _ in range(RUNS):
                took, out = _hook(env)
                expect(out == "", "a note with nothing new")
                quiet.append(took)
            for run_ in range(RUNS):
                for i in range(WAITING):
                    await office.mailbox.send(sender, "bench-reader", f"run {run_} message {i}")
                took, out = _hook(env)
                note = json.loads(out)["hookSpecificOutput"]["additionalContext"]
                expect(f"{WAITING} new messages" in note, f"unexpected note: {note[:200]}")
                waiting.append(took)
            unread = (await office.mailbox.inbox(reader, peek=True, limit=1)).unread
            expect(unread == 1 + RUNS * WAITING, f"the hook changed the inbox: {unread} unread")
        finally:
            await office.aclose()

    for label, values in (("nothing new", quiet), (f"{WAITING} messages waiting", waiting)):
        p95 = pct(values, 95)
        report.add(
            f"hook: `agentpost hook claude` wall time, {label}, median / p95 ({RUNS} runs)",
            f"≤ {ms(TARGET_S)}",
            f"{ms(median(values))} / {ms(p95)}",
            p95 <= TARGET_S,
        )
    report.notes.append("a new process per run, as Claude Code runs hooks; SQLite in WAL mode")
    report.data = {"quiet_s": quiet, "waiting_s": waiting}
    return report
