"""Schemathesis over the served `/openapi.json`: at least 50 generated requests per operation,
valid and invalid alike, and no answer is a server error.

The server runs as a real process with the admin key (so admin operations are exercised too),
`max_wait_s` shortened so that generated long-polls end quickly, and the send rate and lockout
raised so that the fuzzer measures robustness, not the limits. The event stream never ends by
design; its own tests cover it.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import APIOperation, Case

from service_process import serve_command

ADMIN_KEY = "ap_fuzzing-admin-key-0123456789abcdef"
EXAMPLES = 50
_RUNNING = re.compile(rb"running on http://127\.0\.0\.1:(\d+)")


@pytest.fixture(scope="module")
def live_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("fuzz")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENTPOST_")},
        "AGENTPOST_HOME": str(home / "home"),
        "AGENTPOST_CONFIG": str(home / "none.toml"),
        "AGENTPOST_ADMIN_KEY": ADMIN_KEY,
        "AGENTPOST_MAX_WAIT_S": "0.2",
        "AGENTPOST_SEND_RATE_PER_MINUTE": "1000000",
        "AGENTPOST_LOCKOUT_FAILURES": "1000",  # the most it takes
        "AGENTPOST_OPEN_REGISTRATION": "true",
        "AGENTPOST_REGISTER_RATE_PER_HOUR": "1000000",
        "AGENTPOST_REGISTER_TOTAL_PER_HOUR": "1000000",
    }
    log = home / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(serve_command("--port", "0"), env=env, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 30
        while not (found := _RUNNING.search(log.read_bytes())):
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield f"http://127.0.0.1:{int(found.group(1))}"
    finally:
        process.terminate()
        process.wait(timeout=15)
        assert "Traceback" not in log.read_text(), log.read_text()


@pytest.fixture(scope="module")
def api(live_url: str) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(f"{live_url}/openapi.json")


def operations(api: schemathesis.BaseSchema) -> list[APIOperation]:
    return [result.ok() for result in api.get_all_operations()]


def fuzzing(
    operation: APIOperation, live_url: str, headers: dict[str, str], calls: dict[str, int]
) -> Callable[[], None]:
    """One operation as its own Hypothesis test: 50 examples apiece, however many fail."""

    @given(case=operation.as_strategy())
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        derandomize=True,  # the same examples on every run: a failure in CI is a regression
    )
    def call(case: Case) -> None:
        calls[operation.label] = calls.get(operation.label, 0) + 1
        response = case.call(base_url=live_url, headers=headers)
        assert response.status_code < 500, (case.method, case.formatted_path, response.text)

    return call


def test_no_operation_answers_with_a_server_error(
    api: schemathesis.BaseSchema, live_url: str
) -> None:
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    failures: list[str] = []
    calls: dict[str, int] = {}
    without_inputs: set[str] = set()
    for operation in operations(api):
        raw = operation.definition.raw
        if raw.get("operationId") == "events":
            continue
        if not raw.get("parameters") and "requestBody" not in raw:
            without_inputs.add(operation.label)

        call = fuzzing(operation, live_url, headers, calls)
        try:
            call()
        except AssertionError as failure:
            failures.append(str(failure))
    assert failures == []
    # An operation without inputs has one request to make; every other gets its 50.
    assert {label for label, n in calls.items() if n < EXAMPLES} <= without_inputs, calls


def test_every_operation_is_fuzzed_but_the_endless_event_stream(
    api: schemathesis.BaseSchema,
) -> None:
    ids = [operation.definition.raw.get("operationId") for operation in operations(api)]
    assert "events" in ids
    assert len(ids) >= 40
