"""The public names are pinned: a new export is a decision, visible in one line of a review."""

from __future__ import annotations

from types import ModuleType

import pytest

import agentpost
import agentpost.services

PUBLIC = {
    agentpost: ["__version__"],
    agentpost.services: ["Inbox", "Mailbox", "Notices", "PostOffice"],
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
