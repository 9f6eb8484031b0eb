"""Where the service's time goes: `agentpost serve` sampled under a benchmark's load.

Not part of `python -m bench`. Two samplers (`--sampler`):

- `signals` (the default) needs nothing installed: the server loads `bench/sampling`'s
  sitecustomize, which samples the main thread's stack on each tick of the process's CPU time
  (see there). It works where py-spy cannot be relied on (the guests this project is measured
  on), and it sees only the main thread.
- `py-spy` needs py-spy, which is not a project dependency: install it outside the venv
  (`uv pip install --target /tmp/pyspy py-spy`, then PY_SPY=/tmp/pyspy/bin/py-spy) or into it
  (`uv pip install --python .venv/bin/python py-spy`; `uv sync` removes it again).

    .venv/bin/python -m bench.profile_service rest   [--seconds 10]   # wrk, 32 connections
    .venv/bin/python -m bench.profile_service rest1  [--calls 1000]   # one REST client, in sequence
    .venv/bin/python -m bench.profile_service mcp    [--calls 1000]   # one MCP client, `send`
    .venv/bin/python -m bench.profile_service echo   [--calls 1000]   # the SDK echo over HTTP
    .venv/bin/python -m bench.profile_service mcp16  [--calls 100]    # 16 clients x calls
    (mcp, echo and mcp16 take --revision 2025-11-25 for the legacy protocol)
    .venv/bin/python -m bench.profile_service broadcast [--waiters 1000]

`py-spy record --gil --threads` samples only where a thread holds the GIL (Python runs), so its
shares are of the server's Python time; `signals` samples on CPU time, so its shares take in C
calls too (an SQLite statement counts on the line that ran it). The phases are matched on the
frames of each sample, first rule wins. Raw collapsed stacks are kept (--out) for a flame graph.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import anyio

from bench.common import (
    BENCH_DIR,
    MODERN,
    REVISIONS,
    SOURCE,
    environ,
    process_cpu_s,
    scratch_home,
    structured,
)
from bench.profile import RATE, _stacks, start_spy, stop_spy
from bench.serve import Serve, raise_fd_limit, running

BODY = "Please review the migration in PR 42 before the release; the index on deliveries moved."

MARKERS: list[tuple[str, list[str]]] = [
    ("writer: COMMIT", ["do_commit"]),
    ("BEGIN (the engine's begin hook)", ["_on_begin"]),
    ("writer: the send transaction", ["Mailbox.send.<locals>"]),
    ("writer: key/session touch", ["Keys._session.<locals>"]),
    ("writer: other transactions", [".<locals>.tx ("]),
    ("writer: savepoints and batching", ["_run_in_savepoint", "_run_batch"]),
    ("auth: key lookup (glance on the loop)", ["Keys.authenticate"]),
    ("MCP push (push_news)", ["push_news"]),
    ("change signal", ["ChangeSignal", "(agentpost/store/signal"]),
    ("SSE (sse_starlette)", ["(sse_starlette/"]),
    ("agentpost services/store on the loop", ["(agentpost/services/", "(agentpost/store/"]),
    ("agentpost MCP face (adapter, tools, presenting)", ["(agentpost/mcp/"]),
    ("agentpost REST routes", ["(agentpost/http/messages", "(agentpost/http/agents"]),
    ("SDK: streamable HTTP transport / session manager", ["streamable_http"]),
    ("SDK: server, dispatch, session", ["(mcp/server/", "(mcp/shared/"]),
    ("FastAPI: threadpool hops (sync dependencies)", ["run_in_threadpool", "to_thread"]),
    ("FastAPI: dependencies", ["solve_dependencies"]),
    ("FastAPI: response serialisation", ["serialize_response", "jsonable_encoder"]),
    ("FastAPI: request body", ["request_body_to_args", "_extract_form_body", "get_body"]),
    ("FastAPI / starlette routing and middleware", ["(fastapi/", "(starlette/"]),
    ("logging (uvicorn access log)", ["(logging/"]),
    ("uvicorn / h11", ["(h11/", "(uvicorn/"]),
    ("worker threads (other)", ["worker_thread", "WorkerThread"]),
    ("event loop (asyncio, anyio, selectors)", ["(asyncio/", "(anyio/", "(selectors"]),
]
"""Phases: for each sample, the deepest frame that matches a marker names its phase."""


SAMPLING_DIR = BENCH_DIR / "sampling"
SAMPLES_WRITTEN_S = 10


class Recorder:
    """Samples one server process over the timed calls only: `start(pid)`, then `stop()`."""

    def __init__(self, sampler: str, out: Path) -> None:
        self.sampler = sampler
        self.out = out
        self._pid = 0
        self._spy: asyncio.subprocess.Process | None = None
        self._cpu_at_start = 0.0
        self.cpu_s: float | None = None
        """With `signals`, the server's CPU seconds over the samples: the timer fires once a
        kernel tick (4 ms at 250 Hz, 10 ms at 100 Hz), so a sample's worth is measured, not
        assumed."""

    @contextlib.contextmanager
    def loaded(self) -> Iterator[dict[str, str]]:
        """The environment a server needs to be sampled (with `signals`, the sampler on its
        PYTHONPATH; nothing for py-spy), also set in this process's own for the servers that
        inherit it (the SDK's echo server) until the block ends."""
        extra: dict[str, str] = {}
        if self.sampler == "signals":
            extra = {
                "PYTHONPATH": os.pathsep.join([str(SAMPLING_DIR), str(SOURCE)]),
                "AGENTPOST_BENCH_SAMPLES": str(self.out),
            }
        with environ(extra):
            yield extra

    async def start(self, pid: int) -> None:
        self._pid = pid
        if self.sampler == "py-spy":
            self._spy = await start_spy(pid, self.out)
            return
        self.out.unlink(missing_ok=True)
        self._cpu_at_start = process_cpu_s(pid)
        os.kill(pid, signal.SIGUSR1)

    async def stop(self) -> None:
        if self._spy is not None:
            await stop_spy(self._spy)
            return
        os.kill(self._pid, signal.SIGUSR2)
        self.cpu_s = process_cpu_s(self._pid) - self._cpu_at_start
        with anyio.fail_after(SAMPLES_WRITTEN_S):
            while not self.out.exists():  # noqa: ASYNC110 (another process writes it)
                await anyio.sleep(0.05)


def _phase(frames: list[str]) -> str:
    for frame in reversed(frames[1:]):
        for name, keys in MARKERS:
            if any(k in frame for k in keys):
                return name
    return "other"


def _deepest_agentpost(frames: list[str]) -> str:
    for frame in reversed(frames):
        if "(agentpost/" in frame:
            return frame.rsplit(":", 1)[0] + ")"
    return "(none)"


def summarise(
    path: Path,
    calls: int,
    seconds: float,
    top: int = 25,
    *,
    sampled: str = "Python",
    busy_s: float | None = None,
) -> None:
    """`busy_s`: the seconds the samples stand for, when measured (else one sample a 1/RATE s)."""
    stacks = _stacks(path)
    total = sum(c for _, c in stacks) or 1
    threads: collections.Counter[str] = collections.Counter()
    phases: collections.Counter[tuple[str, str]] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    agentpost: collections.Counter[tuple[str, str]] = collections.Counter()
    for frames, count in stacks:
        thread = frames[0].split(": ", 1)[-1]
        thread = "AnyIO worker threads" if thread.startswith("AnyIO worker") else thread
        threads[thread] += count
        phases[thread, _phase(frames)] += count
        own[frames[-1]] += count
        agentpost[thread, _deepest_agentpost(frames)] += count
    busy = total / RATE if busy_s is None else busy_s
    per = busy * 1000 / total / calls
    print(f"\n{total} samples = {busy:.1f} s of {sampled} over {seconds:.1f} s")
    print(f"(≈ {busy / calls * 1000:.2f} ms of server {sampled} per request/call)\n")
    for thread, count in threads.most_common():
        print(f"{count / total * 100:5.1f}%  {count * per:6.3f} ms/call  thread {thread}")
        for (t, name), n in phases.most_common():
            if t == thread and n / total >= 0.003:
                print(f"    {n / total * 100:5.1f}%  {n * per:6.3f} ms/call  {name}")
    print("\nby the deepest agentpost frame of each sample (what agentpost code led there):")
    for thread in threads:
        print(f"  thread {thread}")
        for (t, frame), n in agentpost.most_common():
            if t == thread and n / total >= 0.005:
                print(f"    {n / total * 100:5.1f}%  {n * per:6.3f} ms/call  {frame}")
    print(f"\nhottest functions (self time), top {top}:")
    for frame, count in own.most_common(top):
        print(f"{count / total * 100:5.1f}%  {frame}")


async def _rest(server: Serve, home: Path, seconds: float, recorder: Recorder) -> tuple[int, float]:
    from bench.rest import AGENTS, _wrk

    names = [f"load-{i:02d}" for i in range(AGENTS)]
    keys = await server.create_agents(names)
    agents_file = home / "agents.txt"
    agents_file.write_text("".join(f"{n} {keys[n]}\n" for n in names))
    await _wrk(server, agents_file, 3)  # warm up
    await recorder.start(server.pid)
    got = await _wrk(server, agents_file, seconds)
    await recorder.stop()
    print(f"wrk: {got.per_s:,.0f} requests/s, {got.errors} errors")
    return got.ok + got.errors, got.seconds


async def _rest1(server: Serve, calls: int, recorder: Recorder) -> tuple[int, float]:
    """One httpx client sending in sequence: the per-request cost without batching."""
    keys = await server.create_agents(["bench-sender", "bench-inbox"])
    sender = server.client(keys["bench-sender"])

    async def sends(n: int) -> None:
        for _ in range(n):
            answer = await sender.post("/v1/messages", json={"to": "bench-inbox", "body": BODY})
            if answer.status_code != 201:
                raise RuntimeError(f"send: {answer.status_code} {answer.text}")

    await sends(50)
    await recorder.start(server.pid)
    t0 = time.perf_counter()
    await sends(calls)
    seconds = time.perf_counter() - t0
    await recorder.stop()
    print(f"one REST client: {calls / seconds:,.0f} sends/s")
    return calls, seconds


async def _mcp(
    server: Serve, calls: int, clients: int, recorder: Recorder, revision: str = MODERN
) -> tuple[int, float]:
    from bench.mcp_http import RECIPIENTS, mcp_client

    # As bench.mcp_http: one client's sends rotate over RECIPIENTS inboxes, so that none fills
    # (the full-inbox look counts a recipient's open mail); many clients send around a ring.
    names = [f"agent-{i:02d}" for i in range(max(1 + RECIPIENTS, clients))]
    keys = await server.create_agents(names)
    url = f"{server.url}/mcp"

    warm: list[int] = []
    all_warm, go = anyio.Event(), anyio.Event()

    def to(i: int, k: int) -> str:
        return names[1 + k % RECIPIENTS] if clients == 1 else names[(i + 1) % clients]

    async def agent(i: int, n: int) -> None:
        async with mcp_client(url, keys[names[i]], revision) as client:
            for k in range(50):  # warm up, before sampling starts
                sent = {"to": to(i, k), "body": f"{BODY} {k}"}
                structured(await client.call_tool("send", sent))
            warm.append(i)
            if len(warm) == clients:
                all_warm.set()
            await go.wait()
            for k in range(n):
                structured(await client.call_tool("send", {"to": to(i, k), "body": f"{BODY} {k}"}))

    async with anyio.create_task_group() as tg:
        for i in range(clients):
            tg.start_soon(agent, i, calls)
        await all_warm.wait()
        await recorder.start(server.pid)
        t0 = time.perf_counter()
        go.set()
    seconds = time.perf_counter() - t0
    await recorder.stop()
    print(f"{clients} client(s) x {calls} sends: {clients * calls / seconds:,.0f} calls/s")
    return clients * calls, seconds


async def _echo(
    home: Path, calls: int, recorder: Recorder, revision: str = MODERN
) -> tuple[int, float]:
    from bench.mcp_http import echo_http, mcp_client

    async with echo_http(home) as (url, pid), mcp_client(url, None, revision) as client:
        for _ in range(50):
            await client.call_tool("echo", {"text": BODY})
        await recorder.start(pid)
        t0 = time.perf_counter()
        for _ in range(calls):
            await client.call_tool("echo", {"text": BODY})
        seconds = time.perf_counter() - t0
        await recorder.stop()
    print(f"echo: {calls / seconds:,.0f} calls/s")
    return calls, seconds


async def _broadcast(server: Serve, waiters: int, recorder: Recorder) -> tuple[int, float]:
    from bench.waiters import hold_and_broadcast

    async def before_broadcast() -> None:
        await recorder.start(server.pid)

    t0 = time.perf_counter()
    result = await hold_and_broadcast(server, waiters, before_broadcast=before_broadcast)
    seconds = time.perf_counter() - t0
    await anyio.sleep(0.5)
    await recorder.stop()
    print(f"{waiters} waiters: all woken within {result.woken_s_max * 1000:.0f} ms of the send")
    return waiters, seconds


async def main_async(args: argparse.Namespace) -> None:
    raise_fd_limit()
    out = Path(args.out)
    recorder = Recorder(args.sampler, out)
    with scratch_home("profile-service") as home, recorder.loaded() as extra:
        if args.mode == "echo":
            calls, seconds = await _echo(home, args.calls, recorder, args.revision)
        else:
            async with running(home, **extra) as server:
                if args.mode == "rest":
                    calls, seconds = await _rest(server, home, args.seconds, recorder)
                elif args.mode == "rest1":
                    calls, seconds = await _rest1(server, args.calls, recorder)
                elif args.mode == "mcp":
                    calls, seconds = await _mcp(server, args.calls, 1, recorder, args.revision)
                elif args.mode == "mcp16":
                    calls, seconds = await _mcp(server, args.calls, 16, recorder, args.revision)
                else:
                    calls, seconds = await _broadcast(server, args.waiters, recorder)
    print(f"raw stacks in {out}")
    sampled = "CPU time" if args.sampler == "signals" else "Python with the GIL held"
    summarise(out, calls, seconds, sampled=sampled, busy_s=recorder.cpu_s)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_service", description=__doc__)
    parser.add_argument("mode", choices=["rest", "rest1", "mcp", "echo", "mcp16", "broadcast"])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--waiters", type=int, default=1000)
    parser.add_argument("--out", default="/tmp/agentpost-service-profile.txt")
    parser.add_argument("--sampler", choices=["signals", "py-spy"], default="signals")
    parser.add_argument(
        "--revision", choices=REVISIONS, default=MODERN, help="the MCP protocol revision"
    )
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
