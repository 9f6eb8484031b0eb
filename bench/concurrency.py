"""Figure 5: 8 processes x 500 sends at once on one database: 4,000 stored, 0 errors.

Eight worker OS processes (`python -m bench.concurrency --worker ...`), each an MCP client
spawning its own `agentpost mcp` (agents `load-0` ... `load-7`), so 8 servers write to one SQLite
file at once. Each worker connects, reports ready, waits for the common start, then sends 500
messages in sequence to the next agent in the ring. An error is a tool error (any code, e.g.
`unavailable` for a lock that outlasted the busy timeout) or an exception. Afterwards the file is
read directly: 4,000 messages, 4,000 distinct ids, 4,000 deliveries, 500 per sender.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import (
    MODERN,
    RAISED_LIMITS,
    REPO,
    Report,
    agentpost_server,
    connect,
    log,
    log_file,
    rate,
    scratch_home,
    settings_for,
    tail,
)

NAME = "concurrency"
PROCESSES = 8
SENDS = 500


async def _worker(home: Path, index: int, sends: int) -> None:
    agent, to = f"load-{index}", f"load-{(index + 1) % PROCESSES}"
    errors: list[str] = []
    with log_file(home, f"{agent}.stderr.log").open("w") as errlog:
        async with connect(agentpost_server(home, agent), MODERN, errlog=errlog) as client:
            await client.call_tool("whoami", {})
            print("ready", flush=True)
            await asyncio.to_thread(sys.stdin.readline)  # the common start
            t0 = time.perf_counter()
            for i in range(sends):
                try:
                    result = await client.call_tool(
                        "send", {"to": to, "body": f"{agent} -> {to} #{i}"}
                    )
                except Exception as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                    continue
                if result.is_error:
                    errors.append(str(result.content[0]))
            seconds = time.perf_counter() - t0
    print(json.dumps({"agent": agent, "seconds": seconds, "errors": errors}), flush=True)


async def run() -> Report:
    report = Report(NAME, config=dict(RAISED_LIMITS))
    with scratch_home(NAME) as home:
        # Every recipient must exist before the first send: create the agents up front.
        from agentpost.services import PostOffice

        office = await PostOffice.open(settings_for(home))
        for i in range(PROCESSES):
            await office.presence.ensure_agent(f"load-{i}")
        await office.aclose()

        log(NAME, f"starting {PROCESSES} clients, each with its own agentpost mcp")
        workers = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bench.concurrency",
                "--worker",
                str(home),
                str(i),
                str(SENDS),
                cwd=REPO,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
            for i in range(PROCESSES)
        ]
        for w in workers:
            assert w.stdout is not None
            line = await asyncio.wait_for(w.stdout.readline(), 120)
            if line.strip() != b"ready":
                logs = tail(log_file(home, "load-0.stderr.log"))
                raise RuntimeError(f"a worker did not start: {line!r}\n{logs}")
        log(NAME, f"{PROCESSES} x {SENDS} sends at once ({MODERN})")
        t0 = time.perf_counter()
        for w in workers:
            assert w.stdin is not None
            w.stdin.write(b"go\n")
            await w.stdin.drain()
        outputs = [await w.communicate() for w in workers]
        total = time.perf_counter() - t0  # includes the clients' and servers' exits
        results: list[dict[str, Any]] = [json.loads(out.splitlines()[-1]) for out, _ in outputs]
        wall = max(r["seconds"] for r in results)  # they all start at the same "go"

        conn = sqlite3.connect(home / "agentpost.db")
        try:
            stored, distinct = conn.execute(
                "SELECT count(*), count(DISTINCT id) FROM messages WHERE sender LIKE 'load-%'"
            ).fetchone()
            (deliveries,) = conn.execute(
                "SELECT count(*) FROM deliveries d JOIN messages m ON m.seq = d.message_seq"
                " WHERE m.sender LIKE 'load-%'"
            ).fetchone()
            per_sender = dict(
                conn.execute(
                    "SELECT sender, count(*) FROM messages WHERE sender LIKE 'load-%'"
                    " GROUP BY sender"
                ).fetchall()
            )
        finally:
            conn.close()

    errors = [e for r in results for e in r["errors"]]
    expected = PROCESSES * SENDS
    exact = stored == distinct == deliveries == expected and all(
        per_sender.get(f"load-{i}") == SENDS for i in range(PROCESSES)
    )
    report.add(
        f"{PROCESSES} processes x {SENDS} sends: messages stored",
        f"{expected:,}",
        f"{stored:,} ({distinct:,} distinct ids, {deliveries:,} deliveries)",
        exact,
    )
    report.add(
        f"{PROCESSES} processes x {SENDS} sends: errors",
        "0",
        str(len(errors)) + (f" (first: {errors[0][:80]})" if errors else ""),
        not errors,
    )
    report.add(
        f"{PROCESSES} processes x {SENDS} sends: aggregate rate",
        "(reported)",
        f"{rate(expected, wall)} (all sent within {wall:.1f} s)",
    )
    report.notes.append(
        f"{PROCESSES} worker processes, each an SDK stdio client with its own agentpost mcp "
        f"({MODERN}), sending in a ring; counts read from the file afterwards"
    )
    report.data = {"wall_s": wall, "total_s": total, "workers": results, "per_sender": per_sender}
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", nargs=3, metavar=("HOME", "INDEX", "SENDS"), required=True)
    args = parser.parse_args()
    home, index, sends = args.worker
    asyncio.run(_worker(Path(home), int(index), int(sends)))
