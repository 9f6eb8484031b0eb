"""What the service benchmarks share: `agentpost serve` as a real process on a loopback port.

The server is started as a user starts it (the console script, one uvicorn worker, SQLite in a
scratch AGENTPOST_HOME) with `--port 0`; the port is read from uvicorn's own "running on" line
and the admin key from `$AGENTPOST_HOME/admin.key`, which the first start writes. Agents are
created through the admin REST API, as an owner creates them. The server's resident memory and
CPU are read from /proc.
"""

from __future__ import annotations

import contextlib
import re
import resource
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc
import httpx
from mcp.client.stdio import get_default_environment

from bench.common import REPO, agentpost_env, log_file, process_cpu_s, tail

START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 15
RUNNING = re.compile(rb"running on http://127\.0\.0\.1:(\d+)")


def serve_command(*args: str) -> list[str]:
    """`agentpost serve` from this interpreter's environment (the console script users run)."""
    script = Path(sys.executable).with_name("agentpost")
    if script.exists():
        return [str(script), "serve", *args]
    return [sys.executable, "-m", "agentpost.cli.entry", "serve", *args]


def raise_fd_limit() -> int:
    """Lift this process's soft RLIMIT_NOFILE to its hard limit (children inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        wanted = 1 << 20 if hard == resource.RLIM_INFINITY else hard
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def proc_status(pid: int, field_name: str) -> int:
    """A `kB` field of /proc/PID/status (VmRSS, VmHWM, ...), in bytes; 0 if absent."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) * 1024
    return 0


def mb(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:,.0f} MB"


@dataclass
class Serve:
    """One running `agentpost serve`."""

    home: Path
    log: Path
    process: anyio.abc.Process
    port: int
    admin_key: str
    clients: list[httpx.AsyncClient] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def rss(self) -> int:
        """Resident memory now (VmRSS), in bytes."""
        return proc_status(self.pid, "VmRSS")

    def peak_rss(self) -> int:
        """The most resident memory so far (VmHWM), in bytes."""
        return proc_status(self.pid, "VmHWM")

    def cpu_s(self) -> float:
        """CPU seconds the server's live threads used so far (schedstat)."""
        return process_cpu_s(self.pid)

    def client(self, key: str | None = None, **limits: int) -> httpx.AsyncClient:
        """An httpx client of this service speaking with `key`; closed with the server."""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        client = httpx.AsyncClient(
            base_url=self.url,
            headers=headers,
            timeout=60,
            limits=httpx.Limits(**limits) if limits else httpx.Limits(),
        )
        self.clients.append(client)
        return client

    async def create_agents(self, names: Iterable[str], concurrency: int = 8) -> dict[str, str]:
        """Create agents with the admin key, `concurrency` requests at a time; name -> key."""
        admin = self.client(self.admin_key, max_connections=concurrency)
        keys: dict[str, str] = {}
        pending = list(names)

        async def worker() -> None:
            while pending:
                name = pending.pop()
                answer = await admin.post("/v1/admin/agents", json={"name": name})
                if answer.status_code != 201:
                    raise RuntimeError(f"creating {name}: {answer.status_code} {answer.text}")
                keys[name] = answer.json()["key"]["key"]

        async with anyio.create_task_group() as tg:
            for _ in range(concurrency):
                tg.start_soon(worker)
        return keys

    def stored(self) -> int:
        """Messages in the database (read directly, read-only, beside the running server)."""
        import sqlite3

        db = sqlite3.connect(f"file:{self.home / 'agentpost.db'}?mode=ro", uri=True)
        try:
            return int(db.execute("SELECT count(*) FROM messages").fetchone()[0])
        finally:
            db.close()

    def log_tail(self, lines: int = 30) -> str:
        return tail(self.log, lines)


def serve_env(home: Path, **extra: str) -> dict[str, str]:
    """The server's environment: the SDK's default one (PATH, HOME, ...) plus the benchmark's
    AGENTPOST_* variables (scratch home, no config file, raised limits)."""
    return {**get_default_environment(), **agentpost_env(home, **extra)}


@contextlib.asynccontextmanager
async def running(home: Path, name: str = "serve", **extra: str) -> AsyncIterator[Serve]:
    """`agentpost serve --port 0` on `home`, until the block ends (then SIGTERM, then SIGKILL)."""
    log = log_file(home, f"{name}.log")
    with log.open("wb") as out:
        process = await anyio.open_process(
            serve_command("--port", "0"),
            env=serve_env(home, **extra),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=str(REPO),
        )
    try:
        port = await wait_for_port(process, log)
        key = extra.get("AGENTPOST_ADMIN_KEY") or (home / "admin.key").read_text().strip()
        server = Serve(home, log, process, port, key)
        try:
            yield server
        finally:
            for client in server.clients:
                await client.aclose()
    finally:
        await stop(process)


async def wait_for_port(process: anyio.abc.Process, log: Path) -> int:
    """The port uvicorn says it is running on (its log line), once it listens."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        found = RUNNING.search(await anyio.Path(log).read_bytes())
        if found:
            return int(found.group(1))
        if process.returncode is not None:
            raise RuntimeError(f"the server exited ({process.returncode}):\n{tail(log)}")
        await anyio.sleep(0.05)
    raise RuntimeError(f"the server did not listen within {START_TIMEOUT_S} s:\n{tail(log)}")


async def stop(process: anyio.abc.Process) -> None:
    if process.returncode is not None:
        return
    process.terminate()
    with anyio.move_on_after(STOP_TIMEOUT_S, shield=True):
        await process.wait()
        return
    process.kill()
    with anyio.CancelScope(shield=True):
        await process.wait()


@contextlib.contextmanager
def cpu_window(server: Serve) -> Iterator[dict[str, float]]:
    """The server's CPU seconds and the wall seconds of a block, in the dict it yields."""
    out: dict[str, float] = {}
    cpu0, t0 = server.cpu_s(), time.perf_counter()
    yield out
    out["cpu_s"] = server.cpu_s() - cpu0
    out["wall_s"] = time.perf_counter() - t0
