"""The post office: the store and every service over it, opened and closed together."""

from __future__ import annotations

import time

from agentpost.config import Settings
from agentpost.services.admin import Admin
from agentpost.services.channels import Channels
from agentpost.services.directory import Directory
from agentpost.services.events import Events
from agentpost.services.keys import Keys
from agentpost.services.leadership import Leadership
from agentpost.services.mailbox import Mailbox
from agentpost.services.presence import PresenceService
from agentpost.services.requests import Requests
from agentpost.services.reservations import Reservations
from agentpost.services.sweeper import Sweeper
from agentpost.services.tasks import Tasks
from agentpost.services.webhooks import Webhooks
from agentpost.store.database import Clock, Store


class PostOffice:
    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.presence = PresenceService(store, settings)
        self.mailbox = Mailbox(store, settings)
        self.sweeper = Sweeper(self.mailbox)
        self.channels = Channels(store)
        self.keys = Keys(store, settings)
        self.admin = Admin(store, settings)
        self.directory = Directory(store, settings)
        self.events = Events(store)
        self.webhooks = Webhooks(store, settings)
        self.tasks = Tasks(store, settings, self.mailbox)
        self.requests = Requests(store, settings, self.mailbox)
        self.reservations = Reservations(store, settings, self.presence)
        self.leadership = Leadership(store, settings, self.mailbox, self.presence)

    @classmethod
    async def open(cls, settings: Settings, *, clock: Clock = time.time) -> PostOffice:
        store = await Store.open(settings.resolved_database_url, clock=clock)
        return cls(store, settings)

    def stop_waiting(self) -> None:
        """Shutting down: long-polls and requests that wait answer now, as timed out."""
        self.store.stop_waiting()

    async def aclose(self) -> None:
        await self.store.aclose()
