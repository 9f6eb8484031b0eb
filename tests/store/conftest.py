"""Store tests run on both databases: see `tests/backends.py`."""

from backends import (  # noqa: F401 - fixtures, registered by being imported here
    backend,
    clock,
    database_url,
    fresh_database_url,
    fresh_pg_url,
    pg_session_database,
    sqlite_template,
    store,
)
