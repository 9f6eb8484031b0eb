"""Who may administer, and what the audit keeps of those refused.

Every refusal of an admin act is an attempt the owner reads the log to find, but an agent key
looping on an admin route must not grow the log, nor take the write lock, once a request: the
log keeps one row per actor and act per lockout window (per process, as the turned-off keys'
rows are kept, `services.keys`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from agentpost.config import Settings
from agentpost.domain.errors import forbidden
from agentpost.domain.models import Caller
from agentpost.domain.names import is_valid_name
from agentpost.store import audit
from agentpost.store.database import Store

MAX_REMEMBERED = 4_096
"""Refusals remembered at once; past this, the longest unseen are forgotten (kept again)."""


class OncePerWindow:
    """Whether something is to be told now: once per `window_s` per key, bounded in memory."""

    def __init__(self, window_s: float) -> None:
        self._window_s = window_s
        self._told: OrderedDict[Hashable, float] = OrderedDict()

    def due(self, key: Hashable, now: float) -> bool:
        told = self._told.get(key)
        if told is not None and now - told < self._window_s:
            return False
        self._told[key] = now
        self._told.move_to_end(key)
        while len(self._told) > MAX_REMEMBERED:
            self._told.popitem(last=False)
        return True


class AdminGate:
    def __init__(self, store: Store, settings: Settings) -> None:
        self._store = store
        self._kept = OncePerWindow(settings.lockout_s)

    async def require(self, caller: Caller, act: str, target: object = None) -> None:
        """Refuse a caller without an admin key, before anything is looked at, and keep the
        attempt in the audit log. Metadata only: who, from where, which act, and the agent it
        aimed at when `target` is a well-formed name (else it is anyone's text)."""
        if caller.admin:
            return
        store = self._store
        now = store.clock()
        if self._kept.due((caller.agent, caller.key_id, act), now):
            aimed = target if isinstance(target, str) and is_valid_name(target) else None
            await store.write(
                lambda conn: audit.record(
                    conn,
                    at=now,
                    actor=caller.agent,
                    action="admin.refused",
                    target=aimed,
                    ip=caller.ip,
                    detail={"act": act},
                )
            )
        raise forbidden("this needs an admin key")
