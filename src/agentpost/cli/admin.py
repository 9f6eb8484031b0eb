"""`agentpost admin`: the owner's acts from the command line, one admin service call each.

On the local post office a command acts as the owner with admin rights (`run(as_admin=True)`);
with `--url URL --key ADMIN_KEY` (or `AGENTPOST_URL` and `AGENTPOST_KEY`) it acts on that
service through the Python client, and the service refuses a key that is not an admin's.
A new key's secret is the only thing `create-agent` and `issue-key` print on stdout, so that
`KEY=$(agentpost admin create-agent bob)` holds just the key; what else they say goes to stderr.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated

import typer

from agentpost.cli.speaking import (
    JsonOption,
    KeyOption,
    Local,
    Remote,
    Speaker,
    T,
    UrlOption,
    run,
)
from agentpost.domain.accounts import MAX_LIMIT_VALUE, AgentInfo, IssuedKey, KeyInfo, Usage
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.models import Caller

if TYPE_CHECKING:  # the services and the client are imported when a command runs: --help is quick
    from agentpost.client import AsyncClient
    from agentpost.domain.accounts import AgentLimits
    from agentpost.services import PostOffice

admin_app = typer.Typer(
    help="The owner's administration: agents, keys, limits, blocks, the audit log, usage.",
    no_args_is_help=True,
)

NameArgument = Annotated[str, typer.Argument(help="The agent's name.")]

LIMITS = {
    "send-rate": "send_rate_per_minute",
    "max-unacked": "max_unacked",
    "max-channels": "max_channels_per_agent",
    "max-open-tasks": "max_open_tasks_per_agent",
}
"""Each per-agent limit: its name on the command line, and the services'."""


def _speaker(as_json: bool, url: str | None, key: str | None) -> Speaker:
    return Speaker(None, as_json, url, key)  # the owner speaks: no --as


def _ask(as_json: bool, url: str | None, key: str | None, local: Local[T], remote: Remote[T]) -> T:
    """One admin act, as the local owner or the key's agent on `url`."""
    return run(_speaker(as_json, url, key), local, remote, as_admin=True)


def _when(ts: float | None) -> str:
    return "" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _show_key(issued: IssuedKey, said: str, as_json: bool, **more: object) -> None:
    """The secret alone on stdout (or all of it as JSON); the words about it on stderr."""
    from agentpost.cli.render import emit_json, errors

    if as_json:
        emit_json({**more, "key": issued.to_dict()} if more else issued.to_dict())
        return
    print(issued.key, flush=True)
    errors.print(f"{said} (key {issued.id}); the key is shown only now")


# -- agents -------------------------------------------------------------------------------------


@admin_app.command("create-agent")
def create_agent(
    name: NameArgument,
    description: Annotated[str, typer.Option(help="What the agent does.")] = "",
    project: Annotated[str | None, typer.Option(help="The project it works on.")] = None,
    capability: Annotated[
        list[str] | None, typer.Option(help="A capability tag (repeatable).")
    ] = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Create a verified agent and its first key; prints the key (shown only now)."""
    agent, issued = _ask(
        as_json,
        url,
        key,
        lambda o, c: o.admin.create_agent(
            c, name, description=description, project=project, capabilities=capability
        ),
        lambda client: client.admin_create_agent(
            name, description=description, project=project, capabilities=capability
        ),
    )
    _show_key(issued, f"created agent {agent.name}", as_json, agent=agent.to_dict())


@admin_app.command("agents")
def agents(as_json: JsonOption = False, url: UrlOption = None, key: KeyOption = None) -> None:
    """Every agent, disabled ones too."""
    from rich.table import Table

    from agentpost.cli.render import console, emit_json, whole

    found = _ask(
        as_json,
        url,
        key,
        lambda o, c: o.admin.list_agents(c),
        lambda client: client.admin_list_agents(),
    )
    if as_json:
        emit_json({"agents": [a.to_dict() for a in found]})
        return
    table = Table(whole("agent"), "project", "trust", "state", "seen", "description")
    for a in found:
        seen = "online" if a.online else "never" if a.last_seen_s is None else "offline"
        state = "disabled" if a.disabled else "enabled"
        table.add_row(a.name, a.project or "", a.trust.value, state, seen, a.description)
    console.print(table)


def _agent_act(
    command: str,
    says: str,
    local: Callable[[PostOffice, Caller, str], Awaitable[AgentInfo]],
    remote: Callable[[AsyncClient, str], Awaitable[AgentInfo]],
) -> None:
    """Register one of the acts on an agent that answer with the agent as it now stands."""

    def act(
        name: NameArgument,
        as_json: JsonOption = False,
        url: UrlOption = None,
        key: KeyOption = None,
    ) -> None:
        from agentpost.cli.render import console, emit_json

        info = _ask(
            as_json,
            url,
            key,
            lambda o, c: local(o, c, name),
            lambda client: remote(client, name),
        )
        if as_json:
            emit_json(info.to_dict())
        else:
            state = "disabled" if info.disabled else "enabled"
            console.print(f"{info.name}: {info.trust.value}, {state}")

    admin_app.command(command, help=says)(act)


_agent_act(
    "disable",
    "Disable an agent (never deleted): its keys are refused from the next request on.",
    lambda o, c, name: o.admin.disable_agent(c, name),
    lambda client, name: client.admin_disable_agent(name),
)
_agent_act(
    "enable",
    "Enable a disabled agent again.",
    lambda o, c, name: o.admin.enable_agent(c, name),
    lambda client, name: client.admin_enable_agent(name),
)
_agent_act(
    "vouch",
    "Vouch for a self-registered agent: what it sends from now on is verified.",
    lambda o, c, name: o.admin.vouch(c, name),
    lambda client, name: client.admin_vouch_agent(name),
)
_agent_act(
    "unvouch",
    "Withdraw the vouch: what it sends from now on is untrusted; a seat it holds is freed.",
    lambda o, c, name: o.admin.unvouch(c, name),
    lambda client, name: client.admin_unvouch_agent(name),
)


# -- keys ---------------------------------------------------------------------------------------


@admin_app.command("issue-key")
def issue_key(
    name: NameArgument,
    label: Annotated[str, typer.Option(help="What the key is for.")] = "",
    admin: Annotated[
        bool, typer.Option("--admin", help="An admin key (the owner's alone).")
    ] = False,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Issue another key for an agent; prints the key (shown only now)."""
    issued = _ask(
        as_json,
        url,
        key,
        lambda o, c: o.keys.issue(c, name, label=label, admin_key=admin),
        lambda client: client.admin_issue_key(name, label=label, admin=admin),
    )
    _show_key(issued, f"issued a key for {issued.agent}", as_json)


@admin_app.command("keys")
def keys(
    name: Annotated[str | None, typer.Argument(help="Only this agent's (default: all).")] = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Keys, never their secrets: of one agent, or of all."""
    from rich.table import Table

    from agentpost.cli.render import console, emit_json, whole

    found: list[KeyInfo] = _ask(
        as_json,
        url,
        key,
        lambda o, c: o.keys.list_keys(c, name),
        lambda client: client.admin_list_keys(name),
    )
    if as_json:
        emit_json({"keys": [k.to_dict() for k in found]})
        return
    # The id is what `revoke-key` takes: whole on its line, however narrow the terminal.
    others = ("agent", "label", "admin", "created", "last used", "revoked")
    table = Table(whole("key", [k.id for k in found]), *map(whole, others))
    for k in found:
        admin = "admin" if k.admin else ""
        when = (_when(k.created_at), _when(k.last_used_at), _when(k.revoked_at))
        table.add_row(k.id, k.agent, k.label, admin, *when)
    console.print(table)


@admin_app.command("revoke-key")
def revoke_key(
    key_id: Annotated[str, typer.Argument(help="The key's id (k_…, from `admin keys`).")],
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Revoke a key for good (and the webhooks made with it): refused from the next request."""
    from agentpost.cli.render import console, emit_json

    revoked = _ask(
        as_json,
        url,
        key,
        lambda o, c: o.keys.revoke(c, key_id),
        lambda client: client.admin_revoke_key(key_id),
    )
    if as_json:
        emit_json(revoked.to_dict())
    else:
        console.print(f"revoked {revoked.id} ({revoked.agent}'s)")


# -- the audit log ----------------------------------------------------------------------------


@admin_app.command("audit")
def audit(
    limit: Annotated[int, typer.Option(help="At most this many, the newest.")] = 100,
    before: Annotated[
        int | None, typer.Option(help="Only entries older than this seq (a page's last).")
    ] = None,
    actor: Annotated[str | None, typer.Option(help="Only this agent's acts.")] = None,
    action: Annotated[
        str | None, typer.Option(help="Only this action (agent.created, key.revoked, …).")
    ] = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """The audit log, newest first: administration, failed authentications, sends."""
    from agentpost.cli.render import console, emit_json, styled

    found = _ask(
        as_json,
        url,
        key,
        lambda o, c: o.admin.audit_log(c, limit=limit, before=before, actor=actor, action=action),
        lambda client: client.admin_audit_log(
            limit=limit, before=before, actor=actor, action=action
        ),
    )
    if as_json:
        emit_json({"entries": [e.to_dict() for e in found]})
        return
    for e in found:
        detail = f" {json.dumps(e.detail, ensure_ascii=False)}" if e.detail else ""
        console.print(
            styled(
                (f"{e.seq} {_when(e.at)}", "dim"),
                " ",
                (e.actor, "cyan"),
                f" {e.action}",
                f" {e.target}" if e.target else "",
                (f" from {e.ip}" if e.ip else "", "dim"),
                (detail, "dim"),
            )
        )


# -- limits, blocks, usage ----------------------------------------------------------------------


def _limits(given: dict[str, int | None], defaults: list[str], now: Usage) -> dict[str, int | None]:
    """The limits to set: each one given, else back to the setting if asked, else as it is
    (the agent's own value, or the setting, which it goes on following)."""
    for spelt in defaults:
        if spelt not in LIMITS:
            raise AgentpostError(
                ErrorCode.INVALID_ARGUMENT,
                f"--default takes {', '.join(LIMITS)}, not {spelt!r}",
            )
        if given[LIMITS[spelt]] is not None:
            raise AgentpostError(
                ErrorCode.INVALID_ARGUMENT, f"--{spelt} and --default {spelt} ask for both"
            )
    kept = {}
    for spelt, limit in LIMITS.items():
        value = given[limit]
        own = now.own_limits
        if value is None and spelt not in defaults and (own is None or limit in own):
            value = getattr(now, limit)  # an older service does not say which: keep the value
        kept[limit] = value
    return kept


def _show_limits(limits: AgentLimits, own: dict[str, int | None], as_json: bool) -> None:
    from agentpost.cli.render import console, emit_json

    if as_json:
        emit_json({**limits.to_dict(), "own_limits": [k for k, v in own.items() if v is not None]})
        return
    shown = [
        f"{spelt} {getattr(limits, limit)}{'' if own[limit] is not None else ' (the setting)'}"
        for spelt, limit in LIMITS.items()
    ]
    console.print(f"{limits.agent}: {', '.join(shown)}")


@admin_app.command("set-limits")
def set_limits(
    name: NameArgument,
    send_rate: Annotated[
        int | None,
        typer.Option(min=1, max=MAX_LIMIT_VALUE, help="Messages it may send a minute."),
    ] = None,
    max_unacked: Annotated[
        int | None,
        typer.Option(min=1, max=MAX_LIMIT_VALUE, help="Unacked messages its inbox holds."),
    ] = None,
    max_channels: Annotated[
        int | None,
        typer.Option(min=1, max=MAX_LIMIT_VALUE, help="Channels it may join."),
    ] = None,
    max_open_tasks: Annotated[
        int | None,
        typer.Option(
            min=1, max=MAX_LIMIT_VALUE, help="Unfinished tasks it may have delegated at once."
        ),
    ] = None,
    default: Annotated[
        list[str] | None,
        typer.Option(
            "--default",
            help="Put this limit back to the setting: send-rate, max-unacked, max-channels or"
            " max-open-tasks (repeatable).",
        ),
    ] = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """An agent's own limits; a limit left out keeps what holds for it now."""
    given = {
        "send_rate_per_minute": send_rate,
        "max_unacked": max_unacked,
        "max_channels_per_agent": max_channels,
        "max_open_tasks_per_agent": max_open_tasks,
    }
    asked = default or []

    async def local(
        office: PostOffice, caller: Caller
    ) -> tuple[AgentLimits, dict[str, int | None]]:
        (now,) = await office.admin.usage(caller, name)
        chosen = _limits(given, asked, now)
        return await office.admin.set_limits(caller, name, **chosen), chosen

    async def remote(client: AsyncClient) -> tuple[AgentLimits, dict[str, int | None]]:
        (now,) = await client.admin_usage(name)
        chosen = _limits(given, asked, now)
        return await client.admin_set_limits(name, **chosen), chosen

    limits, chosen = run(_speaker(as_json, url, key), local, remote, as_admin=True)
    _show_limits(limits, chosen, as_json)


def _block(recipient: str, sender: str, blocked: bool, speaker: Speaker) -> None:
    from agentpost.cli.render import console, emit_json

    async def remote(client: AsyncClient) -> None:
        if blocked:
            await client.admin_block(recipient, sender)
        else:
            await client.admin_unblock(recipient, sender)

    async def local(office: PostOffice, caller: Caller) -> None:
        await office.admin.set_block(caller, recipient, sender, blocked)

    run(speaker, local, remote, as_admin=True)
    if speaker.as_json:
        emit_json({"recipient": recipient, "sender": sender, "blocked": blocked})
    else:
        done = "dropped" if blocked else "delivered again"
        console.print(f"mail from {sender} to {recipient}: {done}")


RecipientArgument = Annotated[str, typer.Argument(help="The agent whose inbox is guarded.")]
SenderArgument = Annotated[str, typer.Argument(help="The agent whose mail to it is dropped.")]


@admin_app.command("block")
def block(
    recipient: RecipientArgument,
    sender: SenderArgument,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Drop SENDER's mail to RECIPIENT, silently."""
    _block(recipient, sender, True, _speaker(as_json, url, key))


@admin_app.command("unblock")
def unblock(
    recipient: RecipientArgument,
    sender: SenderArgument,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Let SENDER's mail reach RECIPIENT again."""
    _block(recipient, sender, False, _speaker(as_json, url, key))


@admin_app.command("usage")
def usage(
    name: Annotated[str | None, typer.Argument(help="Only this agent (default: all).")] = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """What each agent sent and received, and the limits that hold for it (* its own)."""
    from agentpost.cli.render import console, emit_json

    found = _ask(
        as_json,
        url,
        key,
        lambda o, c: o.admin.usage(c, name),
        lambda client: client.admin_usage(name),
    )
    if as_json:
        emit_json({"usage": [u.to_dict() for u in found]})
        return
    # A line an agent, not a table: ten columns do not fit a terminal's width, and a name cut
    # short ("max-…") says nothing.
    for u in found:
        limits = ", ".join(
            f"{spelt} {getattr(u, limit)}{'*' if limit in (u.own_limits or []) else ''}"
            for spelt, limit in LIMITS.items()
        )
        console.print(
            f"{u.agent}: sent {u.sent_total} ({u.sent_last_day} in 24 h), "
            f"received {u.received_total}, unread {u.unread}, unacked {u.unacked}; {limits}"
        )
