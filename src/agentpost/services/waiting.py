"""How many waits one agent may hold open in one process.

A long-poll (`wait`), an event stream or a question awaiting its answer (`request`) each hold a
connection, a file descriptor and a task for as long as they wait; a key that opened them
without end would run the process out of them for everyone. Counted where they wait, by the
store's watches of the agent, so the count is this process's (each replica has its own).
"""

from __future__ import annotations

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.models import Caller
from agentpost.store.database import Store
from agentpost.store.wakeups import Watch

OPEN_WAIT_RETRY_S = 5.0


def check_room_to_wait(store: Store, caller: Caller, limit: int) -> None:
    """`rate_limited` when the caller already holds `limit` waits open in this process."""
    if store.watching(caller.agent) >= limit:
        raise AgentpostError(
            ErrorCode.RATE_LIMITED,
            f"an agent holds at most {limit} waits, event streams and questions open at once "
            "in one process; let one end first",
            details={"limit": limit},
            retry_after_s=OPEN_WAIT_RETRY_S,
        )


def held_watch(store: Store, caller: Caller, limit: int) -> Watch:
    """`store.watch(caller.agent)` for a wait held open, within `check_room_to_wait`."""
    check_room_to_wait(store, caller, limit)
    return store.watch(caller.agent)
