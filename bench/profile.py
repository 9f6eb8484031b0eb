"""Where the time goes: profiles of the stdio `send` and `inbox` paths and of the start.

Not part of `python -m bench`. The call paths need py-spy in the venv (never in pyproject):

    uv pip install --python .venv/bin/python py-spy
    .venv/bin/python -m bench.profile send  [--calls 3000] [--revision 2025-11-25]
    .venv/bin/python -m bench.profile inbox [--calls 300] [--limit 200]
    .venv/bin/python -m bench.profile start [--runs 7]

`send` and `inbox` attach `py-spy record --gil --threads` (samples only where a thread holds the
GIL, i.e. Python runs) to a warmed-up `agentpost mcp` for the timed calls, which the SDK's stdio
client makes in sequence; then they split the samples into phases (first matching rule wins) and
list the hottest functions. The raw collapsed stacks are kept (--out) for a flame graph.
`start` needs no py-spy: it runs the server through a wrapper that stamps each start-up phase
on stderr, and groups `-X importtime` by package.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mcp.client.stdio import StdioServerParameters

from agentpost.services import PostOffice
from bench.common import (
    LEGACY,
    MODERN,
    agentpost_command,
    agentpost_server,
    connect,
    log_file,
    scratch_home,
    settings_for,
    structured,
)

BODY = "Please review the migration in PR 42 before the release; the index on deliveries moved."

PHASES: list[tuple[str, list[str]]] = [
    ("start-up: imports", ["_find_and_load"]),
    ("writer thread: BEGIN / COMMIT / savepoints", ["do_commit", "_on_begin", "begin_nested"]),
    ("writer thread: the write transactions", ["agentpost-writer"]),
    ("reader threads: read transactions", ["agentpost-reader", "AnyIO worker thread"]),
    ("loop: change signal (inotify, data_version)", ["ChangeSignal", "_on_inotify"]),
    ("loop: arrivals push", ["arrivals", "_push_arrivals"]),
    (
        "loop: agentpost tools, services, presenting",
        [
            "(agentpost/services",
            "(agentpost/mcp/tools",
            "(agentpost/mcp/presenting",
            "(agentpost/domain",
            "(agentpost/store",
        ],
    ),
    ("loop: agentpost adapter (argument validation, result)", ["(agentpost/mcp/adapter"]),
    ("loop: SDK request handling", ["_handle_request", "serve_one", "on_request"]),
    ("loop: SDK stdio transport", ["stdio_server", "jsonrpc_dispatcher"]),
    ("loop: thread hops", ["run_sync", "Condition.notify", "_write_to_self", "_read_from_self"]),
    ("loop: the event loop itself", ["EpollSelector", "_run_once", "Handle._run"]),
]


def _stacks(path: Path) -> list[tuple[list[str], int]]:
    out = []
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack:
            out.append((stack.split(";"), int(count)))
    return out


def summarise(path: Path, calls: int, seconds: float, top: int = 25) -> None:
    stacks = _stacks(path)
    total = sum(c for _, c in stacks)
    phases: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    for frames, count in stacks:
        for name, keys in PHASES:
            if any(k in f for f in frames for k in keys):
                phases[name] += count
                break
        else:
            phases["other"] += count
        if not any("_find_and_load" in f for f in frames):
            own[frames[-1]] += count
    busy = total / RATE
    print(f"\n{total} samples with the GIL held = {busy:.1f} s of Python over {seconds:.1f} s")
    print(f"(≈ {busy / calls * 1000:.2f} ms of server Python per call, imports included)\n")
    for name, count in [*phases.most_common()]:
        print(f"{count / total * 100:5.1f}%  {count / RATE / calls * 1000:6.3f} ms/call  {name}")
    print(f"\nhottest functions (self time, imports left out), top {top}:")
    for frame, count in own.most_common(top):
        print(f"{count / total * 100:5.1f}%  {frame}")


RATE = 250


def py_spy() -> str:
    """py-spy from $PY_SPY, beside this interpreter, or on PATH; it is no project dependency."""
    found = (
        os.environ.get("PY_SPY")
        or shutil.which("py-spy", path=str(Path(sys.executable).parent))
        or shutil.which("py-spy")
    )
    if not found:
        sys.exit("py-spy not found: set PY_SPY or uv pip install --python .venv/bin/python py-spy")
    return found


async def start_spy(pid: int, out: Path) -> asyncio.subprocess.Process:
    """py-spy recording `pid` (GIL holders only, every thread) into `out`, once attached."""
    spy = await asyncio.create_subprocess_exec(
        py_spy(),
        "record",
        "--pid",
        str(pid),
        "-r",
        str(RATE),
        "--gil",
        "--threads",
        "-f",
        "raw",
        "-o",
        str(out),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    await asyncio.sleep(1.0)  # py-spy attaches
    return spy


async def stop_spy(spy: asyncio.subprocess.Process) -> None:
    spy.send_signal(signal.SIGINT)  # py-spy writes its file on Ctrl-C
    await spy.wait()


def _server_pid() -> int:
    """The one child process of ours whose command line names agentpost."""
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid() and b"agentpost" in cmdline:
            return int(pid)
    raise RuntimeError("no agentpost server among this process's children")


async def profile_calls(tool: str, calls: int, revision: str, limit: int, out: Path) -> None:
    """Attach py-spy to a running server for the timed calls only (start-up left out)."""
    with scratch_home("profile") as home:
        office = await PostOffice.open(settings_for(home))
        await office.presence.ensure_agent("bench-inbox")
        filler = await office.presence.ensure_agent("bench-filler")
        agent = "bench-reader" if tool == "inbox" else "bench-sender"
        args: dict[str, Any] = {"to": "bench-inbox", "body": BODY}
        if tool == "inbox":
            args = {"limit": limit, "peek": True}
        with log_file(home, "server.log").open("w") as errlog:
            async with connect(agentpost_server(home, agent), revision, errlog=errlog) as client:
                structured(await client.call_tool("whoami", {}))
                if tool == "inbox":
                    await asyncio.gather(
                        *(
                            office.mailbox.send(filler, agent, f"{BODY} ({i})", subject=f"s {i}")
                            for i in range(limit)
                        )
                    )
                for _ in range(50):  # warm up
                    structured(await client.call_tool(tool, args))
                spy = await start_spy(_server_pid(), out)
                t0 = time.perf_counter()
                for _ in range(calls):
                    structured(await client.call_tool(tool, args))
                seconds = time.perf_counter() - t0
                await stop_spy(spy)
        await office.aclose()
    print(f"{calls} {tool} calls ({revision}): {calls / seconds:,.0f}/s, raw stacks in {out}")
    summarise(out, calls, seconds + 1.0)


PHASED_SERVER = r"""
import sys, time
T0 = time.perf_counter()
def mark(what):
    print(f"PHASE {(time.perf_counter() - T0) * 1000:.1f} {what}", file=sys.stderr, flush=True)
import anyio
from agentpost.cli import main as cli_main
from agentpost.config import Settings
mark("imported the CLI (typer, config)")
import agentpost.mcp.stdio as st
mark("imported agentpost.mcp.stdio (mcp, sqlalchemy, services)")
from agentpost.mcp import adapter
from agentpost.services import PostOffice
from agentpost.services import presence
def timed(owner, name, label):
    fn = getattr(owner, name, None)
    if fn is None:
        return
    if hasattr(fn, "__code__") and fn.__code__.co_flags & 0x80:  # a coroutine function
        async def wrapper(*a, **k):
            t = time.perf_counter(); r = await fn(*a, **k)
            mark(f"  {label}: {(time.perf_counter() - t) * 1000:.1f} ms"); return r
    else:
        def wrapper(*a, **k):
            t = time.perf_counter(); r = fn(*a, **k)
            mark(f"  {label}: {(time.perf_counter() - t) * 1000:.1f} ms"); return r
    setattr(owner, name, wrapper)
timed(PostOffice, "open", "PostOffice.open (engines, migration check, signal)")
timed(st, "detect", "detect (git context)")
timed(presence.PresenceService, "open_local_session", "open_local_session")
timed(presence.PresenceService, "agent_names", "agent_names")
timed(st, "build_server", "build_server (tool schemas)")
run_stdio = adapter.MailboxServer.run_stdio
async def serving(self):
    mark("serving stdio"); await run_stdio(self)
adapter.MailboxServer.run_stdio = serving
call_tool = adapter.MailboxServer._call_tool
async def first_call(self, ctx, params):
    mark("first tools/call arrived"); r = await call_tool(self, ctx, params)
    mark("first tools/call answered"); return r
adapter.MailboxServer._call_tool = first_call
anyio.run(st.serve_stdio, Settings())
"""


async def profile_start(runs: int, revision: str) -> None:
    with scratch_home("profile-start") as home:
        office = await PostOffice.open(settings_for(home))  # the database exists and is current
        await office.aclose()
        base = agentpost_server(home, "bench-start")
        script = home / "phased_server.py"
        script.write_text(PHASED_SERVER)
        plain: list[float] = []
        phased: list[float] = []
        marks: dict[str, list[float]] = collections.defaultdict(list)
        for _ in range(runs):
            for params, times in (
                (base, plain),
                (
                    StdioServerParameters(
                        command=sys.executable, args=[str(script)], env=base.env, cwd=base.cwd
                    ),
                    phased,
                ),
            ):
                log = log_file(home, "server.log")
                with log.open("w") as errlog:
                    t0 = time.perf_counter()
                    async with connect(params, revision, errlog=errlog) as client:
                        structured(await client.call_tool("whoami", {}))
                        times.append(time.perf_counter() - t0)
                for line in log.read_text().splitlines():
                    if m := re.match(r"PHASE ([\d.]+) (.*)$", line):
                        label = m.group(2)
                        value = float(m.group(1))
                        if label.startswith("  "):  # a duration, not a timestamp
                            value = float(label.rsplit(": ", 1)[1].split()[0])
                            label = label.rsplit(": ", 1)[0]
                        marks[label].append(value)
    print(f"start to first answer ({revision}), median of {runs}:")
    print(f"  agentpost mcp:                 {statistics.median(plain) * 1000:6.0f} ms")
    print(f"  the same through the wrapper:  {statistics.median(phased) * 1000:6.0f} ms")
    print("the wrapper's phases (ms after the interpreter started; indented: durations):")
    for label, values in marks.items():
        print(f"  {statistics.median(values):7.1f}  {label.strip() if label[0] != ' ' else label}")
    _import_breakdown()


def _import_breakdown() -> None:
    """`-X importtime` of the server's imports, self time grouped by top-level package."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    code = "import agentpost.cli.main, agentpost.mcp.stdio"
    runs = []
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        groups: collections.Counter[str] = collections.Counter()
        for line in done.stderr.splitlines():
            m = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
            if m:
                parts = m.group(2).split(".")
                key = parts[0]
                if key == "mcp" and len(parts) > 1:
                    key = ".".join(
                        parts[:3] if parts[1] == "server" and len(parts) > 2 else parts[:2]
                    )
                groups[key] += int(m.group(1))
        runs.append(groups)
    keys = set().union(*runs)
    rows = sorted(((statistics.median(r[k] for r in runs) / 1000, k) for k in keys), reverse=True)
    total = statistics.median(sum(r.values()) for r in runs) / 1000
    print(f"\nimports ({code}): {total:.0f} ms self time in all (median of 3, under importtime)")
    for value, key in rows[:20]:
        print(f"  {value:6.0f} ms  {key}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    parser.add_argument("what", choices=["send", "inbox", "start"])
    parser.add_argument("--calls", type=int, default=None)
    parser.add_argument("--limit", type=int, default=200, help="inbox: messages per call")
    parser.add_argument("--runs", type=int, default=7, help="start: how many starts")
    parser.add_argument("--revision", default=MODERN, choices=[MODERN, LEGACY])
    parser.add_argument("--out", type=Path, default=None, help="where to keep the raw stacks")
    args = parser.parse_args()
    if args.what == "start":
        asyncio.run(profile_start(args.runs, args.revision))
        return
    calls = args.calls or (3000 if args.what == "send" else 300)
    out = args.out or Path(tempfile.gettempdir()) / f"agentpost-profile-{args.what}.txt"
    asyncio.run(profile_calls(args.what, calls, args.revision, args.limit, out))
    command, command_args = agentpost_command()
    print(f"\n(agentpost mcp is {' '.join([command, *command_args])})")


if __name__ == "__main__":
    main()
