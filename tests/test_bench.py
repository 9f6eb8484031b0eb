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
    imported = subprocess.run(
        [sys.executable, "-c", "import agentpost; print(agentpost.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout.strip()
    assert Path(imported).resolve() == Path(agentpost.__file__).resolve()
