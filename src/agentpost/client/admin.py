"""The owner's operations (an admin key), self-registration (no key) and the health check.

`AdminOperations` lists them under their OpenAPI operation ids; both clients inherit it.
"""

from __future__ import annotations

from typing import Any

from agentpost.client.operation import Operation, Request, fields, nothing
from agentpost.domain.accounts import (
    AgentInfo,
    AgentLimits,
    AuditEntry,
    IssuedKey,
    KeyInfo,
    Usage,
)


def _agent(name: str) -> dict[str, str]:
    return {"name": name}


def admin_create_agent(
    name: str,
    *,
    description: str = "",
    project: str | None = None,
    capabilities: list[str] | None = None,
) -> Request[tuple[AgentInfo, IssuedKey]]:
    """Create an agent and its first key; the key's secret is in this answer only."""
    return Request(
        lambda a: (AgentInfo.from_dict(a["agent"]), IssuedKey.from_dict(a["key"])),
        json=fields(name=name, description=description, project=project, capabilities=capabilities),
    )


def admin_list_agents() -> Request[list[AgentInfo]]:
    """Every agent, disabled ones too."""
    return Request(lambda a: [AgentInfo.from_dict(x) for x in a["agents"]])


def admin_disable_agent(name: str) -> Request[AgentInfo]:
    """Disable an agent (never deleted): its keys stop working on the next request."""
    return Request(AgentInfo.from_dict, path_args=_agent(name))


def admin_enable_agent(name: str) -> Request[AgentInfo]:
    """Enable a disabled agent again."""
    return Request(AgentInfo.from_dict, path_args=_agent(name))


def admin_vouch_agent(name: str) -> Request[AgentInfo]:
    """Vouch for a self-registered agent: its mail is `verified` from now on."""
    return Request(AgentInfo.from_dict, path_args=_agent(name))


def admin_unvouch_agent(name: str) -> Request[AgentInfo]:
    """Withdraw the vouch: its mail is `untrusted` from now on, and a seat it holds is freed."""
    return Request(AgentInfo.from_dict, path_args=_agent(name))


def admin_set_limits(
    name: str,
    *,
    send_rate_per_minute: int | None = None,
    max_unacked: int | None = None,
    max_channels_per_agent: int | None = None,
    max_open_tasks_per_agent: int | None = None,
) -> Request[AgentLimits]:
    """An agent's send rate, inbox cap, channel cap and open-task cap; None goes back to the
    configured default. A limit left None is left out of the body, which the service reads as
    None, so a service older than a limit still takes the others."""
    return Request(
        AgentLimits.from_dict,
        path_args=_agent(name),
        json=fields(
            send_rate_per_minute=send_rate_per_minute,
            max_unacked=max_unacked,
            max_channels_per_agent=max_channels_per_agent,
            max_open_tasks_per_agent=max_open_tasks_per_agent,
        ),
    )


def admin_issue_key(name: str, *, label: str = "", admin: bool = False) -> Request[IssuedKey]:
    """Issue another key for an agent; its secret is in this answer only."""
    return Request(
        IssuedKey.from_dict, path_args=_agent(name), json={"label": label, "admin": admin}
    )


def admin_list_keys(agent: str | None = None) -> Request[list[KeyInfo]]:
    """Keys (never their secrets), of one agent or of all."""
    return Request(lambda a: [KeyInfo.from_dict(k) for k in a["keys"]], params={"agent": agent})


def admin_revoke_key(key_id: str) -> Request[KeyInfo]:
    """Revoke a key: it is refused from the next request on."""
    return Request(KeyInfo.from_dict, path_args={"key_id": key_id})


def admin_audit_log(
    *,
    limit: int = 100,
    before: int | None = None,
    actor: str | None = None,
    action: str | None = None,
) -> Request[list[AuditEntry]]:
    """The audit log, newest first: administration, failed authentications, sends."""
    return Request(
        lambda a: [AuditEntry.from_dict(e) for e in a["entries"]],
        params={"limit": limit, "before": before, "actor": actor, "action": action},
    )


def admin_block(recipient: str, sender: str) -> Request[None]:
    """Drop `sender`'s mail to `recipient`, silently."""
    return Request(nothing, path_args={"recipient": recipient, "sender": sender})


def admin_unblock(recipient: str, sender: str) -> Request[None]:
    """Let `sender`'s mail reach `recipient` again."""
    return Request(nothing, path_args={"recipient": recipient, "sender": sender})


def admin_usage(agent: str | None = None) -> Request[list[Usage]]:
    """Usage of every agent, or of one."""
    return Request(lambda a: [Usage.from_dict(u) for u in a["usage"]], params={"agent": agent})


def register(name: str, *, description: str = "", project: str | None = None) -> Request[IssuedKey]:
    """Create your own agent and get its key, once; only when the owner opened registration
    (no key needed)."""
    return Request(
        IssuedKey.from_dict, json=fields(name=name, description=description, project=project)
    )


def health() -> Request[dict[str, Any]]:
    """Liveness and the service's version; answers without a key."""
    return Request(dict)


def ready() -> Request[dict[str, Any]]:
    """Readiness: whether the service can read its database now (`unavailable` when not);
    answers without a key."""
    return Request(dict)


class AdminOperations:
    """The owner's REST operations, and the two that need no key, by OpenAPI operation id."""

    admin_create_agent = Operation("POST", "/v1/admin/agents", admin_create_agent)
    admin_list_agents = Operation("GET", "/v1/admin/agents", admin_list_agents)
    admin_disable_agent = Operation("POST", "/v1/admin/agents/{name}/disable", admin_disable_agent)
    admin_enable_agent = Operation("POST", "/v1/admin/agents/{name}/enable", admin_enable_agent)
    admin_vouch_agent = Operation("POST", "/v1/admin/agents/{name}/vouch", admin_vouch_agent)
    admin_unvouch_agent = Operation("POST", "/v1/admin/agents/{name}/unvouch", admin_unvouch_agent)
    admin_set_limits = Operation("PUT", "/v1/admin/agents/{name}/limits", admin_set_limits)
    admin_issue_key = Operation("POST", "/v1/admin/agents/{name}/keys", admin_issue_key)
    admin_list_keys = Operation("GET", "/v1/admin/keys", admin_list_keys)
    admin_revoke_key = Operation("DELETE", "/v1/admin/keys/{key_id}", admin_revoke_key)
    admin_audit_log = Operation("GET", "/v1/admin/audit", admin_audit_log)
    admin_block = Operation("PUT", "/v1/admin/blocks/{recipient}/{sender}", admin_block)
    admin_unblock = Operation("DELETE", "/v1/admin/blocks/{recipient}/{sender}", admin_unblock)
    admin_usage = Operation("GET", "/v1/admin/usage", admin_usage)

    register = Operation("POST", "/v1/register", register)
    health = Operation("GET", "/health", health)
    ready = Operation("GET", "/ready", ready)
