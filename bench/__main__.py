"""`python -m bench [NAME ...]`: run the benchmarks (all, or those named) and print one table."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import platform
import resource
import subprocess
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any, cast

from bench.common import BENCH_DIR, Report, Row

BENCHMARKS: dict[str, tuple[str, str]] = {
    "services": ("bench.services", "1. services in one process: one-recipient sends/s"),
    "inbox": ("bench.inbox_1m", "2. an inbox page of 20 out of 1,000,000 stored messages"),
    "stdio": ("bench.stdio", "3. the stdio server: send calls/s, echo, inbox of 200, start"),
    "wake": ("bench.wake", "4. another process's wait wakes after a send (500 trials)"),
    "concurrency": ("bench.concurrency", "5. 8 processes x 500 sends"),
    "signal": ("bench.signal_latency", "the change signal alone: commit -> wake, idle CPU"),
    "rest": ("bench.rest", "service: REST POST /v1/messages from 32 keep-alive connections"),
    "mcp_http": ("bench.mcp_http", "service: MCP over HTTP, send vs the SDK echo; 16 clients"),
    "service_wake": ("bench.service_wake", "service: REST long-poll and SSE told of a send"),
    "replica_wake": ("bench.replica_wake", "scale-out: a long-poll told of another replica's send"),
    "hidden_reads": ("bench.hidden_reads", "reads past 5,000 expired or blocked messages each"),
    "purge": ("bench.purge", "wiped words purged from a 200,000-message index, sends beside"),
    "pg_search": ("bench.pg_search", "scale-out: a search among 50,000 messages on PostgreSQL"),
    "pg_sweep": ("bench.pg_sweep", "scale-out: retention sweep of 100,000 messages on PostgreSQL"),
    "waiters": ("bench.waiters", "service: 1,000 waiting connections: memory, broadcast wake"),
    "channel": ("bench.channel", "issue 4: a Claude Code channel notification after a send"),
    "hook": ("bench.hook", "issue 4: `agentpost hook claude` wall time, quiet and with mail"),
    "failover": ("bench.failover", "coordination: leader failover after SIGKILL (3 sessions)"),
}


def _machine() -> str:
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}"


def _machine_busy_s() -> float:
    """CPU seconds every process on the machine has used (from /proc/stat; 0 elsewhere)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except OSError:
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    """CPU seconds of this process and of its children that have exited (servers, workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _others_share(seconds: float) -> float:
    """Share of the machine (0..1) others used over the last `seconds`, by sampling /proc/stat."""
    busy0, own0 = _machine_busy_s(), _own_cpu_s()
    time.sleep(seconds)
    busy, own = _machine_busy_s() - busy0, _own_cpu_s() - own0
    return max(0.0, busy - own) / (seconds * (os.cpu_count() or 1))


def _wait_quiet(name: str, limit_s: float) -> None:
    """Wait (at most `limit_s`) until others use under 10% of the machine for 2 s."""
    deadline = time.monotonic() + limit_s
    while (share := _others_share(2.0)) >= 0.10:
        if time.monotonic() > deadline:
            print(
                f"[{name}] machine still busy ({share:.0%} used by others); going ahead",
                file=sys.stderr,
                flush=True,
            )
            return
        print(
            f"[{name}] waiting for a quiet machine ({share:.0%} used by others)",
            file=sys.stderr,
            flush=True,
        )


def _revision() -> str:
    """The commit measured (read-only git), with `+changes` when src/ differs from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=BENCH_DIR.parent,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"],
            capture_output=True,
            text=True,
            cwd=BENCH_DIR.parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return head + (" +changes in src/" if dirty else "")


def _table(rows: list[tuple[str, Row]]) -> str:
    header = ("figure", "target", "measured", "result")
    lines = [(r.figure, r.target, r.measured, r.verdict) for _, r in rows]
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]

    def fmt(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    out = [fmt(header), fmt(tuple("-" * w for w in widths))]
    out.extend(fmt(line) for line in lines)
    return "\n".join(out)


async def _run_one(name: str) -> Report:
    module = importlib.import_module(BENCHMARKS[name][0])
    run = cast(Callable[[], Awaitable[Report]], module.run)
    return await run()


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument(
        "--quiet",
        type=float,
        default=0,
        metavar="SECONDS",
        help="before each benchmark, wait up to SECONDS for others to use under 10%% of the CPU",
    )
    args = parser.parse_args()
    if args.list:
        for name, (_, what) in BENCHMARKS.items():
            print(f"{name:<12} {what}")
        return 0
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; try --list")
    names = args.names or list(BENCHMARKS)

    started = time.perf_counter()
    reports: list[Report] = []
    failed: list[str] = []
    others: dict[str, float] = {}
    for name in names:
        if args.quiet:
            _wait_quiet(name, args.quiet)
        t0 = time.perf_counter()
        busy0, own0 = _machine_busy_s(), _own_cpu_s()
        print(f"[{name}] {BENCHMARKS[name][1]}", file=sys.stderr, flush=True)
        try:
            report = asyncio.run(_run_one(name))
        except Exception:
            traceback.print_exc()
            failed.append(name)
            report = Report(name)
            report.add(f"{name}: crashed (traceback on stderr)", "-", "-", False)
        wall = time.perf_counter() - t0
        busy, own = _machine_busy_s() - busy0, _own_cpu_s() - own0
        others[name] = max(0.0, busy - own) / (wall * (os.cpu_count() or 1))
        print(f"[{name}] done in {wall:.1f} s", file=sys.stderr, flush=True)
        reports.append(report)
    total = time.perf_counter() - started

    rows = [(r.name, row) for r in reports for row in r.rows]
    print(f"agentpost benchmarks - {_revision()} - {_machine()} - {total:.0f} s")
    print()
    print(_table(rows))
    notes = [(r.name, n) for r in reports for n in r.notes]
    configs = [(r.name, r.config) for r in reports if r.config]
    print()
    for name, config in configs:
        settings = " ".join(f"{k}={v}" for k, v in config.items())
        print(f"- {name}: config {settings}")
    for name, note in notes:
        print(f"- {name}: {note}")
    print(
        f"- share of the machine ({os.cpu_count()} cores) used by other processes meanwhile, "
        "which skews wall-clock figures: "
        + ", ".join(f"{name} {value:.0%}" for name, value in others.items())
    )

    results: dict[str, Any] = {
        "machine": _machine(),
        "revision": _revision(),
        "seconds": total,
        "others_share": others,
        "reports": [
            {
                "name": r.name,
                "rows": [vars(row) for row in r.rows],
                "config": r.config,
                "notes": r.notes,
                "data": r.data,
            }
            for r in reports
        ],
    }
    out = BENCH_DIR / "results"
    out.mkdir(exist_ok=True)
    (out / "last.json").write_text(json.dumps(results, indent=2) + "\n")
    if failed or any(row.passed is False for _, row in rows):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
