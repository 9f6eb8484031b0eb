"""The post office: the store and every service over it, opened and closed together."""

from __future__ import annotations

import time

from agentpost.config import Settings
from agentpost.services.channels import Channels
from agentpost.services.mailbox import Mailbox
from agentpost.services.presence import PresenceService
from agentpost.store.database import Clock, Store


class PostOffice:
    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.presence = PresenceService(store, settings)
        self.mailbox = Mailbox(store, settings)
        self.channels = Channels(store)

    @classmethod
    async def open(cls, settings: Settings, *, clock: Clock = time.time) -> PostOffice:
        store = await Store.open(settings.resolved_database_url, clock=clock)
        return cls(store, settings)

    async def aclose(self) -> None:
        await self.store.aclose()
