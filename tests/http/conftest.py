"""HTTP tests run against `agentpost serve` as a real process on a loopback port."""

from backends import fresh_pg_url  # noqa: F401 - fixtures, registered by being imported
from service_process import service  # noqa: F401
