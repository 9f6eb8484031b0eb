"""`agentpost serve` as a user starts it: loopback unless told otherwise."""

from __future__ import annotations

import os
import shlex
import socket
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from service_process import AGENTPOST, serve_command


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


def test_a_port_another_server_holds_is_unavailable_not_a_refused_key() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            serve_command("--port", str(port)), capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 8  # unavailable; uvicorn's own 3 is a refused key's status
    assert f"error: unavailable: cannot listen on 127.0.0.1:{port}" in done.stderr


def test_a_database_that_cannot_open_says_why_with_its_code(tmp_path: Path) -> None:
    done = subprocess.run(
        serve_command("--port", "0"),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "AGENTPOST_DATABASE_URL": f"sqlite:///{tmp_path}"},
    )
    assert done.returncode == 2
    assert f"error: invalid_argument: the database {tmp_path} is not a file" in done.stderr


@pytest.mark.postgres
def test_a_start_that_fails_for_another_reason_blames_it_not_the_port(
    fresh_pg_url: str,
) -> None:
    """PostgreSQL refuses a setting the URL asks for: the last line said `cannot listen`."""
    done = subprocess.run(
        serve_command("--port", "0"),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "AGENTPOST_DATABASE_URL": f"{fresh_pg_url}?no_such_setting=1"},
    )
    assert done.returncode == 8
    assert 'unrecognized configuration parameter "no_such_setting"' in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: unavailable: could not start ("), last
    assert "cannot listen" not in done.stderr


def test_a_database_a_newer_agentpost_migrated_is_refused_untouched(tmp_path: Path) -> None:
    home = tmp_path / "home"
    database = home / "agentpost.db"
    home.mkdir(mode=0o700)
    with sqlite3.connect(database) as conn:  # as a newer release would have left it
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)")
        conn.execute("INSERT INTO alembic_version VALUES ('9999')")
    done = subprocess.run(
        serve_command("--port", "0"),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "AGENTPOST_HOME": str(home)},
    )
    assert done.returncode == 8
    assert "error: unavailable: the database's schema (9999) is newer" in done.stderr
    with sqlite3.connect(database) as conn:
        tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    assert tables == [("alembic_version",)]


def test_a_first_start_that_cannot_listen_still_shows_the_admin_key_it_created(
    tmp_path: Path,
) -> None:
    """The key is stored before the port turns out taken; no later start prints it."""
    env = {**os.environ, "AGENTPOST_HOME": str(tmp_path)}
    env.pop("AGENTPOST_ADMIN_KEY", None)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            serve_command("--port", str(port)), capture_output=True, text=True, timeout=60, env=env
        )
    assert done.returncode == 8
    key = (tmp_path / "admin.key").read_text().strip()
    assert f"created the admin key, stored in {tmp_path / 'admin.key'}" in done.stderr
    assert key in done.stderr
    assert done.stderr.rstrip().endswith(
        f"error: unavailable: cannot listen on 127.0.0.1:{port} (the log above says why)"
    )


def test_an_allowed_origin_of_no_usable_form_is_refused_at_start_naming_it() -> None:
    """Dropped, it left refusals that told the user to list in `allowed_origins` the very
    origin listed there (a trailing slash, say)."""
    done = subprocess.run(
        serve_command("--port", "0"),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "AGENTPOST_ALLOWED_ORIGINS": '["https://agents.example/"]'},
    )
    assert done.returncode == 2
    assert "error: invalid_argument: allowed_origins holds 'https://agents.example/'" in done.stderr


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("AGENTPOST_ALLOWED_HOSTS", '["https://agents.example/mcp"]'),
        ("AGENTPOST_ALLOWED_ORIGINS", '["https://agents.example/"]'),
        ("AGENTPOST_TRUSTED_PROXIES", '["the proxy"]'),
        ("AGENTPOST_TOOL_GROUPS", '["everything"]'),
    ],
)
def test_a_first_start_with_a_bad_setting_says_only_why_and_makes_no_admin_key(
    tmp_path: Path, setting: str, value: str
) -> None:
    """A first start refused for a bad setting printed the new admin key's banner after its
    refusal (`curl … with this key`) and left the key behind, as if it served."""
    env = {**os.environ, "AGENTPOST_HOME": str(tmp_path), setting: value}
    env.pop("AGENTPOST_ADMIN_KEY", None)
    done = subprocess.run(
        serve_command("--port", "0"), capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 2
    name = setting.removeprefix("AGENTPOST_").lower()
    [said] = done.stderr.strip().splitlines()
    assert said.startswith("error: invalid_argument: ")
    assert name in said
    assert not (tmp_path / "admin.key").exists()


def test_the_first_starts_command_to_create_an_agent_runs_as_printed_off_path(
    tmp_path: Path,
) -> None:
    """README's install leaves `agentpost` in `.venv/bin`, off PATH: the banner's bare
    `agentpost admin create-agent …` answered "command not found"."""
    assert AGENTPOST.exists(), "the console script, as README's install leaves it"
    env = {**os.environ, "AGENTPOST_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    env.pop("AGENTPOST_ADMIN_KEY", None)
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen(serve_command("--port", "0"), env=env, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 30
        while b"running on http://" not in log.read_bytes():
            assert server.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        [printed] = [
            line.strip()
            for line in log.read_text().splitlines()
            if "admin create-agent alice" in line
        ]
        assert printed.startswith(f"{AGENTPOST} admin create-agent alice --url http://")
        made = subprocess.run(
            shlex.split(printed), capture_output=True, text=True, timeout=60, env=env
        )
        assert made.returncode == 0, made.stderr
        assert made.stdout.strip().startswith("ap_")
    finally:
        server.terminate()
        server.wait(timeout=15)
