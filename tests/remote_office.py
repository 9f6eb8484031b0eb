"""Clients of a running `agentpost serve` (tests/service_process.py), made with the Python client.

`Office` hands out the owner's client (its admin key) and new agents' clients, each agent created
through the client itself; every client is closed at the end.
"""

from __future__ import annotations

from typing import Any

from agentpost.client import AsyncClient
from service_process import Service


class Office:
    """Clients of one running service."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.url = service.url
        self.opened: list[AsyncClient] = []

    def client(self, key: str | None, **options: Any) -> AsyncClient:
        client = AsyncClient(self.url, key, **options)
        self.opened.append(client)
        return client

    @property
    def admin(self) -> AsyncClient:
        return self.client(self.service.admin_key)

    async def new_key(self, name: str, **fields: Any) -> str:
        """Create an agent with the owner's key; its key's secret."""
        _, issued = await self.admin.admin_create_agent(name, **fields)
        return issued.key

    async def agent(self, name: str, **fields: Any) -> AsyncClient:
        """A client speaking as a new agent `name`."""
        return self.client(await self.new_key(name, **fields))

    async def aclose(self) -> None:
        for client in self.opened:
            await client.aclose()
