"""What a client in sequence waits for: one MCP `send` against the SDK's echo, mark by mark.

Not part of `python -m bench`. The one-client figure (issue 3: `send` at 80% of the echo's
rate) is set by each call's critical path: from the request's first bytes at the server to its
answer's last, then the client's own turn until the next request arrives. Work a server does
after answering runs beside the client's turn and costs it nothing while it fits there; the
same work before the answer is paid on every call. Profiles (`bench.profile_service`) tell
where CPU goes, not on which side of the answer; this tells that:

    .venv/bin/python -m bench.critical_path [--calls 2000] [--revision 2025-11-25]

Both servers load `bench/tracing` (see there), which marks a request's way through them; the
medians of the last `--calls` requests of each are printed.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import os
import statistics
from pathlib import Path

import anyio

from bench.common import BENCH_DIR, MODERN, REVISIONS, SOURCE, environ, log_file, scratch_home
from bench.mcp_http import BODY, echo_http, mcp_client
from bench.serve import running

TRACING_DIR = BENCH_DIR / "tracing"
WARMUP = 100


def marked(out: Path) -> dict[str, str]:
    return {
        "PYTHONPATH": os.pathsep.join([str(TRACING_DIR), str(SOURCE)]),
        "AGENTPOST_BENCH_MARKS": str(out),
    }


async def run(home: Path, calls: int, revision: str) -> tuple[Path, Path]:
    # Not beside the database: a file written there wakes the server's file watch.
    sends, echoes = log_file(home, "marks-send.txt"), log_file(home, "marks-echo.txt")
    async with running(home, **marked(sends)) as server:
        key = (await server.create_agents(["bench-sender", "inbox"]))["bench-sender"]
        async with mcp_client(f"{server.url}/mcp", key, revision) as client:
            for _ in range(WARMUP + calls):
                await client.call_tool("send", {"to": "inbox", "body": BODY})
    with environ(marked(echoes)):
        async with echo_http(home) as (url, _pid), mcp_client(url, None, revision) as client:
            for _ in range(WARMUP + calls):
                await client.call_tool("echo", {"text": BODY})
    return sends, echoes


def requests(path: Path) -> list[list[tuple[str, float, float]]]:
    """Each request's marks, `in` to `out`: its first read to its answer's last byte."""
    found: list[list[tuple[str, float, float]]] = []
    current: list[tuple[str, float, float]] = []
    for line in path.read_text().splitlines():
        name, wall, cpu = line.split()
        if (name == "in") == bool(current):
            continue  # a request's later reads; or, after its answer, its unwinding
        current.append((name, float(wall), float(cpu)))
        if name == "out":
            found.append(current)
            current = []
    return found


def report(title: str, path: Path, calls: int) -> None:
    taken = requests(path)[-calls - 1 :]
    steps: dict[str, list[float]] = collections.defaultdict(list)
    for request in taken[:-1]:
        for (a, wall_a, _), (b, wall_b, _) in itertools.pairwise(request):
            steps[f"{a} -> {b}"].append(wall_b - wall_a)
    answered = [r[-1][1] - r[0][1] for r in taken[:-1]]
    turn = [after[0][1] - r[-1][1] for r, after in itertools.pairwise(taken)]
    after_cpu = [after[0][2] - r[-1][2] for r, after in itertools.pairwise(taken)]
    print(f"\n{title}: {len(answered)} requests, medians in µs")
    print(f"{statistics.median(answered) * 1e6:9.0f}  in -> out: what the client waits for")
    for step, spans in steps.items():
        if len(spans) >= len(answered) // 2 and step != "in -> out":
            print(f"{statistics.median(spans) * 1e6:9.0f}    {step}")
    print(f"{statistics.median(turn) * 1e6:9.0f}  out -> next in: the client's turn")
    print(f"{statistics.median(after_cpu) * 1e6:9.0f}    of which the server's CPU after answering")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.critical_path", description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--revision", choices=REVISIONS, default=MODERN)
    args = parser.parse_args()
    with scratch_home("critical-path") as home:
        sends, echoes = anyio.run(run, home, args.calls, args.revision)
        report(f"agentpost serve, `send` ({args.revision})", sends, args.calls)
        report(f"the SDK's echo ({args.revision})", echoes, args.calls)


if __name__ == "__main__":
    main()
