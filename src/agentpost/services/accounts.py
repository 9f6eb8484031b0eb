"""What the keys, admin and directory services share: agents as accounts, keys, limits, usage.

Each helper runs inside the caller's transaction (it takes the `Connection`), so an act and
its audit row commit together or not at all.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from agentpost.config import Settings
from agentpost.domain.accounts import AgentInfo, AgentLimits, IssuedKey, KeyInfo, Usage, new_secret
from agentpost.domain.errors import AgentpostError, ErrorCode, forbidden, invalid, not_found
from agentpost.domain.ids import key_id as new_key_id
from agentpost.domain.limits import holds_half_pair
from agentpost.domain.models import Caller, Trust
from agentpost.domain.names import OWNER, POST_OFFICE, RESERVED, SYSTEM, check_name
from agentpost.store import agents as agent_rows
from agentpost.store import blocks as block_rows
from agentpost.store import keys as key_rows
from agentpost.store import limits as limit_rows
from agentpost.store import usage as usage_rows
from agentpost.store.database import Connection, Row, Store

DAY_S = 86_400.0
INTERNAL = (SYSTEM, POST_OFFICE)
"""The post office's own identities: never listed, never account holders."""


def as_stored(conn: Connection, caller: Caller) -> Caller:
    """The caller with its agent's trust as the store holds it now. Trust is the agent's:
    a local session speaks for the machine's user, yet under the name of an agent that
    registered itself it is no more trusted than that agent (nor less, once the owner
    vouches), and a vouch given or withdrawn holds from the next act of a session already
    open. A caller's own trust is the most it gets: what came in untrusted stays so. A key's
    caller was read with its agent's trust this request, so it is taken as it came."""
    if caller.trust is not Trust.VERIFIED or caller.key_id is not None:
        return caller
    return with_stored_trust(caller, agent_rows.agent_trust(conn, caller.agent))


def with_stored_trust(caller: Caller, stored: Trust | None) -> Caller:
    """`as_stored`, the agent's trust read already, with other columns (None: no such agent)."""
    if caller.trust is not Trust.VERIFIED or caller.key_id is not None:
        return caller
    stored = stored or Trust.UNTRUSTED
    return caller if stored is Trust.VERIFIED else replace(caller, trust=stored)


def as_stored_now(conn: Connection, caller: Caller) -> Caller:
    """As `as_stored`, a key's caller too: for an act whose effect outlasts its request (a
    leader's seat). Its request may have been authenticated before the owner withdrew the
    vouch, which freed the agent's seats as it committed and would free none taken after."""
    if caller.trust is not Trust.VERIFIED:
        return caller
    stored = agent_rows.agent_trust(conn, caller.agent) or Trust.UNTRUSTED
    return caller if stored is Trust.VERIFIED else replace(caller, trust=stored)


def digest(secret: str) -> str:
    """What the store keeps of a key: its SHA-256, hex (the secret itself is never stored)."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def check_new_name(name: str, settings: Settings) -> str:
    """A name an account may be created under: well formed, not reserved, on the roster."""
    check_name(name)
    if name in RESERVED:
        raise forbidden(f"{name!r} is reserved", name=name)
    if settings.agents is not None and name not in settings.agents:
        raise forbidden(f"{name!r} is not on the roster (config `agents`)", name=name)
    return name


def check_identity(
    settings: Settings, name: str, *, session: bool = True, taken: str | None = None
) -> None:
    """Whether `name` may be an identity here. `session`: an agent's own session, which may
    never speak as the owner; `taken`: the derived name in use, when `name` is the next one."""
    check_name(name)
    if name in (SYSTEM, POST_OFFICE):
        raise forbidden(f"{name!r} is reserved for the post office")
    if session and name == OWNER:
        raise forbidden(f"{name!r} is the person at the command line, not an agent session")
    roster = settings.agents
    if roster is not None and name not in roster and name != OWNER:
        why = "" if taken is None else f"{taken!r} is in use, and the next name "
        how = "" if taken is None else ": name this session with AGENTPOST_AGENT"
        refused = f"{why}{name!r} is not on the roster (config `agents`){how}"
        raise forbidden(refused, roster=sorted(roster))


def check_project(project: str | None) -> str | None:
    """A project is also a channel (`#<project>`), so it follows the name grammar."""
    return None if project is None else check_name(project, "project")


# -- agents -------------------------------------------------------------------------------------


def agent_info(row: Row[Any], now: float) -> AgentInfo:
    """An `account_rows` row as the directory and the owner see it."""
    return AgentInfo(
        name=row.name,
        description=row.description,
        project=row.project,
        # A tag stored before profiles refused half a surrogate pair is left out, not fatal.
        capabilities=[c for c in json.loads(row.capabilities) if not holds_half_pair(c)],
        trust=Trust(row.trust),
        created_at=row.created_at,
        disabled=row.disabled_at is not None,
        online=bool(row.online),
        last_seen_s=None if row.last_seen is None else round(max(0.0, now - row.last_seen), 1),
    )


def accounts(conn: Connection, settings: Settings, now: float, **filters: Any) -> list[AgentInfo]:
    found = agent_rows.account_rows(
        conn, now=now, offline_after_s=settings.offline_after_s, excluding=INTERNAL, **filters
    )
    return [agent_info(row, now) for row in found]


def account(conn: Connection, settings: Settings, now: float, name: str) -> AgentInfo:
    """One agent, disabled or not; `not_found` when there is none."""
    found = accounts(conn, settings, now, names=[name], include_disabled=True)
    if not found:
        raise not_found(f"no agent named {name!r}", name=name)
    return found[0]


def existing(conn: Connection, name: str) -> Row[Any]:
    row = agent_rows.get_agent(conn, name)
    if row is None or name in INTERNAL:
        raise not_found(f"no agent named {name!r}", name=name)
    return row


def create_account(
    conn: Connection,
    name: str,
    *,
    now: float,
    trust: Trust,
    description: str = "",
    project: str | None = None,
    capabilities: Sequence[str] = (),
) -> None:
    """A new agent; a name ever used (even by a disabled agent) is never handed out again."""
    if agent_rows.get_agent(conn, name) is not None:
        raise AgentpostError(
            ErrorCode.CONFLICT,
            f"the name {name!r} is taken (names are never reused); to give that agent a key, "
            "issue one",
            details={"name": name},
        )
    agent_rows.create_agent(
        conn,
        name,
        now=now,
        project=project,
        description=description,
        trust=trust.value,
        capabilities=capabilities,
    )


# -- keys ---------------------------------------------------------------------------------------


def issue_key(conn: Connection, agent: str, *, now: float, label: str, admin: bool) -> IssuedKey:
    secret = new_secret()
    key_id = new_key_id(now)
    key_rows.insert_key(
        conn, key_id=key_id, agent=agent, digest=digest(secret), admin=admin, label=label, now=now
    )
    return IssuedKey(id=key_id, agent=agent, key=secret, admin=admin, created_at=now)


def key_info(row: Row[Any]) -> KeyInfo:
    return KeyInfo(
        id=row.id,
        agent=row.agent,
        label=row.label,
        admin=bool(row.admin),
        created_at=row.created_at,
        revoked_at=row.revoked_at,
        last_used_at=row.last_used_at,
    )


# -- limits and usage ---------------------------------------------------------------------------


def limits_in_effect(
    conn: Connection, settings: Settings, names: Sequence[str]
) -> dict[str, AgentLimits]:
    """Each agent's limits: the owner's overrides where set, the settings' elsewhere."""
    return limits_from(settings, names, limit_rows.overrides(conn, names))


def limits_from(
    settings: Settings, names: Sequence[str], overrides: dict[str, limit_rows.Override]
) -> dict[str, AgentLimits]:
    """As `limits_in_effect`, the overrides read already (with other columns)."""
    return {
        name: _in_effect(settings, name, overrides.get(name, limit_rows.NONE)) for name in names
    }


def _in_effect(settings: Settings, name: str, override: limit_rows.Override) -> AgentLimits:
    rate, cap, channels, tasks = override
    return AgentLimits(
        agent=name,
        send_rate_per_minute=settings.send_rate_per_minute if rate is None else rate,
        max_unacked=settings.max_unacked if cap is None else cap,
        max_channels_per_agent=settings.max_channels_per_agent if channels is None else channels,
        max_open_tasks_per_agent=settings.max_open_tasks_per_agent if tasks is None else tasks,
    )


def usage(
    conn: Connection, settings: Settings, now: float, names: Sequence[str] | None = None
) -> list[Usage]:
    """Usage of `names`, or of every agent but the post office's own."""
    if names is None:
        names = [a.name for a in accounts(conn, settings, now, include_disabled=True)]
    sent = usage_rows.sent_counts(conn, names, now - DAY_S)
    received = usage_rows.received_counts(conn, names, now)
    overrides = limit_rows.overrides(conn, names)
    out = []
    for name in names:
        override = overrides.get(name, limit_rows.NONE)
        limits = _in_effect(settings, name, override)
        sent_total, sent_day = sent.get(name, (0, 0))
        received_total, unread, unacked = received.get(name, (0, 0, 0))
        out.append(
            Usage(
                agent=name,
                sent_total=sent_total,
                sent_last_day=sent_day,
                received_total=received_total,
                unread=unread,
                unacked=unacked,
                send_rate_per_minute=limits.send_rate_per_minute,
                max_unacked=limits.max_unacked,
                max_channels_per_agent=limits.max_channels_per_agent,
                max_open_tasks_per_agent=limits.max_open_tasks_per_agent,
                own_limits=[
                    limit
                    for limit, value in zip(limit_rows.COLUMNS, override, strict=True)
                    if value is not None
                ],
            )
        )
    return out


# -- blocks -------------------------------------------------------------------------------------


def set_block(
    conn: Connection, store: Store, recipient: str, sender: str, *, blocked: bool, by: str
) -> bool:
    """Block or unblock `sender` for `recipient` (both must exist); True when it changed."""
    existing(conn, recipient)
    existing(conn, sender)
    if recipient == sender:
        raise invalid("an agent cannot block itself")
    was = bool(block_rows.blocking(conn, sender, [recipient]))
    if was == blocked:
        return False
    if blocked:
        block_rows.add(conn, store.dialect, recipient, sender, by=by, now=store.clock())
    else:
        block_rows.remove(conn, recipient, sender)
    return True
