"""The service's own routes beside `/v1`: liveness and readiness, as a load balancer asks them."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends import refuse_connections
from service_process import Service, running_service

pytestmark = pytest.mark.anyio


async def test_health_answers_without_a_key(service: Service) -> None:
    answer = await service.client().get("/health")
    assert answer.status_code == 200
    assert answer.json()["status"] == "ok"


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
        assert ready.json()["database"] == "postgresql"

        await refuse_connections(fresh_pg_url)
        try:
            unready = await anonymous.get("/ready")
            assert unready.status_code == 503
            assert unready.json()["error"]["code"] == "unavailable"
            assert (await anonymous.get("/health")).status_code == 200  # not one to restart
        finally:
            await refuse_connections(fresh_pg_url, refuse=False)

        assert (await anonymous.get("/ready")).status_code == 200  # back once it answers
