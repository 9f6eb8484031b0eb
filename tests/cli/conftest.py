"""The remote commands' tests run against `agentpost serve` as a real process on a loopback port."""

from service_process import service  # noqa: F401 - a fixture, registered by being imported
