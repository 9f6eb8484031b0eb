"""Keys: who a request is, from the bearer secret it carries; issuing, revoking, registering.

A secret is never stored, only its SHA-256 hash, which is also how it is found. Every request
authenticates against what the store holds at that moment, so a revoked key or a disabled agent
is refused on the very next request, on every replica. Failed attempts are counted per client
address (an IPv6 client's /64) in the store and lock the address out for a while; each one
leaves an audit row. A revoked key, or a disabled agent's, is no guess: it is refused as such
and counts toward no lockout.

A request costs one read (the lock, the key and its agent, the session); it writes only when
something is due: a new session, or a heartbeat older than a third of `heartbeat_s`. On SQLite
it costs not even that read when nothing that read found can have changed since the key's last
request: no commit of this process but sends, and none of another process
(`Store.accounts_version` looks for those at once). The caller found then is the answer again,
until its heartbeat falls due.

Which session a request speaks for: the one it names (`Agentpost-Session`), else the one its
connection was bound to (MCP `register` over a 2025-era connection, which has a transport
session), else the key's own. A binding only ever selects among the key's agent's live sessions:
identity still comes from the key, never from the connection.
"""

from __future__ import annotations

import hmac
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from agentpost.config import Settings
from agentpost.domain.accounts import (
    SECRET_MAX,
    SECRET_MIN,
    IssuedKey,
    KeyInfo,
    check_description,
    check_label,
    is_well_formed_secret,
)
from agentpost.domain.errors import (
    AgentpostError,
    ErrorCode,
    forbidden,
    invalid,
    key_turned_off,
    not_found,
)
from agentpost.domain.ids import key_id as new_key_id
from agentpost.domain.limits import quoted
from agentpost.domain.models import Caller, Trust
from agentpost.domain.names import OWNER, POST_OFFICE, check_name
from agentpost.services import accounts
from agentpost.services.admin_gate import AdminGate, OncePerWindow
from agentpost.services.client_address import audited as _audited
from agentpost.services.client_address import counted as _counted
from agentpost.services.client_address import spelt as _address
from agentpost.services.presence import http_session
from agentpost.store import agents as agent_rows
from agentpost.store import audit, lockouts, rates, wakeups
from agentpost.store import keys as key_rows
from agentpost.store import webhooks as webhook_rows
from agentpost.store.database import Connection, Row, Store

ANONYMOUS = "-"
"""The audit's actor before anyone is authenticated."""
REGISTER_WINDOW_S = 3600.0
REGISTER_RATE_KEY = "register:"
"""Prefix of each address's self-registration window in the store."""
REGISTER_TOTAL_KEY = f"{REGISTER_RATE_KEY}*"
"""All addresses together: no address is spelt with `*`."""
MAX_BOUND_CONNECTIONS = 10_000
"""Connections remembered with their session; past this, the longest unused is forgotten (its
requests then speak for the key's own session again)."""
MAX_REMEMBERED_CALLERS = 4_096
"""Callers remembered from their last authentication; past this, the longest unused go."""


default_session_id = key_rows.own_session_id


def _locked_out(seconds_left: float) -> AgentpostError:
    return AgentpostError(
        ErrorCode.LOCKED_OUT,
        "too many failed authentications from this address; try again later",
        retry_after_s=float(math.ceil(seconds_left)),
    )


def _audit_failure(
    conn: Connection, now: float, address: str, reason: str, key_id: str | None
) -> None:
    audit.record(
        conn,
        at=now,
        actor=ANONYMOUS,
        action="auth.failed",
        target=key_id,
        ip=_audited(address),
        detail={"reason": reason},
    )


@dataclass(frozen=True, slots=True)
class _SessionSeen:
    """The session a request names (or its key's own) as authentication read it."""

    id: str
    agent: str
    transport: str
    heartbeat_at: float
    ended_at: float | None


@dataclass(frozen=True, slots=True)
class _Remembered:
    """A caller as authentication found it, while `Store.accounts_version` stood at `version`;
    it holds until that changes, or `due_at`, when its heartbeat needs writing."""

    version: int
    caller: Caller
    due_at: float


_Asked = tuple[str, str, str | None, tuple[str, str] | None]
"""What a request asks to be: its key's digest, its address, the session it names, the one
its connection is bound to."""


@dataclass(frozen=True, slots=True)
class _Look:
    """What one read found for a request."""

    locked_for: float | None = None
    key: Row[Any] | None = None
    session: _SessionSeen | None = None
    bound: bool = False
    """`session` is the live one the request's connection was bound to."""


def _session_of(row: Row[Any]) -> _SessionSeen | None:
    """The session part of `key_rows.for_request`'s row (None: no such session)."""
    if row.session_id is None:
        return None
    return _SessionSeen(
        row.session_id,
        row.session_agent,
        row.session_transport,
        row.session_heartbeat_at,
        row.session_ended_at,
    )


class Keys:
    def __init__(self, store: Store, settings: Settings, gate: AdminGate) -> None:
        self.store = store
        self.settings = settings
        self._gate = gate
        self._bound: OrderedDict[str, tuple[str, str]] = OrderedDict()
        """connection → (agent, session id), in this process only, as connections are."""
        self._remembered: OrderedDict[_Asked, _Remembered] = OrderedDict()
        self._told_off = OncePerWindow(settings.lockout_s)
        """Key ids whose requests, revoked or their agent disabled, were audited lately."""

    # -- authentication -----------------------------------------------------------------------

    async def authenticate(
        self,
        secret: str | None,
        *,
        ip: str | None,
        session: str | None = None,
        connection: str | None = None,
        own_session: bool = True,
    ) -> Caller:
        """The caller a bearer secret stands for, with its session (the key's own unless a
        live session of the agent is named, or the connection was bound to one). A
        locked-out address is refused before anything else. A request without any key is
        refused but not counted: that is a client asking what to do (MCP clients probe so),
        not a guess.

        Without `own_session` a request that names no session speaks for none: the request
        that mints a session would otherwise open the key's own too, and leave it online
        after the minted one ends."""
        address = _address(ip)
        counted = _counted(address)
        hashed = accounts.digest(secret) if is_well_formed_secret(secret) else None
        lock_s = self.settings.lockout_s
        bound = self._bound_session(connection) if session is None else None
        version = None if hashed is None else self.store.accounts_version()
        asked: _Asked | None = None
        if hashed is not None and version is not None:
            asked = (hashed, address, session, bound)
            known = self._remembered.get(asked)
            if known is not None and known.version == version and self.store.clock() < known.due_at:
                self._remembered.move_to_end(asked)
                return known.caller

        def look(conn: Connection) -> _Look:
            # One statement in the common case; a connection's session that ended costs two.
            asked = session or (bound[1] if bound is not None else None)
            row = key_rows.for_request(conn, digest=hashed, ip=counted, session=asked)
            if row.locked_at is not None and row.locked_at + lock_s > self.store.clock():
                return _Look(locked_for=row.locked_at + lock_s - self.store.clock())
            if row.id is None:
                return _Look()
            found = _session_of(row)
            if session is not None or bound is None:
                return _Look(key=row, session=found)
            if (
                bound[0] == row.agent
                and found is not None
                and found.agent == row.agent
                and found.ended_at is None
            ):
                return _Look(key=row, session=found, bound=True)
            own = key_rows.for_request(conn, digest=hashed, ip=counted, session=None)
            return _Look(key=own, session=_session_of(own))

        seen = await self.store.glance(look)
        if seen.locked_for is not None:
            raise _locked_out(seen.locked_for)
        if not secret:
            raise AgentpostError(
                ErrorCode.UNAUTHENTICATED, "a key is needed: `Authorization: Bearer ap_…`"
            )
        key = seen.key
        if key is None or hashed is None or not hmac.compare_digest(key.hash, hashed):
            await self._failed(address, "unknown key" if hashed else "malformed key", None)
            raise AgentpostError(ErrorCode.UNAUTHENTICATED, "unknown key")
        if key.revoked_at is not None:
            await self._turned_off(address, "revoked key", key.id)
            raise key_turned_off(key.agent, revoked=True)
        if key.disabled_at is not None:
            await self._turned_off(address, "agent disabled", key.id)
            raise key_turned_off(key.agent, revoked=False)
        if seen.bound and seen.session is not None:
            session = seen.session.id
        elif (
            connection is not None
            and bound is not None
            and bound[0] == key.agent
            and self._bound.get(connection) == bound  # not rebound while we looked
        ):
            del self._bound[connection]  # its session ended: back to the key's own
        session_id: str | None = None
        due_at: float | None = None  # nothing is remembered of a caller that spoke for none
        if own_session or session is not None:
            session_id, due_at = await self._session(key, seen.session, session, address)
        caller = Caller(
            agent=key.agent,
            session_id=session_id,
            trust=Trust(key.trust),
            admin=bool(key.admin),
            key_id=key.id,
            ip=_audited(address),
        )
        if asked is not None and version is not None and due_at is not None:
            self._remember(asked, _Remembered(version, caller, due_at))
        return caller

    def _remember(self, asked: _Asked, found: _Remembered) -> None:
        self._remembered[asked] = found
        self._remembered.move_to_end(asked)
        while len(self._remembered) > MAX_REMEMBERED_CALLERS:
            self._remembered.popitem(last=False)

    def may_bind(self, connection: str, caller: Caller) -> bool:
        """Whether `caller` may bind `connection`: not while another agent holds it."""
        bound = self._bound.get(connection)
        return bound is None or bound[0] == caller.agent

    def bind_connection(self, connection: str, caller: Caller) -> str | None:
        """From now on, requests on `connection` with a key of `caller.agent` that name no
        session speak for `caller.session_id` (while it is live); returns the session it was
        bound to before, if another. A connection another agent bound stays theirs: a
        connection id is no secret to rely on."""
        if caller.session_id is None:
            raise ValueError("binding a connection needs a session")
        if not self.may_bind(connection, caller):
            raise forbidden("this connection is bound to another agent's session")
        before = self._bound.get(connection)
        self._bound[connection] = (caller.agent, caller.session_id)
        self._bound.move_to_end(connection)
        while len(self._bound) > MAX_BOUND_CONNECTIONS:
            self._bound.popitem(last=False)
        return None if before is None or before[1] == caller.session_id else before[1]

    def bound_session(self, connection: str, caller: Caller) -> str | None:
        """The session `connection` speaks for now, if `caller`'s agent bound it to one."""
        bound = self._bound.get(connection)
        return bound[1] if bound is not None and bound[0] == caller.agent else None

    def release_connection(self, connection: str, caller: Caller) -> str | None:
        """Forget a connection its caller closed; returns the session it was bound to, if any
        (and only to the agent it was bound for)."""
        bound = self._bound.get(connection)
        if bound is None or bound[0] != caller.agent:
            return None
        del self._bound[connection]
        return bound[1]

    def _bound_session(self, connection: str | None) -> tuple[str, str] | None:
        if connection is None:
            return None
        bound = self._bound.get(connection)
        if bound is not None:
            self._bound.move_to_end(connection)
        return bound

    async def _turned_off(self, address: str, reason: str, key_id: str) -> None:
        """Audit a request with a revoked key or a disabled agent's, once a lockout window per
        key and process. It counts toward no lockout: such a key is as hard to find as a live
        one and grants nothing, while a daemon left retrying with it would lock out every
        agent on its host. Nor does its every retry write."""
        now = self.store.clock()
        if not self._told_off.due(key_id, now):
            return
        await self.store.write(lambda conn: _audit_failure(conn, now, address, reason, key_id))

    async def _failed(self, address: str, reason: str, key_id: str | None) -> None:
        """Count the failure; a request that was in flight while others locked its address
        out is refused as locked out, so no more guesses are answered than the count allows."""

        def tx(conn: Connection) -> lockouts.Counted:
            now = self.store.clock()
            _audit_failure(conn, now, address, reason, key_id)
            counted = lockouts.count_failure(
                conn,
                self.store.dialect,
                _counted(address),
                now,
                self.settings.lockout_s,
                self.settings.lockout_failures,
            )
            if counted.locks:  # the owner learns which address (or /64) is shut out, and why
                audit.record(
                    conn,
                    at=now,
                    actor=ANONYMOUS,
                    action="auth.locked_out",
                    target=_counted(address),
                    ip=_audited(address),
                    detail={"failures": self.settings.lockout_failures},
                )
            return counted

        # It touches accounts (the default): the lock it may set must end every caller
        # remembered from this address, who would otherwise get in until its heartbeat is due.
        counted = await self.store.write(tx)
        if counted.locked_for is not None:
            raise _locked_out(counted.locked_for)

    async def _session(
        self, key: Row[Any], found: _SessionSeen | None, named: str | None, address: str
    ) -> tuple[str, float | None]:
        """The request's session id; opens, revives or heartbeats it when that is due. With it,
        when nothing was due, the time when something next will be (None: it was written)."""
        if named is not None and (
            found is None
            or found.agent != key.agent
            or found.ended_at
            # A key speaks for sessions minted over HTTP only: a local session's process
            # is its own, and may do what only a local session may (force leadership).
            or found.transport != "http"
        ):
            raise not_found(
                f"no live session {quoted(named)!r} of {key.agent}", session=quoted(named)
            )
        session_id = named or default_session_id(key.id)
        now = self.store.clock()
        due = self.settings.heartbeat_s / 3
        fresh = found is not None and found.ended_at is None and now - found.heartbeat_at < due
        used = key.last_used_at is not None and now - key.last_used_at < due
        if fresh and used:
            assert found is not None
            assert key.last_used_at is not None
            return session_id, min(found.heartbeat_at, key.last_used_at) + due

        def tx(conn: Connection) -> None:
            now = self.store.clock()
            key_rows.touch(conn, key.id, now)
            current = agent_rows.get_session(conn, session_id)
            if current is None:
                session = http_session(
                    session_id, key.agent, host=address, project=key.project, now=now
                )
                # Any request opens it, a one-off command's read too: that says nothing of
                # what the agent is doing, where its other live sessions do (`who`).
                agent_rows.open_session(conn, session, derived_name=False, says=False)
            elif current.ended_at is None:
                agent_rows.update_session(conn, session_id, heartbeat_at=now)
            elif named is None:  # a key's own session comes back with the key
                agent_rows.update_session(
                    conn, session_id, ended_at=None, started_at=now, heartbeat_at=now, said_at=None
                )

        await self.store.write(tx)
        return session_id, None

    # -- the owner's key --------------------------------------------------------------------

    async def install_admin_key(self, secret: str) -> KeyInfo:
        """Make `secret` (from the config or `admin.key`) an admin key of `owner`, creating the
        owner if needed. Idempotent. A key the owner revoked stays revoked: the answer's
        `revoked_at` says so, and the configured secret must change."""
        if not is_well_formed_secret(secret):
            raise invalid(
                f"an admin key must be {SECRET_MIN} to {SECRET_MAX} visible ASCII characters"
            )
        hashed = accounts.digest(secret)

        def tx(conn: Connection) -> KeyInfo:
            now = self.store.clock()
            found = key_rows.by_hash(conn, hashed)
            if found is not None:
                if found.agent != OWNER or not found.admin:
                    raise AgentpostError(
                        ErrorCode.CONFLICT, "that secret is already another agent's key"
                    )
                row = key_rows.get_key(conn, found.id)
                assert row is not None
                return accounts.key_info(row)
            if agent_rows.get_agent(conn, OWNER) is None:
                agent_rows.create_agent(conn, OWNER, now=now)
            key_id = new_key_id(now)
            key_rows.insert_key(
                conn,
                key_id=key_id,
                agent=OWNER,
                digest=hashed,
                admin=True,
                label="configured",
                now=now,
            )
            audit.record(conn, at=now, actor=POST_OFFICE, action="key.installed", target=key_id)
            row = key_rows.get_key(conn, key_id)
            assert row is not None
            return accounts.key_info(row)

        return await self.store.write(tx)

    # -- issuing and revoking ----------------------------------------------------------------

    async def issue(
        self, admin: Caller, agent: str, *, label: str = "", admin_key: bool = False
    ) -> IssuedKey:
        """A new key for an existing agent; admin keys are the owner's alone."""
        await self._gate.require(admin, "issue_key", agent)
        check_name(agent)
        check_label(label)
        if admin_key and agent != OWNER:
            raise invalid(f"admin keys belong to {OWNER!r}", agent=agent)

        def tx(conn: Connection) -> IssuedKey:
            now = self.store.clock()
            if accounts.existing(conn, agent).disabled_at is not None:
                raise AgentpostError(ErrorCode.GONE, f"agent {agent!r} is disabled; enable it")
            issued = accounts.issue_key(conn, agent, now=now, label=label, admin=admin_key)
            audit.record(
                conn,
                at=now,
                actor=admin.agent,
                action="key.issued",
                target=issued.id,
                ip=admin.ip,
                detail={"agent": agent, "admin": admin_key, "label": label},
            )
            return issued

        return await self.store.write(tx)

    async def revoke(self, admin: Caller, key_id: str) -> KeyInfo:
        """Revoke a key for good, and the webhooks made with it (a leaked key's would go on
        sending the agent's mail); the owner's last working admin key cannot go."""
        await self._gate.require(admin, "revoke_key", key_id)

        def tx(conn: Connection) -> KeyInfo:
            now = self.store.clock()
            row = key_rows.get_key(conn, key_id) if isinstance(key_id, str) else None
            if row is None:
                raise not_found(f"no key {quoted(key_id)!r}", key_id=quoted(key_id))
            if row.revoked_at is not None:
                return accounts.key_info(row)
            if row.admin and key_rows.live_admin_keys(conn) <= 1:
                raise AgentpostError(
                    ErrorCode.CONFLICT,
                    "this is the last admin key; issue another before revoking it",
                )
            key_rows.revoke(conn, key_id, now)
            wakeups.rouse(conn, [row.agent])
            hooks = webhook_rows.delete_made_with(conn, key_id, now)
            audit.record(
                conn,
                at=now,
                actor=admin.agent,
                action="key.revoked",
                target=key_id,
                ip=admin.ip,
                detail={"agent": row.agent, "webhooks_deleted": hooks},
            )
            revoked = key_rows.get_key(conn, key_id)
            assert revoked is not None
            return accounts.key_info(revoked)

        return await self.store.write(tx)

    async def list_keys(self, admin: Caller, agent: str | None = None) -> list[KeyInfo]:
        await self._gate.require(admin, "list_keys", agent)

        def look(conn: Connection) -> list[Row[Any]]:
            if agent is not None:
                accounts.existing(conn, check_name(agent))
            return key_rows.list_keys(conn, agent)

        return [accounts.key_info(row) for row in await self.store.read(look)]

    # -- self-registration -------------------------------------------------------------------

    async def self_register(
        self,
        name: str,
        *,
        description: str = "",
        project: str | None = None,
        ip: str | None,
    ) -> IssuedKey:
        """An agent creating itself, when the owner opened registration: its mail is
        `untrusted` until the owner vouches for it. Limited per client address (an IPv6
        client's /64) and over all addresses together, each over the last hour (agents are
        never deleted: a client of many addresses would fill the directory for good); an
        attempt refused as a name taken counts too."""
        if not self.settings.open_registration:
            raise forbidden("registration is closed; ask the owner for a key")
        accounts.check_new_name(name, self.settings)
        check_description(description)
        accounts.check_project(project)
        address = _address(ip)
        counted = _counted(address)
        limits = (
            (f"{REGISTER_RATE_KEY}{counted}", self.settings.register_rate_per_hour, "one address"),
            (REGISTER_TOTAL_KEY, self.settings.register_total_per_hour, "all addresses"),
        )

        def tx(conn: Connection) -> IssuedKey | AgentpostError:
            now = self.store.clock()
            for key, limit, source in limits:  # a refusal rolls back what was counted before
                wait_s = rates.hit_sliding(
                    conn, self.store.dialect, key, now, REGISTER_WINDOW_S, limit
                )
                if wait_s is not None:
                    raise AgentpostError(
                        ErrorCode.RATE_LIMITED,
                        f"at most {limit} registrations an hour from {source}",
                        details={"limit": limit},
                        retry_after_s=float(math.ceil(wait_s)),
                    )
            try:
                accounts.create_account(
                    conn,
                    name,
                    now=now,
                    trust=Trust.UNTRUSTED,
                    description=description,
                    project=project,
                )
            except AgentpostError as taken:  # counted: else names could be probed freely
                return taken
            issued = accounts.issue_key(conn, name, now=now, label="self-registered", admin=False)
            audit.record(
                conn,
                at=now,
                actor=name,
                action="agent.registered",
                target=name,
                ip=_audited(address),
                detail={"key": issued.id, "project": project},
            )
            return issued

        registered = await self.store.write(tx)
        if isinstance(registered, AgentpostError):
            raise registered
        return registered
