"""What every benchmark shares: result rows, statistics, scratch homes, and stdio clients."""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, cast

import mcp.types as types
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

import agentpost
from agentpost.config import Settings

LEGACY = "2025-11-25"
MODERN = "2026-07-28"
REVISIONS = (MODERN, LEGACY)
"""The protocol revisions the SDK serves; MODERN is `mcp.Client`'s default."""

RAISED_LIMITS = {
    "AGENTPOST_SEND_RATE_PER_MINUTE": "1000000000",
    "AGENTPOST_MAX_UNACKED": "1000000000",
}
"""Config a benchmark sets so that it measures speed, not the default 60 sends/min and 1,000
unacknowledged messages per inbox."""

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
SOURCE = Path(agentpost.__file__).resolve().parents[1]
"""Where the agentpost this process runs was imported from: the servers a benchmark starts run
the same code. Without it they import the installed package, which in a second worktree sharing
the first one's environment is the first one's source, not the code under measurement."""


@dataclass
class Row:
    """One line of the table."""

    figure: str
    target: str
    measured: str
    passed: bool | None = None
    """None: informative, no target."""

    @property
    def verdict(self) -> str:
        return {True: "pass", False: "FAIL", None: "info"}[self.passed]


@dataclass
class Report:
    """What a benchmark returns: its rows, the config it changed, and free-form notes."""

    name: str
    rows: list[Row] = field(default_factory=list)
    config: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    """Raw numbers (written to bench/results/last.json)."""

    def add(self, figure: str, target: str, measured: str, passed: bool | None = None) -> Row:
        row = Row(figure, target, measured, passed)
        self.rows.append(row)
        return row


def log(name: str, message: str) -> None:
    """Progress, on stderr so stdout carries the table only."""
    print(f"[{name}] {message}", file=sys.stderr, flush=True)


# -- statistics ----------------------------------------------------------------------------------


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))]


def median(values: list[float]) -> float:
    return statistics.median(values)


def ms(seconds: float) -> str:
    value = seconds * 1000
    return f"{value:.2f} ms" if value < 10 else f"{value:.1f} ms"


def rate(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f}/s"


# -- scratch homes and config --------------------------------------------------------------------


@contextlib.contextmanager
def scratch_home(name: str) -> Iterator[Path]:
    """A temporary folder used as AGENTPOST_HOME (the database lives in it); removed after."""
    with tempfile.TemporaryDirectory(prefix=f"agentpost-bench-{name}-") as tmp:
        yield Path(tmp)


def log_file(home: Path, name: str) -> Path:
    """Where a benchmark's process writes its log: a folder of its own inside `home`. The
    change signal watches the folder that holds the database, and a file written there wakes
    every process on it; a real deployment logs elsewhere, and so do the benchmarks."""
    folder = home / "logs"
    folder.mkdir(exist_ok=True)
    return folder / name


def agentpost_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a benchmark's agentpost: its home, no config file, raised limits, and
    the source this process runs (`SOURCE`)."""
    env = {
        "AGENTPOST_HOME": str(home),
        "AGENTPOST_CONFIG": str(home / "no-config.toml"),
        # Servers run in this repository, on main: they would take its seat and announce it
        # in the inboxes the benchmarks count. The failover benchmark turns it back on.
        "AGENTPOST_AUTO_LEAD": "false",
        **RAISED_LIMITS,
        "PYTHONPATH": str(SOURCE),
    }
    env.update(extra)
    return env


@contextlib.contextmanager
def environ(env: Mapping[str, str]) -> Iterator[None]:
    """Set `env` in this process (and clear other AGENTPOST_* variables) for in-process use."""
    saved = dict(os.environ)
    for key in [k for k in os.environ if k.startswith("AGENTPOST_")]:
        del os.environ[key]
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def settings_for(home: Path, **extra: str) -> Settings:
    """Settings read from the environment exactly as a server reads them."""
    with environ(agentpost_env(home, **extra)):
        return Settings()


# -- stdio servers and the SDK client ------------------------------------------------------------


def agentpost_command() -> tuple[str, list[str]]:
    """`agentpost mcp` from this interpreter's environment (the console script users run)."""
    script = Path(sys.executable).parent / "agentpost"
    if script.exists():
        return str(script), ["mcp"]
    return sys.executable, ["-c", "from agentpost.cli.main import main; main()", "mcp"]


def agentpost_server(home: Path, agent: str, **extra: str) -> StdioServerParameters:
    command, args = agentpost_command()
    env = agentpost_env(home, AGENTPOST_AGENT=agent, **extra)
    return StdioServerParameters(command=command, args=args, env=env, cwd=str(REPO))


def echo_server() -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=[str(BENCH_DIR / "echo_server.py")], cwd=str(REPO)
    )


@contextlib.asynccontextmanager
async def connect(
    params: StdioServerParameters,
    revision: str = MODERN,
    *,
    errlog: TextIO | None = None,
    timeout_s: float = 60,
) -> AsyncIterator[Client]:
    """The SDK's own stdio client spawning `params`, speaking `revision`.

    The server's stderr goes to `errlog` (a file in the scratch home), not into the table.
    """
    mode = "legacy" if revision == LEGACY else "auto"
    transport = stdio_client(params, errlog=errlog if errlog is not None else sys.stderr)
    async with Client(transport, mode=mode, read_timeout_seconds=timeout_s) as client:
        if client.protocol_version != revision:
            raise RuntimeError(f"negotiated {client.protocol_version}, wanted {revision}")
        yield client


def structured(result: types.CallToolResult) -> dict[str, Any]:
    """The structured answer of a successful call; a tool error raises."""
    if result.is_error:
        text = " ".join(b.text for b in result.content if isinstance(b, types.TextContent))
        raise RuntimeError(f"tool error: {text}")
    out = result.structured_content
    if not isinstance(out, dict):
        raise RuntimeError("no structured content")
    return cast(dict[str, Any], out)


@contextlib.contextmanager
def server_log(home: Path, name: str) -> Iterator[TextIO]:
    path = log_file(home, f"{name}.stderr.log")
    with path.open("w") as f:
        yield cast(TextIO, f)


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text().splitlines()[-lines:])
    except OSError:
        return ""


def self_cpu_s() -> float:
    """CPU seconds (user + system) of this process so far, precise to the nanosecond."""
    return time.process_time()


def _child_pids() -> list[int]:
    pids: list[int] = []
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children") as f:
                pids.extend(int(p) for p in f.read().split())
    except OSError:
        return []
    return pids


def process_cpu_s(pid: int) -> float:
    """CPU time of a process's live threads from schedstat (ns, not clock ticks)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1e9


def children_cpu_s() -> float:
    """CPU seconds of this process's live child processes (Linux /proc; 0 elsewhere).

    With one server spawned at a time, the difference over a run is that server's CPU: all its
    threads, whatever the machine's load, which wall-clock figures are not. Read from schedstat,
    so even one call's window is measured exactly (clock-tick counters would not be).
    """
    total = 0.0
    for pid in _child_pids():
        try:
            total += process_cpu_s(pid)
        except OSError:  # it just exited
            continue
    return total


def expect(condition: bool, what: str) -> None:
    """A check of what a benchmark measured (not an assert: it must hold under -O too)."""
    if not condition:
        raise RuntimeError(f"unexpected: {what}")
