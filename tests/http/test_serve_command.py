"""`agentpost serve` as a user starts it: loopback unless told otherwise."""

from __future__ import annotations

import subprocess

from service_process import serve_command


def test_listening_beyond_loopback_needs_allow_remote() -> None:
    refused = subprocess.run(
        serve_command("--host", "0.0.0.0", "--port", "0"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2
    assert "invalid_argument" in refused.stderr
    assert "--allow-remote" in refused.stderr


def test_a_port_beyond_65535_is_refused_not_wrapped_round() -> None:
    refused = subprocess.run(
        serve_command("--port", "70000"), capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2
    assert "--port" in refused.stderr
