"""Service tests run a whole post office on both databases: see `tests/backends.py`."""

from backends import (  # noqa: F401 - fixtures, registered by being imported here
    backend,
    clock,
    database_url,
    office,
    open_office,
    pg_session_database,
    sqlite_template,
)
