"""The directory: the post office's address book, each agent's own profile, blocks and usage.

Any authenticated agent may search it; only the agent itself changes its profile or its
blocks. A block drops the blocked sender's mail silently, so blocking is a quiet act: the
sender is never told (see `Mailbox.send`). The owner's and the post office's own mail cannot
be blocked by an agent: notices and the person in charge always get through.
"""

from __future__ import annotations

from typing import Any

from agentpost.config import Settings
from agentpost.domain.accounts import (
    AgentInfo,
    Usage,
    check_capabilities,
    check_description,
)
from agentpost.domain.errors import forbidden
from agentpost.domain.limits import check_limit, directory_words
from agentpost.domain.models import Caller
from agentpost.domain.names import RESERVED, check_name
from agentpost.services import accounts, addressing
from agentpost.services.presence import PresenceService
from agentpost.store import agents as agent_rows
from agentpost.store import audit
from agentpost.store import blocks as block_rows
from agentpost.store import keys as key_rows
from agentpost.store.database import Connection, Store


class Directory:
    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self._presence = PresenceService(store, settings)

    async def search(
        self,
        caller: Caller,
        query: str | None = None,
        *,
        project: str | None = None,
        limit: int = 50,
    ) -> list[AgentInfo]:
        """Enabled agents whose name, description, project or capabilities hold every word
        of `query` (any case), by name."""
        words = directory_words(query)
        accounts.check_project(project)
        check_limit(limit)
        await self._presence.end_dead_local_sessions()  # so `online` is true at once
        return await self.store.read(
            lambda conn: accounts.accounts(
                conn,
                self.settings,
                self.store.clock(),
                words=words,
                project=project,
                limit=limit,
            )
        )

    async def me(self, caller: Caller) -> AgentInfo:
        return await self.store.read(
            lambda conn: accounts.account(conn, self.settings, self.store.clock(), caller.agent)
        )

    async def update_profile(
        self,
        caller: Caller,
        *,
        description: str | None = None,
        project: str | None = None,
        capabilities: list[str] | None = None,
        status: str | None = None,
        objective: str | None = None,
    ) -> AgentInfo:
        """Change what the directory says of the caller, and what its session says (`status`,
        `objective`); None leaves a field as it is, and an empty project clears it (the agent
        then leaves its project's channel). All of it is checked first and written together:
        a refusal changes nothing."""
        session_change = (
            None
            if status is None and objective is None
            else self._presence.profile_change(caller, objective=objective, status=status)
        )
        values: dict[str, Any] = {}
        if description is not None:
            values["description"] = check_description(description)
        if project is not None:
            values["project"] = accounts.check_project(project) if project else None
        if capabilities is not None:
            values["capabilities"] = agent_rows.capabilities_json(check_capabilities(capabilities))

        def tx(conn: Connection) -> AgentInfo:
            if session_change is not None:
                session_change(conn)
            agent_rows.update_agent(conn, caller.agent, **values)
            if "project" in values:
                key_rows.move_own_sessions(conn, caller.agent, values["project"])
            return accounts.account(conn, self.settings, self.store.clock(), caller.agent)

        return await self.store.write(tx)

    # -- blocks -------------------------------------------------------------------------------

    async def block(self, caller: Caller, agent: str) -> list[str]:
        """Drop `agent`'s mail to the caller from now on; returns whom the caller blocks."""
        return await self._set_block(caller, agent, blocked=True)

    async def unblock(self, caller: Caller, agent: str) -> list[str]:
        return await self._set_block(caller, agent, blocked=False)

    async def _set_block(self, caller: Caller, agent: str, *, blocked: bool) -> list[str]:
        check_name(agent)
        if blocked and agent in RESERVED:
            raise forbidden(f"mail from {agent!r} cannot be blocked", agent=agent)

        def tx(conn: Connection) -> list[str]:
            if accounts.set_block(
                conn, self.store, caller.agent, agent, blocked=blocked, by=caller.agent
            ):
                act = "a block" if blocked else "an unblock"
                addressing.count_act(conn, self.store, self.settings, caller, act)
                audit.record(
                    conn,
                    at=self.store.clock(),
                    actor=caller.agent,
                    action="block.added" if blocked else "block.removed",
                    target=caller.agent,
                    ip=caller.ip,
                    detail={"sender": agent},
                )
            return block_rows.blocked_senders(conn, caller.agent)

        return await self.store.write(tx)

    async def blocked(self, caller: Caller) -> list[str]:
        return await self.store.read(lambda conn: block_rows.blocked_senders(conn, caller.agent))

    async def usage(self, caller: Caller) -> Usage:
        def tx(conn: Connection) -> Usage:
            (found,) = accounts.usage(conn, self.settings, self.store.clock(), [caller.agent])
            return found

        return await self.store.read(tx)
