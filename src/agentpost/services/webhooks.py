"""Signed webhooks: an agent's events POSTed to a URL of its choosing, retried until they land.

The dispatcher (`run_dispatcher`, one per `serve`; replicas may each run one) turns new events
into deliveries in the store, then POSTs the due ones. Each request is signed
(`X-Agentpost-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`) and names its
delivery (`X-Agentpost-Delivery`, the same id on every attempt, so a receiver can drop repeats)
and event type (`X-Agentpost-Event`). A 2xx answer delivers; anything else (a redirect too: none
is followed) is retried after 1 s, 2 s, 4 s … until `webhook_max_attempts`, then the delivery
fails. Every retry lives in the store, so a restart loses none.

A webhook may not point at link-local, cloud-metadata, multicast or unspecified addresses:
refused when it is created, and again at each delivery after the name is resolved (the request
then goes to the address that was checked, so a name cannot change its answer in between).
Loopback and private addresses are allowed: a post office on a laptop talks to its neighbours.

This is the only server module that speaks HTTP outwards (the one home of `httpx` besides the
client).
"""

from __future__ import annotations

import builtins
import hashlib
import hmac
import ipaddress
import logging
import secrets
import socket
import time
from collections import Counter
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from agentpost import __version__
from agentpost.config import Settings
from agentpost.domain import limits as rules
from agentpost.domain.errors import AgentpostError, ErrorCode, invalid, not_found
from agentpost.domain.events import (
    MAX_URL_CHARS,
    MAX_WEBHOOKS,
    Webhook,
    WebhookDelivery,
    check_event_types,
)
from agentpost.domain.ids import webhook_id as new_webhook_id
from agentpost.domain.models import Caller
from agentpost.store import agents as agent_rows
from agentpost.store import keys as key_rows
from agentpost.store import webhooks as webhook_rows
from agentpost.store.database import Connection, Row, Store
from agentpost.store.wakeups import Watch

if TYPE_CHECKING:
    import httpx
    from anyio.abc import TaskGroup

log = logging.getLogger(__name__)

SECRET_PREFIX = "whsec_"
CLAIM_BATCH = 16
"""Deliveries claimed at once by one dispatcher."""
MAX_IN_FLIGHT = 256
"""Deliveries one dispatcher has on their way at once: each POST runs beside the others and
beside the claiming, so a receiver that takes its time holds up only its own deliveries."""
MAX_IN_FLIGHT_PER_AGENT = 8
"""Of those, one agent's (all its webhooks'): receivers that never answer take no more."""
MAX_LOOKUPS = 64
"""Name lookups under way at once, on threads of their own: the event loop's few default
executor threads, filled by one agent's slow nameserver, would hold up everyone's deliveries
(and a lookup its attempt gave up on keeps its thread till the resolver answers)."""
ENQUEUE_PAGE = 500
LEASE_EXTRA_S = 30.0
"""A claimed delivery is not due again for the timeout plus this (a dispatcher died mid-way)."""
HOOKED_FRESH_S = 1.0
"""How long, waiting, the dispatcher trusts its list of agents with webhooks (about a round
plus this since it was read): a webhook made by another replica is heard of within it."""
MAX_SLEEP_S = 60.0
UNAVAILABLE_RETRY_S = 5.0
RELEASE_S = 5.0
"""How long a stopping dispatcher may take to hand back the deliveries it had in flight."""
ERROR_CHARS = 500

METADATA_NAMES = frozenset({"metadata.google.internal", "metadata.goog"})
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200", "169.254.170.2")
)
BROADCAST = ipaddress.ip_address("255.255.255.255")


# -- where a webhook may point ------------------------------------------------------------------


_EMBEDDING_IPV4 = tuple(
    ipaddress.ip_network(n)
    for n in (
        "::/96",  # IPv4-compatible (deprecated, still routed by some stacks)
        "::ffff:0:0/96",  # IPv4-mapped
        "::ffff:0:0:0/96",  # IPv4-translated (SIIT)
        "64:ff9b::/96",  # NAT64, well-known prefix
    )
)
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
"""NAT64 for local use: a prefix of 48 bits or longer, so the IPv4 address sits where that
length puts it (RFC 6052)."""


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 one may reach through a gateway: the last 32 bits of the
    embedding prefixes, each place a local NAT64 prefix may put them, a 6to4 address's, a
    Teredo client's."""
    if ip.sixtofour is not None:
        return [ip.sixtofour]
    if ip.teredo is not None:
        return [ip.teredo[1]]
    value = int(ip)

    def bits(first: int, end: int) -> int:  # bits [first, end) counted from the top
        return (value >> (128 - end)) & ((1 << (end - first)) - 1)

    if ip in _NAT64_LOCAL:  # after the prefix, the 8 bits at 64-71 are always zero
        return [
            ipaddress.IPv4Address(address)
            for address in (
                bits(48, 64) << 16 | bits(72, 88),  # a /48 prefix
                bits(56, 64) << 24 | bits(72, 96),  # a /56 prefix
                bits(72, 104),  # a /64 prefix
                bits(96, 128),  # a /96 prefix
            )
        ]
    if any(ip in network for network in _EMBEDDING_IPV4):
        return [ipaddress.IPv4Address(value & 0xFFFFFFFF)]
    return []


def refused_address(address: str) -> str | None:
    """Why an IP address may not receive webhooks, or None when it may: checked as written,
    and as each IPv4 address it may embed, in whichever IPv6 spelling."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    reason = _refused_ip(ip)
    if reason is not None or not isinstance(ip, ipaddress.IPv6Address):
        return reason
    embedded = _embedded_ipv4(ip)
    if len(embedded) == 1:
        return _refused_ip(embedded[0])
    # A local NAT64 address read every way its prefix may lay it out: most readings are no
    # address anyone meant, so only the ones a gateway would carry to a forbidden place count.
    for candidate in embedded:
        if candidate in METADATA_ADDRESSES:
            return "a cloud metadata address"
        if candidate.is_link_local:
            return "a link-local address"
    return None


def _refused_ip(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_unspecified:
        return "the unspecified address"
    if ip == BROADCAST:
        return "the broadcast address"
    return None


def _refuse(url: str, reason: str) -> AgentpostError:
    return invalid(f"a webhook may not point at {reason}", url=url)


def _parse(url: str) -> httpx.URL:
    import httpx  # here: a local MCP server never loads it

    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        raise invalid("url is not a valid URL", url=url) from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise invalid("url must be an http:// or https:// URL with a host", url=url)
    if parsed.port is not None and not 1 <= parsed.port <= 65535:  # httpx takes any number
        raise invalid("url has a port no connection can reach: 1 to 65535", url=url)
    return parsed


def _port(url: httpx.URL) -> int:
    return url.port or (443 if url.scheme == "https" else 80)


def check_url(url: str) -> str:
    """The webhook URL, checked as far as can be without asking DNS: scheme, host, and no
    forbidden name or address literal (in any spelling the resolver accepts, `2852039166`
    included)."""
    if not isinstance(url, str) or not url.strip():
        raise invalid("url must be an http:// or https:// URL")
    url = url.strip()
    if len(url) > MAX_URL_CHARS:
        raise invalid(f"url is over {MAX_URL_CHARS} characters")
    parsed = _parse(url)
    host = parsed.raw_host.decode("ascii").lower().rstrip(".")
    if host in METADATA_NAMES:
        raise _refuse(url, "a cloud metadata address")
    if ":" in host:  # an IPv6 literal, maybe with a zone (`%25eth0`), which no resolver takes
        try:
            literal = ipaddress.IPv6Address(host.replace("%25", "%").split("%", 1)[0])
        except ValueError:
            raise invalid("url has a host that is no IPv6 address", url=url) from None
        reason = refused_address(str(literal))
        if reason:
            raise _refuse(url, reason)
        return url
    try:
        numeric = socket.getaddrinfo(
            host, _port(parsed), type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST
        )
    except (socket.gaierror, UnicodeError):
        return url  # a name: checked again once resolved, at every delivery
    for info in numeric:
        reason = refused_address(str(info[4][0]))
        if reason:
            raise _refuse(url, reason)
    return url


def lookup(host: str, port: int) -> list[str]:
    """The addresses of a name, in the resolver's order (blocking: run on a thread)."""
    return [str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


async def _allowed_addresses(url: httpx.URL, lookups: anyio.CapacityLimiter) -> list[str]:
    """Resolve the URL's host; refuse it if any of its addresses is forbidden; else all of
    them, in the resolver's order (without repeats)."""
    host = url.raw_host.decode("ascii")
    if host.lower().rstrip(".") in METADATA_NAMES:
        raise _refuse(str(url), "a cloud metadata address")
    try:
        addresses = [str(ipaddress.ip_address(host.split("%", 1)[0]))]  # no lookup for a literal
    except ValueError:
        addresses = await anyio.to_thread.run_sync(
            lookup,
            host,
            _port(url),
            abandon_on_cancel=True,  # the attempt's deadline does not wait for a slow resolver
            limiter=lookups,
        )
    if not addresses:
        raise AgentpostError(ErrorCode.UNAVAILABLE, f"{host} has no address")
    for address in addresses:
        reason = refused_address(address)
        if reason:
            raise _refuse(str(url), f"{reason} ({host} is {address})")
    return list(dict.fromkeys(address.split("%", 1)[0] for address in addresses))


def sign(secret: str, timestamp: int, body: str) -> str:
    """The `X-Agentpost-Signature` value: `t=<timestamp>,v1=<hex HMAC-SHA256>` of `t.body`."""
    digest = hmac.new(secret.encode(), f"{timestamp}.{body}".encode(), hashlib.sha256)
    return f"t={timestamp},v1={digest.hexdigest()}"


# -- the service ------------------------------------------------------------------------------


class Webhooks:
    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self._changes = 0
        """Webhooks created or deleted by this process so far."""
        self._hooked: frozenset[str] | None = None
        """The agents with a live webhook (None: read it afresh before the next round). Only
        their news makes the dispatcher look; another process's webhooks are learnt from its
        commits, whose reach is unknown, and at least every `HOOKED_FRESH_S` under traffic."""
        self._news: Watch | None = None
        """The dispatcher's watch, woken when this process creates or deletes a webhook."""
        self._lookups = anyio.CapacityLimiter(MAX_LOOKUPS)
        self._in_flight: Counter[str] = Counter()
        """Claimed deliveries whose outcome is not recorded yet, by agent."""
        self._recorded = False
        """An outcome was recorded since the dispatcher last looked (a retry may be due)."""
        self._abandoned: builtins.list[str] = []
        """Deliveries in flight when the dispatcher was stopped, their outcome unseen."""

    async def create(
        self, caller: Caller, url: str, events: builtins.list[str]
    ) -> tuple[Webhook, str]:
        """A new webhook for the caller's events of these types; returns it and its signing
        secret (`whsec_…`), which is shown this once. Revoking the caller's key deletes it."""
        url = check_url(url)
        types = check_event_types(events)
        secret = SECRET_PREFIX + secrets.token_urlsafe(32)

        def tx(conn: Connection) -> Webhook:
            now = self.store.clock()
            _check_agent(conn, caller)
            if webhook_rows.live_count(conn, caller.agent) >= MAX_WEBHOOKS:
                raise AgentpostError(
                    ErrorCode.CONFLICT,
                    f"an agent has at most {MAX_WEBHOOKS} webhooks; delete one first",
                    details={"limit": MAX_WEBHOOKS},
                )
            hook_id = new_webhook_id(now)
            webhook_rows.insert_webhook(
                conn,
                id=hook_id,
                agent=caller.agent,
                url=url,
                events=types,
                secret=secret,
                now=now,
                key_id=caller.key_id,
            )
            return Webhook(hook_id, url, types, now)

        made = await self.store.write(tx)
        self._webhooks_changed()
        return made, secret

    async def list(self, caller: Caller) -> builtins.list[Webhook]:
        """The caller's webhooks, oldest first (secrets are never shown again)."""
        return await self.store.read(lambda conn: webhook_rows.live_webhooks(conn, caller.agent))

    async def delete(self, caller: Caller, webhook_id: str) -> None:
        """Delete one of the caller's webhooks; what it had not delivered yet fails."""

        def tx(conn: Connection) -> None:
            if webhook_rows.live_webhook(conn, caller.agent, webhook_id) is None:
                raise _no_webhook(webhook_id)
            webhook_rows.delete_webhook(conn, webhook_id, self.store.clock())

        await self.store.write(tx)
        self._webhooks_changed()

    async def deliveries(
        self, caller: Caller, webhook_id: str, limit: int = 50
    ) -> builtins.list[WebhookDelivery]:
        """One of the caller's webhooks' deliveries, newest first, with their attempts."""
        rules.check_limit(limit)

        def tx(conn: Connection) -> builtins.list[WebhookDelivery]:
            if webhook_rows.live_webhook(conn, caller.agent, webhook_id) is None:
                raise _no_webhook(webhook_id)
            return webhook_rows.deliveries_of(conn, webhook_id, limit)

        return await self.store.read(tx)

    # -- the dispatcher ---------------------------------------------------------------------

    async def run_dispatcher(self) -> None:
        """Forever: enqueue new events for each webhook, POST what is due, sleep until a
        commit writes events (or another process commits) or the next retry is due."""
        import httpx

        # No proxies from the environment, no redirects; and no kept-alive connections, which
        # are pooled by address alone and could carry one name's TLS session to another name.
        try:
            async with (
                httpx.AsyncClient(
                    timeout=self.settings.webhook_timeout_s,
                    follow_redirects=False,
                    trust_env=False,
                    limits=httpx.Limits(max_keepalive_connections=0),
                ) as client,
                anyio.create_task_group() as posting,
            ):
                with self.store.watch(None) as news:
                    self._news = news
                    try:
                        while True:
                            try:
                                sleep = await self._round(client, posting)
                            except AgentpostError as err:
                                if err.code is not ErrorCode.UNAVAILABLE:
                                    raise
                                log.warning("webhook dispatcher: %s; trying again", err)
                                sleep = UNAVAILABLE_RETRY_S
                            await self._until_work(news, sleep)
                    finally:
                        self._news = None
        finally:
            await self._release_abandoned()

    async def _release_abandoned(self) -> None:
        """Hand back what was in flight when the dispatcher stopped: due at once for the next
        dispatcher (another replica, or this service started again), not after its lease. The
        receiver may have had it already; deliveries carry their id for that. A database that
        does not answer in time leaves them to their lease, as a crash would."""
        abandoned, self._abandoned = self._abandoned, []
        if not abandoned:
            return
        with anyio.CancelScope(shield=True) as scope:
            scope.deadline = anyio.current_time() + RELEASE_S
            try:
                await self.store.write(
                    lambda conn: webhook_rows.release(conn, abandoned, self.store.clock())
                )
            except AgentpostError as err:
                log.warning("webhook dispatcher: %s; in flight at the stop: %s", err, abandoned)

    def _webhooks_changed(self) -> None:
        """After a webhook was created or deleted here: who has webhooks is read again, and the
        dispatcher looks at once. The commit that made the webhook may already have woken it
        for the agent's news, before the agent counted as hooked."""
        self._changes += 1
        self._hooked = None
        if self._news is not None:
            self._news.wake()

    async def _until_work(self, news: Watch, sleep: float | None) -> None:
        """Wait until a commit concerns an agent with a webhook, or `sleep` seconds passed (a
        retry falls due). Mail between agents without webhooks, most of it, costs no look.
        When a commit's reach is unknown (another process's on SQLite), webhooks changed here,
        or `HOOKED_FRESH_S` passed, go and look, and read afresh who has webhooks: a webhook
        made by another replica concerns nobody's news, so nothing else tells of it."""
        start = time.monotonic()
        until = start + HOOKED_FRESH_S if sleep is None else start + min(sleep, HOOKED_FRESH_S)
        while True:
            woken = await news.wait(max(0.0, until - time.monotonic()))
            if self._recorded:  # a delivery ended here: its retry may be due before `sleep`
                self._recorded = False
                return
            reach = news.reach() if woken else None
            hooked = self._hooked
            if reach is None or hooked is None:
                self._hooked = None  # read afresh who has webhooks
                return
            if not hooked.isdisjoint(reach):
                return

    async def _round(self, client: httpx.AsyncClient, posting: TaskGroup) -> float | None:
        """Enqueue, then claim until nothing is due, each claimed delivery POSTed in `posting`
        (not awaited); returns how long to sleep (None: until the store changes)."""
        if self._hooked is None:
            changes = self._changes
            hooked = await self.store.glance(webhook_rows.hooked_agents)
            if changes == self._changes:  # else a webhook changed meanwhile: read it again
                self._hooked = hooked
        # Until no webhook is behind: its own commits write no events, so they wake nobody.
        while await self.store.glance(webhook_rows.any_behind):
            await self.store.write(
                lambda conn: webhook_rows.enqueue(conn, self.store.clock(), ENQUEUE_PAGE)
            )
        lease = self.settings.webhook_timeout_s + LEASE_EXTRA_S
        while True:
            room = min(CLAIM_BATCH, MAX_IN_FLIGHT - self._in_flight.total())
            if room <= 0:
                return None  # the next delivery to end wakes the dispatcher
            busy = dict(self._in_flight)
            due = await self.store.glance(
                partial(webhook_rows.next_due, busy=busy, per_agent=MAX_IN_FLIGHT_PER_AGENT)
            )
            if due is None:
                return None
            wait = due - self.store.clock()
            if wait > 0:
                return min(wait, MAX_SLEEP_S)

            def claim(
                conn: Connection, limit: int = room, busy: dict[str, int] = busy
            ) -> builtins.list[Row[Any]]:
                now = self.store.clock()
                return webhook_rows.claim_due(
                    conn, now, lease, limit, busy, MAX_IN_FLIGHT_PER_AGENT
                )

            claimed = await self.store.write(claim)
            # None claimed: another dispatcher took them.
            for row in claimed:
                self._in_flight[row.agent] += 1
                posting.start_soon(self._deliver, client, row)

    async def _deliver(self, client: httpx.AsyncClient, row: Row[Any]) -> None:
        """POST one claimed delivery and record the outcome; then wake the dispatcher, for its
        retry may be due sooner than anything it knew of, and there is room for another."""
        try:
            ok, status, error = await self._attempt(client, row)
            await self.store.write(
                lambda conn: webhook_rows.record_attempt(
                    conn,
                    row.id,
                    row.attempts + 1,
                    self.store.clock(),
                    ok=ok,
                    status=status,
                    error=error,
                    max_attempts=self.settings.webhook_max_attempts,
                )
            )
        except AgentpostError as err:
            if err.code is not ErrorCode.UNAVAILABLE:
                raise
            # Unrecorded: the delivery is due again when its lease runs out.
            log.warning("webhook dispatcher: %s; %s is tried again later", err, row.id)
        except anyio.get_cancelled_exc_class():
            self._abandoned.append(row.id)
            raise
        finally:
            self._in_flight[row.agent] -= 1
            if not self._in_flight[row.agent]:
                del self._in_flight[row.agent]
            self._recorded = True
            if self._news is not None:
                self._news.wake()

    async def _attempt(
        self, client: httpx.AsyncClient, row: Row[Any]
    ) -> tuple[bool, int | None, str | None]:
        """POST one delivery: (delivered, HTTP status, why not)."""
        import httpx

        body: str = row.payload
        headers = {
            "Content-Type": "application/json",
            "User-Agent": f"agentpost/{__version__}",
            "X-Agentpost-Event": row.event,
            "X-Agentpost-Delivery": row.id,
            "X-Agentpost-Signature": sign(row.secret, int(self.store.clock()), body),
        }
        timeout = self.settings.webhook_timeout_s
        try:
            with anyio.fail_after(timeout):
                url = _parse(row.url)
                addresses = await _allowed_addresses(url, self._lookups)
                headers["Host"] = url.netloc.decode("ascii")
                # To an address just checked; TLS still verifies the certificate by name.
                extensions = {"sni_hostname": url.host} if url.scheme == "https" else {}
                for address in addresses:
                    target = url.copy_with(host=address)
                    try:
                        async with client.stream(
                            "POST",
                            target,
                            content=body.encode(),
                            headers=headers,
                            extensions=extensions,
                        ) as response:
                            status = response.status_code
                        break
                    except httpx.ConnectError:
                        # Nothing listens there (`localhost` is often ::1 first, and a
                        # receiver may listen on 127.0.0.1 alone): the next address, as a
                        # browser or curl would.
                        if address == addresses[-1]:
                            raise
        except AgentpostError as err:
            return False, None, err.message[:ERROR_CHARS]
        except TimeoutError:
            return False, None, f"no answer within {timeout:g} s"
        except (httpx.HTTPError, OSError) as err:
            return False, None, f"{type(err).__name__}: {err}"[:ERROR_CHARS]
        if 200 <= status < 300:
            return True, status, None
        if 300 <= status < 400:
            return False, status, f"HTTP {status}: redirects are not followed"
        return False, status, f"HTTP {status}"


def _check_agent(conn: Connection, caller: Caller) -> None:
    """In the transaction that makes the webhook: a key revoked since its request was
    authenticated must not leave behind a webhook its revocation did not find."""
    known = agent_rows.existing_names(conn, [caller.agent])
    if caller.agent not in known:
        raise AgentpostError(ErrorCode.UNAUTHENTICATED, f"no agent {caller.agent!r}")
    if not known[caller.agent]:
        raise AgentpostError(ErrorCode.FORBIDDEN, f"agent {caller.agent!r} is disabled")
    if caller.key_id is not None and not key_rows.stands(conn, caller.key_id):
        raise AgentpostError(ErrorCode.UNAUTHENTICATED, "the key of this request was revoked")


def _no_webhook(webhook_id: str) -> AgentpostError:
    return not_found(f"you have no webhook {webhook_id!r}", webhook_id=webhook_id)
