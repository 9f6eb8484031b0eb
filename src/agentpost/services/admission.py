"""Whether a local session may still act: the owner stops an agent by disabling it, which ends
its sessions, and an `agentpost mcp` process already running speaks for its session with no
key to refuse it (over HTTP the key's check does). So each of its calls is asked here first,
for reads too: a disabled agent's unread mail stays unread until it is enabled again."""

from __future__ import annotations

from typing import Any

from agentpost.domain.errors import AgentpostError, ErrorCode, not_found
from agentpost.domain.models import Caller
from agentpost.store import agents as rows
from agentpost.store.database import Connection, Store

ENDED = "this session has ended (its agent was disabled, say): start `agentpost mcp` again"
"""After the agent is enabled again its old sessions stay ended, as `claim_leadership`
already said: the process must start a new one, which the client's reconnect does."""


class Admission:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._admitted: dict[tuple[str, str | None], int] = {}
        """Callers admitted while `Store.accounts_version` stood at the number kept: as
        authentication's callers (`services.keys`), they stand while it does, since disabling
        an agent or ending a session makes it grow, in this process or another."""

    async def admit(self, caller: Caller) -> None:
        """Refuse the call of a disabled agent (`gone`, as the command line and mail to it
        are) or of a session that disabling ended (`not_found`, as a session the service no
        longer knows is)."""
        asked = (caller.agent, caller.session_id)
        version = self.store.accounts_version()
        if version is not None and self._admitted.get(asked) == version:
            return

        def look(conn: Connection) -> tuple[Any, Any]:
            agent = rows.get_agent(conn, caller.agent)
            session = rows.get_session(conn, caller.session_id) if caller.session_id else None
            return agent, session

        agent, session = await self.store.glance(look)
        if agent is not None and agent.disabled_at is not None:
            raise AgentpostError(ErrorCode.GONE, f"agent {caller.agent!r} is disabled")
        if session is not None and session.ended_at is not None:
            raise not_found(ENDED, session=caller.session_id)
        if version is not None:
            self._admitted[asked] = version
