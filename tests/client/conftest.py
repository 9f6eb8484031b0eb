"""The Python client against `agentpost serve` as a real process on a loopback port."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from remote_office import Office
from service_process import Service, service  # noqa: F401 - a fixture, registered by import


@pytest.fixture
async def office(service: Service) -> AsyncIterator[Office]:  # noqa: F811 - the fixture
    """Clients of the test's service: `office.admin`, `await office.agent(name)`."""
    opened = Office(service)
    try:
        yield opened
    finally:
        await opened.aclose()
