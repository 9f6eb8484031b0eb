"""Administration: the owner's acts on agents, limits and blocks, and what the owner reads.

Every act needs an admin key (`forbidden` otherwise, before anything is looked at, the attempt
kept in the audit log) and writes an audit row in the same transaction as the change. An act
that would change nothing (enabling an enabled agent) writes nothing. Agents are disabled,
never deleted: a name is never reused.
"""

from __future__ import annotations

import json
from typing import Any

from agentpost.config import Settings
from agentpost.domain.accounts import (
    AgentInfo,
    AgentLimits,
    AuditEntry,
    IssuedKey,
    Usage,
    check_capabilities,
    check_description,
    check_limit_value,
)
from agentpost.domain.errors import forbidden, invalid
from agentpost.domain.limits import check_limit, check_seq
from agentpost.domain.models import Caller, Trust
from agentpost.domain.names import OWNER, RESERVED, check_name
from agentpost.services import accounts
from agentpost.services.admin_gate import AdminGate
from agentpost.services.mailbox import Mailbox
from agentpost.services.presence import PresenceService
from agentpost.services.seats import DISABLED, unseat
from agentpost.store import agents as agent_rows
from agentpost.store import audit, wakeups
from agentpost.store import limits as limit_rows
from agentpost.store.database import Connection, Row, Store


class Admin:
    def __init__(self, store: Store, settings: Settings, mailbox: Mailbox, gate: AdminGate) -> None:
        self.store = store
        self.settings = settings
        self._gate = gate
        self._mailbox = mailbox
        self._presence = PresenceService(store, settings)

    def _record(
        self, conn: Connection, admin: Caller, action: str, target: str, **detail: Any
    ) -> None:
        audit.record(
            conn,
            at=self.store.clock(),
            actor=admin.agent,
            action=action,
            target=target,
            ip=admin.ip,
            detail=detail or None,
        )

    async def check_admin(self, caller: Caller, act: str, target: object = None) -> None:
        """Refuse a caller without an admin key, the attempt audited as every act's is: for
        a face that turns such a caller away before any act is reached (MCP offers an agent
        key no admin tool, and a call to one never gets this far; REST refuses a malformed
        admin request before its act)."""
        await self._gate.require(caller, act, target)

    def _info(self, conn: Connection, name: str) -> AgentInfo:
        return accounts.account(conn, self.settings, self.store.clock(), name)

    # -- agents -------------------------------------------------------------------------------

    async def create_agent(
        self,
        admin: Caller,
        name: str,
        *,
        description: str = "",
        project: str | None = None,
        capabilities: list[str] | None = None,
    ) -> tuple[AgentInfo, IssuedKey]:
        """A new, verified agent and its first key (the secret is shown only here)."""
        await self._gate.require(admin, "create_agent", name)
        accounts.check_new_name(name, self.settings)
        check_description(description)
        accounts.check_project(project)
        tags = check_capabilities(capabilities or [])

        def tx(conn: Connection) -> tuple[AgentInfo, IssuedKey]:
            now = self.store.clock()
            accounts.create_account(
                conn,
                name,
                now=now,
                trust=Trust.VERIFIED,
                description=description,
                project=project,
                capabilities=tags,
            )
            issued = accounts.issue_key(conn, name, now=now, label="first key", admin=False)
            self._record(conn, admin, "agent.created", name, key=issued.id, project=project)
            return self._info(conn, name), issued

        return await self.store.write(tx)

    async def _change_agent(
        self, admin: Caller, name: str, action: str, changed: dict[str, Any]
    ) -> AgentInfo:
        """Set `changed` on the agent unless it already holds; audit the act when it did not.
        The caller is an admin: each act asked before it came here."""
        check_name(name)

        def tx(conn: Connection) -> AgentInfo:
            row = accounts.existing(conn, name)
            if any(_differs(row, column, value) for column, value in changed.items()):
                agent_rows.update_agent(conn, name, **changed)
                detail: dict[str, Any] = {}
                if changed.get("disabled_at") is not None:
                    now = self.store.clock()
                    ttl_s = self.settings.offline_after_s
                    freed = unseat(conn, self._mailbox, name, now=now, ttl_s=ttl_s, reason=DISABLED)
                    if freed:
                        detail["seats_freed"] = freed
                    agent_rows.end_agent_sessions(conn, name, now)
                    wakeups.rouse(conn, [name])
                self._record(conn, admin, action, name, **detail)
            return self._info(conn, name)

        return await self.store.write(tx)

    async def disable_agent(self, admin: Caller, name: str) -> AgentInfo:
        """Its sessions end and its keys stop working on their next request; its mail stays.
        A seat it held is freed with them, and said so on the project's channel, as a
        withdrawn vouch's is: the channel would otherwise go on naming it leader."""
        await self._gate.require(admin, "disable_agent", name)
        if name == OWNER:
            raise forbidden("the owner cannot be disabled")
        return await self._change_agent(
            admin, name, "agent.disabled", {"disabled_at": self.store.clock()}
        )

    async def enable_agent(self, admin: Caller, name: str) -> AgentInfo:
        await self._gate.require(admin, "enable_agent", name)
        return await self._change_agent(admin, name, "agent.enabled", {"disabled_at": None})

    async def vouch(self, admin: Caller, name: str) -> AgentInfo:
        """Trust a self-registered agent: what it sends from now on is `verified`."""
        await self._gate.require(admin, "vouch_agent", name)
        return await self._change_agent(
            admin, name, "agent.vouched", {"trust": Trust.VERIFIED.value}
        )

    async def unvouch(self, admin: Caller, name: str) -> AgentInfo:
        """Withdraw the owner's vouch (for an agent the owner created, too): what it sends from
        now on is `untrusted`, and it may not lead. A seat one of its sessions holds is freed
        at once, announced on the project's channel, so another session may take it rather
        than the project wait out a leader that may no longer act as one. What it sent before
        keeps the trust it was received with. The owner's own word is always verified."""
        await self._gate.require(admin, "unvouch_agent", name)
        check_name(name)
        if name in RESERVED:
            raise forbidden(f"{name!r} speaks for the owner or the post office: always verified")

        def tx(conn: Connection) -> AgentInfo:
            row = accounts.existing(conn, name)
            if row.trust != Trust.UNTRUSTED.value:
                agent_rows.update_agent(conn, name, trust=Trust.UNTRUSTED.value)
                now = self.store.clock()
                ttl_s = self.settings.offline_after_s
                freed = unseat(conn, self._mailbox, name, now=now, ttl_s=ttl_s)
                detail: dict[str, Any] = {"trust": Trust.UNTRUSTED.value}
                if freed:
                    detail["seats_freed"] = freed
                self._record(conn, admin, "agent.unvouched", name, **detail)
            return self._info(conn, name)

        return await self.store.write(tx)

    async def list_agents(self, admin: Caller) -> list[AgentInfo]:
        """Every agent, disabled ones too."""
        await self._gate.require(admin, "list_agents")
        await self._presence.end_dead_local_sessions()  # so `online` is true at once
        return await self.store.read(
            lambda conn: accounts.accounts(
                conn, self.settings, self.store.clock(), include_disabled=True
            )
        )

    # -- the audit log --------------------------------------------------------------------------

    async def audit_log(
        self,
        admin: Caller,
        *,
        limit: int = 100,
        before: int | None = None,
        actor: str | None = None,
        action: str | None = None,
    ) -> list[AuditEntry]:
        """Newest first; page with `before` = the last entry's `seq`."""
        await self._gate.require(admin, "audit_log")
        check_limit(limit)
        if before is not None:
            check_seq(before, "before")
        for value, what in ((actor, "actor"), (action, "action")):
            if value is not None and (not isinstance(value, str) or len(value) > 64):
                raise invalid(f"{what} must be text of at most 64 characters")
        rows = await self.store.read(
            lambda conn: audit.entries(conn, limit=limit, before=before, actor=actor, action=action)
        )
        return [_audit_entry(row) for row in rows]

    # -- limits, blocks, usage ---------------------------------------------------------------------

    async def set_limits(
        self,
        admin: Caller,
        name: str,
        *,
        send_rate_per_minute: int | None,
        max_unacked: int | None,
        max_channels_per_agent: int | None = None,
        max_open_tasks_per_agent: int | None = None,
    ) -> AgentLimits:
        """The agent's own limits; None puts one back to the setting. Returns what holds."""
        await self._gate.require(admin, "set_limits", name)
        check_name(name)
        override = (
            check_limit_value(send_rate_per_minute, "send_rate_per_minute"),
            check_limit_value(max_unacked, "max_unacked"),
            check_limit_value(max_channels_per_agent, "max_channels_per_agent"),
            check_limit_value(max_open_tasks_per_agent, "max_open_tasks_per_agent"),
        )

        def tx(conn: Connection) -> AgentLimits:
            accounts.existing(conn, name)
            if limit_rows.overrides(conn, [name]).get(name, limit_rows.NONE) != override:
                limit_rows.set_overrides(conn, self.store.dialect, name, override)
                detail = dict(zip(limit_rows.COLUMNS, override, strict=True))
                self._record(conn, admin, "limits.set", name, **detail)
            return accounts.limits_in_effect(conn, self.settings, [name])[name]

        return await self.store.write(tx)

    async def set_block(
        self, admin: Caller, recipient: str, sender: str, blocked: bool
    ) -> dict[str, Any]:
        """Block (or unblock) `sender` for `recipient`: its mail to them is dropped silently."""
        await self._gate.require(admin, "set_block", recipient)
        check_name(recipient, "recipient")
        check_name(sender, "sender")
        if not isinstance(blocked, bool):
            raise invalid("blocked must be true or false")
        if blocked and sender in RESERVED:  # the owner's own word, or the post office's
            # Refused as an agent blocking them is: a reserved name, not a malformed one.
            raise forbidden(f"mail from {sender!r} cannot be blocked", sender=sender)

        def tx(conn: Connection) -> dict[str, Any]:
            if accounts.set_block(
                conn, self.store, recipient, sender, blocked=blocked, by=admin.agent
            ):
                action = "block.added" if blocked else "block.removed"
                self._record(conn, admin, action, recipient, sender=sender)
            return {"recipient": recipient, "sender": sender, "blocked": blocked}

        return await self.store.write(tx)

    async def usage(self, admin: Caller, agent: str | None = None) -> list[Usage]:
        await self._gate.require(admin, "usage", agent)

        def tx(conn: Connection) -> list[Usage]:
            now = self.store.clock()
            if agent is None:
                return accounts.usage(conn, self.settings, now)
            accounts.existing(conn, check_name(agent))
            return accounts.usage(conn, self.settings, now, [agent])

        return await self.store.read(tx)


def _differs(row: Row[Any], column: str, value: Any) -> bool:
    current = getattr(row, column)
    if column == "disabled_at":  # a time, but what matters is whether there is one
        return (current is None) != (value is None)
    return bool(current != value)


def _audit_entry(row: Row[Any]) -> AuditEntry:
    return AuditEntry(
        seq=row.seq,
        at=row.at,
        actor=row.actor,
        action=row.action,
        target=row.target,
        ip=row.ip,
        detail={} if row.detail is None else json.loads(row.detail),
    )
