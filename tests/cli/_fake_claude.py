"""A stand-in for Claude Code in tests/cli/test_hook.py and test_guard.py: `python
_fake_claude.py AGENTPOST NAME`.

Starts `AGENTPOST mcp` as its child (AGENTPOST_AGENT=NAME in that child's environment only),
initializes it over its pipes so its session is registered, prints `ready`; then for every line
on stdin: a JSON object (a hook's input) runs `AGENTPOST hook claude` as another child and prints
its stdout as one JSON string; a JSON array is a command, run as another child as Claude Code's
Bash tool runs one, and prints {"returncode", "stdout", "stderr"}; the JSON string "restart"
closes its `agentpost mcp` and starts another, as Claude Code's reconnect does, and prints
"ready" once it is initialized. Closing stdin ends both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def serve(agentpost: str, name: str) -> subprocess.Popen[str]:
    """`agentpost mcp` started and initialized: its session is registered."""
    server = subprocess.Popen(
        [agentpost, "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "AGENTPOST_AGENT": name, "AGENTPOST_PROJECT": "apollo"},
        text=True,
    )
    assert server.stdin is not None
    assert server.stdout is not None
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "fake-claude", "version": "0"},
        },
    }
    server.stdin.write(json.dumps(initialize) + "\n")
    server.stdin.flush()
    while "result" not in json.loads(server.stdout.readline()):
        pass
    return server


def close(server: subprocess.Popen[str]) -> None:
    assert server.stdin is not None
    server.stdin.close()
    server.wait(timeout=30)


def main() -> None:
    agentpost, name = sys.argv[1], sys.argv[2]
    server = serve(agentpost, name)
    print("ready", flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if command == "restart":
            close(server)
            server = serve(agentpost, name)
            print(json.dumps("ready"), flush=True)
            continue
        if isinstance(command, list):
            ran = subprocess.run(command, capture_output=True, text=True, check=False)
            said = {"returncode": ran.returncode, "stdout": ran.stdout, "stderr": ran.stderr}
            print(json.dumps(said), flush=True)
            continue
        done = subprocess.run(
            [agentpost, "hook", "claude"], input=line, capture_output=True, text=True, check=True
        )
        sys.stderr.write(done.stderr)
        print(json.dumps(done.stdout), flush=True)
    close(server)


if __name__ == "__main__":
    main()
