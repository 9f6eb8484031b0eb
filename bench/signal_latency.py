"""How fast does a commit in one process wake a waiter in another, and what does waiting cost?

A child process commits N rows, each carrying `time.monotonic()` taken just before its INSERT
(CLOCK_MONOTONIC is system-wide on Linux, so the two processes share a clock). The parent
waits on a ChangeSignal and, on each wake-up, stamps every new row with the wake time. The child
also reports when each `commit()` returned, so both "from commit start" and "from commit done"
are shown. Then a process with only a blocked waiter idles for a while and its CPU time and
voluntary context switches (≈ wake-ups) are read from getrusage.

    .venv/bin/python bench/signal_latency.py [--n 300] [--interval 0.005] [--synchronous NORMAL]

`python -m bench signal` runs a shorter version as one of the benchmarks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agentpost.store.signal import ChangeSignal

WRITER = """
import json, sqlite3, sys, time
db, n, interval, sync = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
conn = sqlite3.connect(db, isolation_level=None)
conn.execute(f"PRAGMA synchronous={sync}")
done = []
for _ in range(n):
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO ping (t) VALUES (?)", (time.monotonic(),))
    conn.execute("COMMIT")
    done.append(time.monotonic())
    time.sleep(interval)
conn.close()
print(json.dumps(done))
"""


class TracingSignal(ChangeSignal):
    """Records which path noticed each change (peeks at internals; a bench may)."""

    def __init__(self, db: Path, *, use_inotify: bool) -> None:
        super().__init__(db, use_inotify=use_inotify)
        self.source = "local"
        self.sources: dict[str, int] = {}

    def _on_inotify(self) -> None:
        self.source = "inotify"
        super()._on_inotify()

    def _settle_tick(self) -> None:
        self.source = "settle re-check"
        super()._settle_tick()

    def _poll_tick(self) -> None:
        self.source = "poll"
        super()._poll_tick()

    def _bump(self) -> None:
        self.sources[self.source] = self.sources.get(self.source, 0) + 1
        super()._bump()


def fresh_db(directory: Path, name: str) -> Path:
    path = directory / name
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE ping (id INTEGER PRIMARY KEY, t REAL NOT NULL)")
    conn.commit()
    conn.close()
    return path


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def latency(db: Path, args: argparse.Namespace, use_inotify: bool) -> dict[str, object]:
    woke: dict[int, tuple[float, float]] = {}  # id -> (t before INSERT, wake time)
    async with TracingSignal(db, use_inotify=use_inotify) as sig:
        reader = sqlite3.connect(db, isolation_level=None)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            WRITER,
            str(db),
            str(args.n),
            str(args.interval),
            args.synchronous,
            stdout=asyncio.subprocess.PIPE,
        )
        seen, version, wakeups = 0, sig.version, 0
        while seen < args.n:
            version = await sig.wait_changed(version, 5.0)
            now = time.monotonic()
            wakeups += 1
            rows = reader.execute("SELECT id, t FROM ping WHERE id > ?", (seen,)).fetchall()
            if not rows and proc.returncode is not None:
                break
            for row_id, t in rows:
                woke[row_id] = (t, now)
                seen = max(seen, row_id)
        out, _ = await proc.communicate()
        reader.close()
        sources = dict(sig.sources)
    done: list[float] = json.loads(out)
    from_start = [(w - t) * 1000 for t, w in woke.values()]
    from_done = [(w - done[i - 1]) * 1000 for i, (_, w) in woke.items()]
    return {
        "mode": "inotify + 1 s poll" if use_inotify else "50 ms poll only",
        "seen": len(woke),
        "wakeups": wakeups,
        "start": from_start,
        "done": from_done,
        "sources": sources,
    }


async def idle_cpu(db: Path, seconds: float, use_inotify: bool) -> tuple[float, int, float]:
    async with ChangeSignal(db, use_inotify=use_inotify) as sig:
        before, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
        await sig.wait_changed(sig.version, seconds)  # the idle state: one blocked waiter
        after, wall = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - t0
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu * 100 / wall, after.ru_nvcsw - before.ru_nvcsw, wall


async def measure(
    directory: Path, n: int, interval: float, synchronous: str, idle: float
) -> dict[str, Any]:
    """Latency and idle cost, with inotify (the default) and with polling only."""
    args = argparse.Namespace(n=n, interval=interval, synchronous=synchronous)
    out: dict[str, Any] = {"latency": [], "idle": []}
    for use_inotify in (True, False):
        db = fresh_db(directory, f"lat-{use_inotify}.db")
        out["latency"].append(await latency(db, args, use_inotify))
    for use_inotify in (True, False):
        db = fresh_db(directory, f"idle-{use_inotify}.db")
        cpu, switches, wall = await idle_cpu(db, idle, use_inotify)
        mode = "inotify + 1 s poll" if use_inotify else "50 ms poll only"
        out["idle"].append({"mode": mode, "cpu_pct": cpu, "wakeups": switches, "wall": wall})
    return out


# -- as a benchmark of `python -m bench` ----------------------------------------------------------

NAME = "signal"
BENCH_N = 300
BENCH_INTERVAL_S = 0.005
BENCH_IDLE_S = 3.0
WAKE_TARGET_MS = 5.0
"""The issue asks for "within a few milliseconds" of a commit; read here as p50 <= 5 ms."""
IDLE_TARGET_PCT = 1.0


async def run() -> Any:
    from bench.common import Report, log  # here, so the script also runs on its own

    report = Report(NAME)
    with tempfile.TemporaryDirectory(prefix="agentpost-bench-signal-") as tmp:
        log(NAME, f"{BENCH_N} commits by another process, {BENCH_INTERVAL_S * 1000:g} ms apart")
        found = await measure(Path(tmp), BENCH_N, BENCH_INTERVAL_S, "NORMAL", BENCH_IDLE_S)
    for r in found["latency"]:
        done = r["done"]
        p50, p99 = pct(done, 50), pct(done, 99)
        default = r["mode"].startswith("inotify")
        report.add(
            f"change signal: commit done -> waiter woke, other process ({r['mode']})",
            f"p50 ≤ {WAKE_TARGET_MS:g} ms" if default else "(fallback)",
            f"p50 {p50:.2f} ms, p99 {p99:.2f} ms ({r['seen']}/{BENCH_N} seen)",
            (p50 <= WAKE_TARGET_MS and r["seen"] == BENCH_N) if default else None,
        )
    for idle in found["idle"]:
        default = idle["mode"].startswith("inotify")
        report.add(
            f"change signal: idle waiter, {BENCH_IDLE_S:g} s ({idle['mode']})",
            f"< {IDLE_TARGET_PCT:g}% of a core" if default else "(fallback)",
            f"{idle['cpu_pct']:.3f}% ({idle['wakeups']} wake-ups)",
            idle["cpu_pct"] < IDLE_TARGET_PCT if default else None,
        )
    report.notes.append(
        "raw SQLite commits (bench/signal_latency.py; run it alone for the full table); "
        "'a few milliseconds' is read as p50 ≤ 5 ms"
    )
    report.data = {
        "latency": [{k: v for k, v in r.items() if k != "start"} for r in found["latency"]],
        "idle": found["idle"],
    }
    return report


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--interval", type=float, default=0.005, help="seconds between commits")
    parser.add_argument("--synchronous", default="NORMAL", choices=["OFF", "NORMAL", "FULL"])
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of idle measurement")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the db (a real fs)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="agentpost-signal-", dir=args.dir) as tmp:
        directory = Path(tmp)
        print(
            f"{args.n} commits, {args.interval * 1000:g} ms apart, "
            f"synchronous={args.synchronous}, db in {directory}"
        )
        found = await measure(directory, args.n, args.interval, args.synchronous, args.idle)
        print()
        header = f"{'mode':<20} {'seen':>5} {'wakes':>5}  {'from commit start (ms)':^26}"
        header += f"  {'from commit done (ms)':^26}"
        print(header)
        print(f"{'':<20} {'':>5} {'':>5}  " + f"{'p50':>8} {'p99':>8} {'max':>8}  " * 2)
        for r in found["latency"]:
            line = f"{r['mode']:<20} {r['seen']:>5} {r['wakeups']:>5}  "
            for values in (r["start"], r["done"]):
                line += f"{pct(values, 50):>8.2f} {pct(values, 99):>8.2f} {max(values):>8.2f}  "
            print(line)
            print(f"{'':<20} changes noticed by: {r['sources']}")

        print()
        print(f"idle for {args.idle:g} s with one blocked waiter")
        print(f"{'mode':<20} {'cpu % of a core':>16} {'wake-ups':>9}")
        for idle in found["idle"]:
            print(f"{idle['mode']:<20} {idle['cpu_pct']:>16.3f} {idle['wakeups']:>9}")


if __name__ == "__main__":
    asyncio.run(main())
