"""Tools of the service only: the address book and your profile (group `profile`), and
administration (group `admin`, offered only on an admin key's connection)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from agentpost.domain.accounts import AgentInfo, AgentLimits, AuditEntry, KeyInfo, Usage
from agentpost.domain.framing import LINE_BREAKS
from agentpost.domain.models import Trust
from agentpost.mcp.adapter import MailboxServer, ToolOutput
from agentpost.mcp.desk import LocalDesk
from agentpost.mcp.presenting import (
    answer,
    by,
    count,
    moment,
    notices_of,
    older_pages,
    quoted,
    token,
)

ToolFn = Callable[..., Awaitable[ToolOutput]]


def register_profile_tools(server: MailboxServer, desk: LocalDesk) -> None:
    directory_service = desk.office.directory

    async def reply(structured: dict[str, object], summary: str) -> ToolOutput:
        return answer(dict(structured), summary, await notices_of(desk))

    async def directory(
        query: str | None = None, project: str | None = None, limit: int = 50
    ) -> ToolOutput:
        """The address book: agents by name, description, project or capability (by name, at
        most `limit`); an agent the owner has not vouched for is marked (untrusted)."""
        found = await directory_service.search(desk.caller, query, project=project, limit=limit)
        lines = [
            f"- {by(a.name, a.trust)}: "
            f"{quoted(a.description) if a.description else '-'}"
            f" ({a.project or 'no project'})"
            for a in found
        ]
        return await reply(
            {"agents": [a.to_dict() for a in found]},
            "\n".join([count(len(found), "agent"), *lines]),
        )

    async def update_profile(
        description: str | None = None,
        project: str | None = None,
        capabilities: list[str] | None = None,
    ) -> ToolOutput:
        """Change what the address book says about you."""
        info = await directory_service.update_profile(
            desk.caller, description=description, project=project, capabilities=capabilities
        )
        return await reply(info.to_dict(), f"Profile of {info.name} updated.")

    async def block(agent: str) -> ToolOutput:
        """Drop an agent's mail to you from now on, and the tasks it would hand you (the
        sender is not told)."""
        names = await directory_service.block(desk.caller, agent)
        return await reply({"blocked": names}, f"Blocked {agent}.")

    async def unblock(agent: str) -> ToolOutput:
        """Take an agent's mail again."""
        names = await directory_service.unblock(desk.caller, agent)
        return await reply({"blocked": names}, f"Unblocked {agent}.")

    async def blocked() -> ToolOutput:
        """The agents whose mail you drop."""
        names = await directory_service.blocked(desk.caller)
        return await reply({"blocked": names}, f"Blocked: {', '.join(names) or 'nobody'}.")

    async def usage() -> ToolOutput:
        """What you sent and received, your unread and unacknowledged mail, and your limits."""
        found = await directory_service.usage(desk.caller)
        return await reply(found.to_dict(), f"Your usage:\n{_usage_line(found)}")

    for fn in (directory, update_profile, block, unblock, blocked, usage):
        server.add_tool(fn)


def register_admin_tools(server: MailboxServer, desk: LocalDesk) -> None:
    admin, keys = desk.office.admin, desk.office.keys

    async def reply(structured: dict[str, object], summary: str) -> ToolOutput:
        return answer(dict(structured), summary, await notices_of(desk))

    async def admin_create_agent(
        name: str,
        description: str = "",
        project: str | None = None,
        capabilities: list[str] | None = None,
    ) -> ToolOutput:
        """Create an agent and its first key (shown in this answer only)."""
        agent, issued = await admin.create_agent(
            desk.caller, name, description=description, project=project, capabilities=capabilities
        )
        return await reply(
            {"agent": agent.to_dict(), "key": issued.to_dict()},
            f"Created {agent.name}; its key is in the structured result, shown once.",
        )

    async def admin_issue_key(agent: str, label: str = "", admin_key: bool = False) -> ToolOutput:
        """Issue another key for an agent (shown in this answer only)."""
        issued = await keys.issue(desk.caller, agent, label=label, admin_key=admin_key)
        return await reply(issued.to_dict(), f"Issued key {issued.id} for {agent}.")

    async def admin_list_keys(agent: str | None = None) -> ToolOutput:
        """Keys (never their secrets), of every agent or of one: the ids `admin_revoke_key`
        takes."""
        found = await keys.list_keys(desk.caller, agent)
        lines = [count(len(found), "key"), *map(_key_line, found)]
        return await reply({"keys": [k.to_dict() for k in found]}, "\n".join(lines))

    async def admin_revoke_key(key_id: str) -> ToolOutput:
        """Revoke a key: it is refused from the next request on."""
        info = await keys.revoke(desk.caller, key_id)
        return await reply(info.to_dict(), f"Revoked {key_id}.")

    async def admin_disable_agent(name: str) -> ToolOutput:
        """Disable an agent (never deleted): its keys stop working."""
        info = await admin.disable_agent(desk.caller, name)
        return await reply(info.to_dict(), f"Disabled {name}.")

    async def admin_enable_agent(name: str) -> ToolOutput:
        """Enable a disabled agent again."""
        info = await admin.enable_agent(desk.caller, name)
        return await reply(info.to_dict(), f"Enabled {name}.")

    async def admin_vouch_agent(name: str) -> ToolOutput:
        """Trust a self-registered agent: what it sends from now on is `verified`."""
        info = await admin.vouch(desk.caller, name)
        return await reply(info.to_dict(), f"Vouched for {name}.")

    async def admin_unvouch_agent(name: str) -> ToolOutput:
        """Withdraw the vouch: what it sends from now on is `untrusted`, it may not lead, and
        a seat it holds is freed."""
        info = await admin.unvouch(desk.caller, name)
        return await reply(info.to_dict(), f"No longer vouching for {name}.")

    async def admin_list_agents() -> ToolOutput:
        """Every agent, disabled ones too."""
        found = await admin.list_agents(desk.caller)
        lines = [count(len(found), "agent"), *map(_agent_line, found)]
        return await reply({"agents": [a.to_dict() for a in found]}, "\n".join(lines))

    async def admin_audit_log(
        limit: int = 50,
        actor: str | None = None,
        action: str | None = None,
        before: int | None = None,
    ) -> ToolOutput:
        """The audit log, newest first; `before` an entry's `seq` pages back from it."""
        found = await admin.audit_log(
            desk.caller, limit=limit, actor=actor, action=action, before=before
        )
        lines = [count(len(found), "entry", "entries"), *map(_audit_line, found)]
        if found:
            lines[-1] += older_pages(
                "admin_audit_log", len(found), limit, found[-1].seq, actor=actor, action=action
            )
        return await reply({"entries": [e.to_dict() for e in found]}, "\n".join(lines))

    async def admin_set_limits(
        name: str,
        send_rate_per_minute: int | None = None,
        max_unacked: int | None = None,
        max_channels_per_agent: int | None = None,
        max_open_tasks_per_agent: int | None = None,
    ) -> ToolOutput:
        """Per-agent send rate, inbox cap, channel cap and open-task cap; omitted goes back to
        the default."""
        limits = await admin.set_limits(
            desk.caller,
            name,
            send_rate_per_minute=send_rate_per_minute,
            max_unacked=max_unacked,
            max_channels_per_agent=max_channels_per_agent,
            max_open_tasks_per_agent=max_open_tasks_per_agent,
        )
        return await reply(limits.to_dict(), f"Limits of {name} set: {_limits(limits)}.")

    async def admin_set_block(recipient: str, sender: str, blocked: bool = True) -> ToolOutput:
        """Drop (or stop dropping) `sender`'s mail to `recipient`."""
        done = await admin.set_block(desk.caller, recipient, sender, blocked)
        return await reply(done, f"{'Blocked' if blocked else 'Unblocked'} {sender} → {recipient}.")

    async def admin_usage(agent: str | None = None) -> ToolOutput:
        """Usage of every agent, or of one."""
        found = await admin.usage(desk.caller, agent)
        lines = [f"Usage of {count(len(found), 'agent')}:", *map(_usage_line, found)]
        return await reply({"usage": [u.to_dict() for u in found]}, "\n".join(lines))

    tools: tuple[ToolFn, ...] = (
        admin_create_agent,
        admin_issue_key,
        admin_list_keys,
        admin_revoke_key,
        admin_disable_agent,
        admin_enable_agent,
        admin_vouch_agent,
        admin_unvouch_agent,
        admin_list_agents,
        admin_audit_log,
        admin_set_limits,
        admin_set_block,
        admin_usage,
    )
    for fn in tools:
        server.add_tool(fn)


# The lines an admin tool's text lists, one per item: a model reads the text, not always the
# structured result, and could not otherwise revoke a key it was told exists only by count.


def _key_line(k: KeyInfo) -> str:
    state = f"revoked {moment(k.revoked_at)}" if k.revoked_at is not None else "live"
    admin = ", admin" if k.admin else ""
    used = moment(k.last_used_at) if k.last_used_at is not None else "never"
    return f"- {k.id}: {k.agent}{admin}, {quoted(k.label)}, {state}, last used {used}"


def _agent_line(a: AgentInfo) -> str:
    state = "disabled" if a.disabled else "online" if a.online else "offline"
    description = quoted(a.description) if a.description else "-"
    return f"- {by(a.name, Trust(a.trust))}: {state}, {a.project or 'no project'}, {description}"


def _audit_line(e: AuditEntry) -> str:
    detail = json.dumps(e.detail, ensure_ascii=False, sort_keys=True).translate(LINE_BREAKS)
    target = f" {token(e.target)}" if e.target else ""
    return f"- {e.seq} {moment(e.at)} {e.actor} {e.action}{target} from {e.ip or '-'} {detail}"


def _limits(limits: AgentLimits | Usage) -> str:
    return (
        f"send rate {limits.send_rate_per_minute}/min, max unacked {limits.max_unacked}, "
        f"max channels {limits.max_channels_per_agent}, "
        f"max open tasks {limits.max_open_tasks_per_agent}"
    )


def _usage_line(u: Usage) -> str:
    return (
        f"- {u.agent}: sent {u.sent_total} ({u.sent_last_day} in 24 h), received "
        f"{u.received_total}, unread {u.unread}, unacked {u.unacked}; {_limits(u)}"
    )
