"""The benchmarks measure the code they are run from."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from mcp.client.stdio import get_default_environment

import agentpost

BENCH_COMMON = Path(__file__).resolve().parents[1] / "bench" / "common.py"


def test_a_benchmark_server_imports_the_agentpost_the_benchmark_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = importlib.util.spec_from_file_location("bench_common_under_test", BENCH_COMMON)
    assert spec is not None
    assert spec.loader is not None
    common = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, common)  # its dataclasses look it up
    spec.loader.exec_module(common)
    env = {**get_default_environment(), **common.agentpost_env(tmp_path)}  # as bench/serve.py
    imported = _python("import agentpost; print(agentpost.__file__)", env, tmp_path)
    assert Path(imported).resolve() == Path(agentpost.__file__).resolve()


SAMPLING = Path(__file__).resolve().parents[1] / "bench" / "sampling"
TRACING = SAMPLING.parent / "tracing"
BURNS_CPU = """
import os, signal, time

def burn_the_cpu():
    until = time.process_time() + 0.4
    while time.process_time() < until:
        pass

os.kill(os.getpid(), signal.SIGUSR1)
burn_the_cpu()
os.kill(os.getpid(), signal.SIGUSR2)
print(signal.getsignal(signal.SIGPROF) is not signal.SIG_DFL)
"""


def test_the_signal_sampler_writes_where_a_process_spent_its_cpu(tmp_path: Path) -> None:
    out = tmp_path / "samples.txt"
    env = {
        **get_default_environment(),
        "PYTHONPATH": str(SAMPLING),
        "AGENTPOST_BENCH_SAMPLES": str(out),
    }
    assert _python(BURNS_CPU, env, tmp_path) == "True"
    lines = out.read_text().splitlines()
    counts = {stack: int(count) for stack, _, count in (line.rpartition(" ") for line in lines)}
    assert sum(counts.values()) >= 20  # 0.4 s of CPU, one sample a tick of at most 10 ms
    in_burn = sum(n for stack, n in counts.items() if "burn_the_cpu (<string>:" in stack)
    assert in_burn >= 0.9 * sum(counts.values())
    assert all(stack.startswith("thread: MainThread;") for stack in counts)


def test_the_signal_sampler_does_nothing_unless_asked(tmp_path: Path) -> None:
    env = {**get_default_environment(), "PYTHONPATH": str(SAMPLING)}
    untouched = "import signal; print(signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL)"
    assert _python(untouched, env, tmp_path) == "True"


def _python(code: str, env: dict[str, str], cwd: Path) -> str:
    """What `code` printed, run by this interpreter in a process of its own."""
    ran = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=cwd
    )
    return ran.stdout.strip()


@pytest.mark.anyio
async def test_the_tracer_marks_each_request_from_its_arrival_to_its_answer(
    tmp_path: Path,
) -> None:
    from service_process import running_service

    out = tmp_path / "marks.txt"
    env = {"PYTHONPATH": str(TRACING), "AGENTPOST_BENCH_MARKS": str(out)}
    async with running_service(tmp_path, env) as service, service.client() as http:
        for _ in range(200):  # a batch of marks is written at a time
            assert (await http.get("/v1/inbox")).status_code == 401
    names = [line.split()[0] for line in out.read_text().splitlines()]
    first = names.index("in")
    request = names[first : names.index("out", first) + 1]
    assert request[:2] == ["in", "guard0"]
    assert {"tx0", "tx1"} <= set(names)  # each refusal is audited
    assert names.count("out") >= 100


def test_the_tracer_does_nothing_unless_asked(tmp_path: Path) -> None:
    env = {**get_default_environment(), "PYTHONPATH": str(TRACING)}
    untouched = (
        "from uvicorn.protocols.http import httptools_impl as h; "
        "print(h.HttpToolsProtocol.data_received.__module__)"
    )
    assert _python(untouched, env, tmp_path) == "uvicorn.protocols.http.httptools_impl"
