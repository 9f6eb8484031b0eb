"""Store tests run on both databases: see `tests/backends.py`; `lite` is SQLite alone."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentpost.store.database import Store
from backends import (  # noqa: F401 - fixtures, registered by being imported here
    backend,
    clock,
    collated_database_url,
    collated_store,
    database_url,
    fresh_database_url,
    fresh_pg_url,
    human_collated_pg_url,
    pg_session_database,
    sqlite_template,
    store,
)


@pytest.fixture
async def lite(tmp_path: Path) -> AsyncIterator[Store]:
    """A SQLite store of its own, on the real clock: for what only a shared file has."""
    opened = await Store.open(f"sqlite:///{tmp_path / 'agentpost.db'}")
    try:
        yield opened
    finally:
        await opened.aclose()
