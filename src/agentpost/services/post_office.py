"""The post office: the store and every service over it, opened and closed together."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import anyio

from agentpost.config import Settings
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.services.admin import Admin
from agentpost.services.admin_gate import AdminGate
from agentpost.services.admission import Admission
from agentpost.services.channels import Channels
from agentpost.services.directory import Directory
from agentpost.services.events import Events
from agentpost.services.history import History
from agentpost.services.keys import Keys
from agentpost.services.leadership import Leadership
from agentpost.services.mailbox import Mailbox
from agentpost.services.presence import PresenceService
from agentpost.services.requests import Requests
from agentpost.services.reservations import Reservations
from agentpost.services.sweeper import Sweeper
from agentpost.services.tasks import Tasks
from agentpost.services.webhooks import Webhooks
from agentpost.store import migrate
from agentpost.store.database import Clock, Store

READY_WITHIN_S = 5.0
"""How long a readiness check waits for the database: a load balancer's own check gives up
after a few seconds, and a replica whose database takes longer should be passed over."""


@dataclass(frozen=True, slots=True)
class Readiness:
    database: str
    """`sqlite` or `postgresql`."""
    schema: str
    """The schema revision the database holds."""
    hears_other_processes: bool
    """False while a replica cannot hear the others' commits (it then polls each second)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": "ready",
            "database": self.database,
            "schema": self.schema,
            "hears_other_processes": self.hears_other_processes,
        }


class PostOffice:
    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.presence = PresenceService(store, settings)
        self.admission = Admission(store)
        self.mailbox = Mailbox(store, settings)
        self.history = History(store, settings)
        self.channels = Channels(store, settings)
        gate = AdminGate(store, settings)  # one memory of refused admin acts for all three
        self.keys = Keys(store, settings, gate)
        self.admin = Admin(store, settings, self.mailbox, gate)
        self.directory = Directory(store, settings)
        self.events = Events(store, settings.max_open_waits)
        self.webhooks = Webhooks(store, settings)
        self.tasks = Tasks(store, settings, self.mailbox)
        self.sweeper = Sweeper(self.mailbox, tasks=self.tasks)
        self.requests = Requests(store, settings, self.mailbox)
        self.reservations = Reservations(store, settings, self.presence)
        self.leadership = Leadership(store, settings, self.mailbox, self.presence, gate)

    @classmethod
    async def open(cls, settings: Settings, *, clock: Clock = time.time) -> PostOffice:
        store = await Store.open(settings.resolved_database_url, clock=clock)
        return cls(store, settings)

    async def readiness(self) -> Readiness:
        """Whether this process can serve requests now: its database answers a read, within
        `READY_WITHIN_S`, holds agentpost's schema (not a newer one), and takes writes (a
        replica that reads but cannot store mail is no use to a sender). Raises `unavailable`
        otherwise, for a load balancer to send requests to another replica meanwhile."""
        try:
            with anyio.fail_after(READY_WITHIN_S):
                schema = await self.store.schema_revision()
                refusal = await self.store.refuses_writes()
        except TimeoutError:
            raise AgentpostError(
                ErrorCode.UNAVAILABLE,
                f"the database did not answer within {READY_WITHIN_S:g} s",
            ) from None
        if schema is None:
            raise AgentpostError(ErrorCode.UNAVAILABLE, "the database holds no agentpost schema")
        # A newer replica migrated it while this one ran: the load balancer must drain this one,
        # which would refuse to start on it now and may not write what the new schema holds.
        if (newer := migrate.newer_than_known(schema, running=True)) is not None:
            raise newer
        if refusal is not None:
            raise AgentpostError(ErrorCode.UNAVAILABLE, f"{refusal}: this replica stores no mail")
        return Readiness(
            database="sqlite" if self.store.is_sqlite else "postgresql",
            schema=schema,
            hears_other_processes=self.store.hears_other_processes,
        )

    def stop_waiting(self) -> None:
        """Shutting down: long-polls and requests that wait answer now, as timed out."""
        self.store.stop_waiting()

    async def aclose(self) -> None:
        await self.store.aclose()
