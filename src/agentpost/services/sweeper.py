"""Keeping the post office swept: unread mail becomes an `expired` tombstone when its TTL falls
due, a task's parties are told once when its due passes unfinished, and handled mail past the
retention is purged hourly (with the rest kept for a while: `services.retention`).

A sender who asked for a TTL, or watches `message.expired` on its event stream or a webhook,
hears of the expiry when it happens, not at the next hourly sweep. Every process that serves
agents runs a sweeper (`agentpost serve`, each `agentpost mcp`), so no daemon is needed, and
any of them expires anyone's mail: it sleeps until the earliest TTL falls due; mail sent with
a TTL through its own process wakes it sooner; mail another process sent (a one-shot command's
say) is found on a look at least every `LOOK_EVERY_S`.
"""

from __future__ import annotations

import logging
import math

import anyio

from agentpost.domain.errors import AgentpostError
from agentpost.retries import RetryLog
from agentpost.services.mailbox import Mailbox
from agentpost.services.tasks import Tasks

log = logging.getLogger(__name__)
_retries = RetryLog(log)

SWEEP_EVERY_S = 3600.0
LOOK_EVERY_S = 60.0


class Sweeper:
    def __init__(
        self,
        mailbox: Mailbox,
        *,
        tasks: Tasks | None = None,
        sweep_every_s: float = SWEEP_EVERY_S,
        look_every_s: float = LOOK_EVERY_S,
    ) -> None:
        self.mailbox = mailbox
        self.tasks = tasks
        self.sweep_every_s = sweep_every_s
        # Mail sent under the default TTL by any process falls due no sooner than that after
        # a look: looking that often, the look before finds it, and the sweeper waits for it.
        default_ttl_s = mailbox.settings.default_ttl_s
        self.look_every_s = (
            look_every_s if default_ttl_s is None else min(look_every_s, default_ttl_s)
        )
        self._looks_at = math.inf  # store clock
        self._alarm: anyio.Event | None = None
        mailbox.on_expiry = self.expires
        if tasks is not None:
            tasks.on_due = self.expires

    def expires(self, at: float) -> None:
        """Mail sent here falls due at `at` (store clock), or a task delegated here: look then,
        if that is sooner than planned. Costs a comparison when it is not, as for every send
        under a default TTL."""
        if at < self._looks_at and self._alarm is not None:
            self._alarm.set()

    async def run(self) -> None:
        """Sweep now, then expire mail as it falls due and sweep again hourly, until cancelled.
        A failed round (a busy database) is logged, and the next look tries again."""
        clock = self.mailbox.store.clock
        sweep_at = -math.inf
        while True:
            # Armed before the look: mail sent meanwhile, after the look has passed it by,
            # still rings the alarm, and we look once more.
            self._alarm = anyio.Event()
            self._looks_at = math.inf
            next_look = clock() + self.look_every_s
            try:
                if clock() >= sweep_at:
                    await self.mailbox.sweep()
                    sweep_at = clock() + self.sweep_every_s
                due = await self.mailbox.expire_due()
                due_at = math.inf if due is None else due
                if self.tasks is not None:
                    passes = await self.tasks.tell_overdue()
                    due_at = due_at if passes is None else min(due_at, passes)
                next_look = min(clock() + self.look_every_s, sweep_at, due_at)
            except AgentpostError as err:  # tried again at the next look, not at once
                _retries.failed("sweep", err)
            else:
                _retries.recovered("sweep")
            now = clock()
            self._looks_at = next_look
            with anyio.move_on_after(max(0.0, self._looks_at - now)):
                await self._alarm.wait()
