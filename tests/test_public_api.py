"""The public names are pinned: a new export is a decision, visible in one line of a review."""

from __future__ import annotations

from types import ModuleType

import pytest

import agentpost
import agentpost.client
import agentpost.services

PUBLIC = {
    agentpost: ["AgentpostError", "AsyncClient", "Client", "ErrorCode", "__version__"],
    agentpost.client: ["AsyncClient", "Client"],
    agentpost.services: [
        "Admin",
        "Directory",
        "Events",
        "Keys",
        "Mailbox",
        "PostOffice",
        "Webhooks",
    ],
}


@pytest.mark.parametrize("module", list(PUBLIC), ids=lambda m: m.__name__)
def test_the_public_names_are_exactly_these(module: ModuleType) -> None:
    assert sorted(module.__all__) == PUBLIC[module]


@pytest.mark.parametrize("module", list(PUBLIC), ids=lambda m: m.__name__)
def test_every_public_name_exists(module: ModuleType) -> None:
    assert [name for name in module.__all__ if not hasattr(module, name)] == []


def test_the_version_is_the_distributions() -> None:
    from importlib.metadata import version

    assert agentpost.__version__ == version("agentpost")


def test_the_clients_are_the_packages_own() -> None:
    assert agentpost.Client is agentpost.client.Client
    assert agentpost.AsyncClient is agentpost.client.AsyncClient


def test_the_error_the_clients_raise_is_importable_from_the_package() -> None:
    """The README says the clients raise `AgentpostError` with a stable code: a program
    catches it, and reads its code, as `agentpost.AgentpostError` and `agentpost.ErrorCode`."""
    from agentpost.domain.errors import AgentpostError, ErrorCode

    assert agentpost.AgentpostError is AgentpostError
    assert agentpost.ErrorCode is ErrorCode
    with pytest.raises(agentpost.AgentpostError) as caught:
        agentpost.Client("ftp://nowhere", "ap_x")
    assert caught.value.code is agentpost.ErrorCode.INVALID_ARGUMENT


def test_importing_agentpost_does_not_load_the_client() -> None:
    """Every module imports `agentpost` for its version: the client (and httpx) come only on use."""
    import subprocess
    import sys

    code = "import sys, agentpost; print('agentpost.client' in sys.modules, 'httpx' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]
