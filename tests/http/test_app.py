"""The service's own routes beside `/v1`: liveness and readiness, as a load balancer asks them;
the docs page, as a person reads it in a browser."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentpost.store.migrate import SCHEMA_HEAD
from backends import refuse_connections, refuse_writes
from service_process import Service, eventually, running_service

pytestmark = pytest.mark.anyio

SERVICE_DOC = Path(__file__).resolve().parents[2] / "docs" / "SERVICE.md"


def documented_readiness() -> Any:
    """The answer docs/SERVICE.md shows a load balancer's health check getting from `/ready`."""
    found = re.search(r'`(\{"status": "ready".*?\})`', SERVICE_DOC.read_text())
    assert found, "docs/SERVICE.md shows no answer of /ready"
    return json.loads(found.group(1))


async def test_health_answers_without_a_key(service: Service) -> None:
    answer = await service.client().get("/health")
    assert answer.status_code == 200
    assert answer.json()["status"] == "ok"


async def test_each_answer_is_in_the_access_log_once_with_its_status(service: Service) -> None:
    """The line is written after the answer went out (not on its way), in uvicorn's own
    format; the protocol's line, written as an answer starts, is off, so none is doubled."""
    async with service.client() as http:
        assert (await http.get("/health?probe=1")).status_code == 200
        assert (await http.get("/v1/inbox")).status_code == 401

    def lines(request: str) -> list[str]:
        return [line for line in service.log.read_text().splitlines() if request in line]

    async def logged() -> bool:
        return bool(lines('"GET /v1/inbox HTTP/1.1"'))

    await eventually(logged)
    [health] = lines('"GET /health?probe=1 HTTP/1.1"')
    assert re.search(r'127\.0\.0\.1:\d+ - "GET /health\?probe=1 HTTP/1\.1" 200', health)
    [inbox] = lines('"GET /v1/inbox HTTP/1.1"')
    assert " 401" in inbox


async def test_health_and_readiness_answer_a_head_check_with_their_status_alone(
    service: Service,
) -> None:
    """A load balancer may check with HEAD (HAProxy's `option httpchk HEAD /ready`, many
    uptime monitors): both answered 405, and every replica was taken for down."""
    anonymous = service.client()
    for path in ("/health", "/ready"):
        answer = await anonymous.head(path)
        assert answer.status_code == 200, path
        assert answer.content == b""
    refused = await anonymous.post("/ready")
    assert refused.status_code == 405
    assert refused.headers["allow"] == "GET, HEAD"


async def test_readiness_answers_without_a_key_while_the_database_answers(
    service: Service,
) -> None:
    answer = await service.client().get("/ready")
    assert answer.status_code == 200
    ready = answer.json()
    assert ready["status"] == "ready"
    assert ready["database"] == "sqlite"
    assert ready["hears_other_processes"] is True
    assert ready["schema"]


@pytest.mark.postgres
async def test_a_replica_whose_database_is_out_of_reach_is_unready_yet_alive(
    tmp_path: Path, fresh_pg_url: str
) -> None:
    env = {"AGENTPOST_HOME": str(tmp_path / "home"), "AGENTPOST_DATABASE_URL": fresh_pg_url}
    async with running_service(tmp_path, env) as replica:
        anonymous = replica.client()
        ready = await anonymous.get("/ready")
        assert ready.status_code == 200
        assert ready.json() == documented_readiness()

        await refuse_connections(fresh_pg_url)
        try:
            unready = await anonymous.get("/ready")
            assert unready.status_code == 503
            assert unready.json()["error"]["code"] == "unavailable"
            assert (await anonymous.get("/health")).status_code == 200  # not one to restart
        finally:
            await refuse_connections(fresh_pg_url, refuse=False)

        assert (await anonymous.get("/ready")).status_code == 200  # back once it answers


@pytest.mark.postgres
async def test_a_replica_whose_database_takes_no_writes_is_unready_and_says_why(
    tmp_path: Path, fresh_pg_url: str
) -> None:
    """A standby that a failover left the URL naming, or a database set read-only, answers
    reads: the replica can store no mail all the same, and the load balancer must hear so."""
    env = {"AGENTPOST_HOME": str(tmp_path / "home"), "AGENTPOST_DATABASE_URL": fresh_pg_url}
    async with running_service(tmp_path, env) as replica:
        anonymous = replica.client()
        await refuse_writes(fresh_pg_url)
        try:
            unready = await anonymous.get("/ready")
            assert unready.status_code == 503
            error = unready.json()["error"]
            assert error["code"] == "unavailable"
            assert "read-only" in error["message"]
            assert (await anonymous.get("/health")).status_code == 200
        finally:
            await refuse_writes(fresh_pg_url, refuse=False)
        assert (await anonymous.get("/ready")).status_code == 200


async def test_a_replica_whose_database_a_newer_release_migrated_is_unready_and_says_why(
    service: Service,
) -> None:
    """A rolling upgrade: a newer replica migrated the database while this one ran. It would
    refuse to start on it now, yet answered ready (naming the new schema as its own), and the
    load balancer kept sending it writes the new schema may not take."""
    database = service.home / "agentpost.db"
    with sqlite3.connect(database) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    anonymous = service.client()
    unready = await anonymous.get("/ready")
    assert unready.status_code == 503
    assert unready.json()["error"] == {
        "code": "unavailable",
        "message": f"the database's schema (9999) is newer than this agentpost knows"
        f" ({SCHEMA_HEAD}); a newer agentpost migrated it while this process ran; restart this"
        " process (the MCP server, the service) on the newer release",
    }
    assert (await anonymous.get("/health")).status_code == 200  # not one to restart
    with sqlite3.connect(database) as conn:
        conn.execute("UPDATE alembic_version SET version_num = ?", (SCHEMA_HEAD,))
    assert (await anonymous.get("/ready")).status_code == 200


@contextmanager
def small_disk(path: Path) -> Iterator[Path]:
    """A file system of its own at `path`, small enough to fill (a tmpfs: root only)."""
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(path)],
        check=False,
        capture_output=True,
    )
    if done.returncode != 0:
        cannot = f"cannot mount a file system here: {done.stderr.decode().strip()}"
        if os.geteuid() == 0:
            pytest.fail(cannot)  # CI runs as root: the test must run there, never pass unrun
        pytest.skip(cannot)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """`path` may not be written, even by root (who ignores its mode): immutable."""
    path.chmod(0o400)
    immutable = os.geteuid() == 0
    if immutable:
        subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        path.chmod(0o600)


def fill(path: Path) -> None:
    """Until the disk is full."""
    with contextlib.suppress(OSError), path.open("wb", buffering=0) as out:
        while True:
            out.write(b"\0" * 65536)


async def test_a_replica_whose_sqlite_file_takes_no_writes_is_unready_and_says_why(
    tmp_path: Path,
) -> None:
    """A full disk, or a file made read-only, leaves the database readable: /ready
    says the replica can store no mail, and why; /health still answers."""
    with small_disk(tmp_path / "disk") as disk:
        env = {"AGENTPOST_HOME": str(disk / "home")}
        async with running_service(tmp_path, env) as replica:
            anonymous = replica.client()
            assert (await anonymous.get("/ready")).status_code == 200

            fill(disk / "ballast")
            full = await anonymous.get("/ready")
            assert full.status_code == 503, full.text
            assert "full" in full.json()["error"]["message"]
            assert (await anonymous.get("/health")).status_code == 200
            (disk / "ballast").unlink()
            assert (await anonymous.get("/ready")).status_code == 200

            with read_only(disk / "home" / "agentpost.db"):
                frozen = await anonymous.get("/ready")
                assert frozen.status_code == 503, frozen.text
                assert "read-only" in frozen.json()["error"]["message"]
                assert (await anonymous.head("/ready")).status_code == 503
            assert (await anonymous.get("/ready")).status_code == 200


async def test_the_docs_page_loads_swagger_ui_from_the_service_itself(service: Service) -> None:
    """No CDN: a service on a network without the internet still shows its docs."""
    anonymous = service.client()
    page = (await anonymous.get("/docs")).text
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert assets
    assert all(url.startswith("/docs/static/") for url in assets), assets
    for url in assets:
        answer = await anonymous.get(url)
        assert answer.status_code == 200, url
    script = next(url for url in assets if url.endswith(".js"))
    served = await anonymous.get(script)
    assert "javascript" in served.headers["content-type"]
    assert "SwaggerUIBundle" in served.text


async def test_the_docs_page_shows_every_operation_in_a_browser_that_reaches_no_other_host(
    service: Service, tmp_path: Path
) -> None:
    """Headless Chromium with every host but the service's own unresolvable: what it renders
    came from the service alone."""
    chromium = shutil.which("chromium")
    assert chromium, "no chromium on PATH: scripts/test installs Debian's (as root)"
    spec = (await service.client().get("/openapi.json")).json()
    operations = [(method, path) for path, item in spec["paths"].items() for method in item]
    with anyio.fail_after(60):
        browser = await anyio.run_process(
            [
                chromium,
                "--headless",
                "--no-sandbox",  # CI runs as root
                "--disable-gpu",
                "--disable-dev-shm-usage",
                f"--user-data-dir={tmp_path / 'chromium'}",
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                "--virtual-time-budget=20000",  # until the page's scripts have rendered it
                "--dump-dom",
                f"{service.url}/docs",
            ],
        )
    dom = browser.stdout.decode()
    shown = re.findall(r'class="opblock opblock-(\w+)', dom)
    assert sorted(shown) == sorted(method for method, _ in operations)
    assert set(re.findall(r'data-path="([^"]+)"', dom)) == {path for _, path in operations}
