"""A stand-in for Claude Code (tests/cli/_fake_claude.py), for the tests of what Claude Code runs
beside its `agentpost mcp`: the hook (tests/cli/test_hook.py) and `git commit` under the guard
(tests/cli/test_guard.py). Its children find their agent through the process tree, as the real
ones do."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

AGENTPOST = Path(sys.executable).with_name("agentpost")
FAKE_CLAUDE = Path(__file__).parent / "cli" / "_fake_claude.py"
WAIT_S = 60


@contextmanager
def claude_code(
    agent: str, *, cwd: Path, log: Path, env: Mapping[str, str] | None = None
) -> Iterator[subprocess.Popen[str]]:
    """Claude Code working in `cwd`: it has started a real `agentpost mcp` speaking as `agent`
    (named in that child's environment only), and runs hooks and commands as its children;
    its stderr goes to `log`. Leaving ends both."""
    with (
        log.open("w") as errlog,
        subprocess.Popen(
            [sys.executable, str(FAKE_CLAUDE), str(AGENTPOST), agent],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errlog,
            text=True,
            cwd=cwd,
            env=None if env is None else dict(env),
        ) as process,
    ):
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        try:
            yield process
        finally:
            assert process.stdin is not None
            process.stdin.close()
            process.wait(timeout=WAIT_S)


def ask(claude: subprocess.Popen[str], request: Any) -> Any:
    """Hand Claude Code one request (a hook's JSON object, or a command as a list) and read its
    answer (see tests/cli/_fake_claude.py)."""
    assert claude.stdin is not None
    assert claude.stdout is not None
    claude.stdin.write(json.dumps(request) + "\n")
    claude.stdin.flush()
    return json.loads(claude.stdout.readline())
