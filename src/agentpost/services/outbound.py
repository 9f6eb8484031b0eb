"""Webhook requests going out of the post office: where they may go, and the POST of one
delivery.

A webhook may not point at link-local, cloud-metadata, multicast or unspecified addresses:
refused when it is created (`check_url`), and again at each delivery after the name is resolved
(the request then goes to the address that was checked, so a name cannot change its answer in
between). Loopback and private addresses are allowed: a post office on a laptop talks to its
neighbours.

Not to an agent the owner has not vouched for (one that registered itself, or one whose vouch
was withdrawn): its webhooks may reach public addresses only, or anyone who may register could
have the server POST to the services beside it. Loopback, private (RFC 1918, `fc00::/7`),
carrier-grade NAT, documentation, benchmarking, reserved and every other non-global range are
refused to it, an IPv4 address inside an IPv6 one (mapped, NAT64, 6to4, Teredo) judged as
itself: `ipaddress` calls `64:ff9b::7f00:1` and `2002:7f00:1::` global. Refused when it is
created for an address literal, and at each delivery by the owner's trust then, a name once
resolved: a vouch withdrawn stops its internal webhooks, a vouch given lets them through.

This is the only server module that speaks HTTP outwards (the one home of `httpx` besides the
client). It imports `httpx` only when a URL is checked or a dispatcher starts: a local MCP
server never loads it.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import socket
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from agentpost import __version__
from agentpost.domain.errors import AgentpostError, ErrorCode, invalid
from agentpost.domain.events import MAX_URL_CHARS
from agentpost.domain.models import Trust
from agentpost.store.database import Clock, Row

if TYPE_CHECKING:
    import httpx

MAX_LOOKUPS = 64
"""Name lookups under way at once, on threads of their own: the event loop's few default
executor threads, filled by one agent's slow nameserver, would hold up everyone's deliveries
(and a lookup its attempt gave up on keeps its thread till the resolver answers)."""
ERROR_CHARS = 500
MAX_NAME_CHARS = 253
_LABEL = re.compile(r"[a-z0-9_-]{1,63}")
"""A label of a host name as a resolver takes it (an IDN's is its `xn--` form): the resolver
refuses an empty or longer one by raising, not by answering that the name is unknown."""

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


def refused_address(address: str, public_only: bool = False) -> str | None:
    """Why an IP address may not receive webhooks, or None when it may: checked as written,
    and as each IPv4 address it may embed, in whichever IPv6 spelling. `public_only`: for an
    agent the owner has not vouched for, any address that is not public is refused too."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    reason = _refused_ip(ip)
    if reason is None and public_only:
        reason = _not_public(ip)
    if reason is not None or not isinstance(ip, ipaddress.IPv6Address):
        return reason
    embedded = _embedded_ipv4(ip)
    if len(embedded) == 1:
        reason = _refused_ip(embedded[0])
        if reason is None and public_only:
            reason = _not_public(embedded[0])
        return reason
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


_NOT_PUBLIC = tuple(
    (ipaddress.ip_network(network), reason)
    for network, reason in (
        ("0.0.0.0/8", "a 'this network' address"),
        ("10.0.0.0/8", "a private address"),
        ("172.16.0.0/12", "a private address"),
        ("192.168.0.0/16", "a private address"),
        ("100.64.0.0/10", "a carrier-grade NAT address"),
        ("192.0.0.0/24", "an IETF protocol address"),
        ("192.0.2.0/24", "a documentation address"),
        ("198.51.100.0/24", "a documentation address"),
        ("203.0.113.0/24", "a documentation address"),
        ("198.18.0.0/15", "a benchmarking address"),
        ("240.0.0.0/4", "a reserved address"),
        ("fc00::/7", "a private address"),
        ("fec0::/10", "a site-local address"),
        ("64:ff9b:1::/48", "a local-use NAT64 address"),
        ("2001::/23", "an IETF protocol address"),  # Teredo's 2001::/32 among them
        ("2001:db8::/32", "a documentation address"),
        ("3fff::/20", "a documentation address"),
    )
)
"""Ranges IANA's special-purpose registries call not global (2001::/23 with its few global
exceptions, which no receiver needs), spelt out: `is_global` depends on the Python release,
and 3.11.7's calls 192.0.0.0/24 and 3fff::/20 global."""
_GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")


def _not_public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why an address is no public one (an agent the owner has not vouched for may reach
    nothing else), or None. An IPv6 spelling of an IPv4 address is judged by `refused_address`
    through the IPv4 address it carries, whose gateway would deliver it there."""
    if ip.is_loopback:
        return "a loopback address"
    for network, reason in _NOT_PUBLIC:
        if ip in network:
            return reason
    if isinstance(ip, ipaddress.IPv6Address):
        if any(ip in network for network in _EMBEDDING_IPV4):
            return None
        if ip not in _GLOBAL_UNICAST:  # all else is unassigned, or set aside (5f00::/16 …)
            return "a reserved address"
    if not ip.is_global:
        return "an address that is not public"
    return None


def _refuse(url: str, reason: str, public_only: bool = False) -> AgentpostError:
    why = f"a webhook may not point at {reason}"
    if public_only:
        why += ": an agent the owner has not vouched for may reach public addresses only"
    return invalid(why, url=url)


def _check(url: str, address: str, public_only: bool, name: str | None = None) -> None:
    """Refuse the URL if `address` (what its host is, or `name` resolved to) is forbidden."""
    reason = refused_address(address)
    strictly = reason is None and public_only
    if strictly:
        reason = refused_address(address, public_only=True)
    if reason is not None:
        raise _refuse(url, reason if name is None else f"{reason} ({name} is {address})", strictly)


def _parse(url: str) -> httpx.URL:
    import httpx  # here: a local MCP server never loads it

    try:
        parsed = httpx.URL(url)
        host = parsed.host  # decodes an IDNA name: a malformed `xn--` label raises here
    except (httpx.InvalidURL, TypeError, ValueError):
        raise invalid("url is not a valid URL", url=url) from None
    if parsed.scheme not in ("http", "https") or not host:
        raise invalid("url must be an http:// or https:// URL with a host", url=url)
    if parsed.port is not None and not 1 <= parsed.port <= 65535:  # httpx takes any number
        raise invalid("url has a port no connection can reach: 1 to 65535", url=url)
    return parsed


def _port(url: httpx.URL) -> int:
    return url.port or (443 if url.scheme == "https" else 80)


def check_url(url: str, public_only: bool = False) -> str:
    """The webhook URL, checked as far as can be without asking DNS: scheme, host, and no
    forbidden name or address literal (in any spelling the resolver accepts, `2852039166`
    included); with `public_only`, no literal that is not a public address."""
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
        _check(url, str(literal), public_only)
        return url
    try:
        numeric = socket.getaddrinfo(
            host, _port(parsed), type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST
        )
    except (socket.gaierror, UnicodeError):
        # A name: checked again once resolved, at every delivery.
        if not _is_host_name(host):
            raise invalid("url has a host that is no name a resolver takes", url=url) from None
        return url
    for info in numeric:
        _check(url, str(info[4][0]), public_only)
    return url


def origin_of(url: str) -> str:
    """Where a URL posts to, as the audit keeps it: scheme, host and port. Its path, query and
    user info are left out, for they often hold the receiver's secret (a chat service's
    incoming-webhook token, `?token=`, `user:pass@`)."""
    parsed = _parse(url)
    host = parsed.raw_host.decode("ascii")
    if ":" in host:
        host = f"[{host}]"
    return f"{parsed.scheme}://{host}" + (f":{parsed.port}" if parsed.port else "")


def _is_host_name(host: str) -> bool:
    """Whether `host` (lower case, no trailing dot) is a name a resolver may be asked about:
    labels of letters, digits, `-` and `_`, each 1 to 63 long, 253 characters in all."""
    return len(host) <= MAX_NAME_CHARS and all(_LABEL.fullmatch(p) for p in host.split("."))


def lookup(host: str, port: int) -> list[str]:
    """The addresses of a name, in the resolver's order (blocking: run on a thread)."""
    return [str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


async def _allowed_addresses(
    url: httpx.URL, lookups: anyio.CapacityLimiter, public_only: bool
) -> list[str]:
    """Resolve the URL's host; refuse it if any of its addresses is forbidden (with
    `public_only`, any that is not public); else all of them, in the resolver's order (without
    repeats)."""
    host = url.raw_host.decode("ascii")
    if host.lower().rstrip(".") in METADATA_NAMES:
        raise _refuse(str(url), "a cloud metadata address")
    try:
        addresses = [str(ipaddress.ip_address(host.split("%", 1)[0]))]  # no lookup for a literal
    except ValueError:
        try:
            addresses = await anyio.to_thread.run_sync(
                lookup,
                host,
                _port(url),
                abandon_on_cancel=True,  # the attempt's deadline does not wait for a slow one
                limiter=lookups,
            )
        except UnicodeError:  # a label empty or over 63 characters: the resolver raises
            raise invalid(f"{host} is no name a resolver takes", url=str(url)) from None
    if not addresses:
        raise AgentpostError(ErrorCode.UNAVAILABLE, f"{host} has no address")
    for address in addresses:
        _check(str(url), address, public_only, host)
    return list(dict.fromkeys(address.split("%", 1)[0] for address in addresses))


def sign(secret: str, timestamp: int, body: str) -> str:
    """The `X-Agentpost-Signature` value: `t=<timestamp>,v1=<hex HMAC-SHA256>` of `t.body`."""
    digest = hmac.new(secret.encode(), f"{timestamp}.{body}".encode(), hashlib.sha256)
    return f"t={timestamp},v1={digest.hexdigest()}"


class Poster:
    """POSTs deliveries for one dispatcher, `async with` it: its HTTP client and its threads for
    name lookups. No proxies from the environment, no redirects; and no kept-alive connections,
    which are pooled by address alone and could carry one name's TLS session to another name."""

    def __init__(self, timeout_s: float, clock: Clock) -> None:
        self.timeout_s = timeout_s
        self.clock = clock
        self._lookups = anyio.CapacityLimiter(MAX_LOOKUPS)
        self._client: httpx.AsyncClient | None = None

    async def __aenter__(self) -> Poster:
        import httpx

        self._client = httpx.AsyncClient(
            timeout=self.timeout_s,
            follow_redirects=False,
            trust_env=False,
            limits=httpx.Limits(max_keepalive_connections=0),
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def post(self, row: Row[Any]) -> tuple[bool, int | None, str | None]:
        """POST one claimed delivery (its row: event, payload, url, secret, and its agent's
        trust as it was claimed): (delivered, HTTP status, why not). Never raises for the
        receiver's or the network's sake."""
        import httpx

        client = self._client
        assert client is not None, "post inside `async with Poster(…)`"

        body: str = row.payload
        headers = {
            "Content-Type": "application/json",
            "User-Agent": f"agentpost/{__version__}",
            "X-Agentpost-Event": row.event,
            "X-Agentpost-Delivery": row.id,
            "X-Agentpost-Signature": sign(row.secret, int(self.clock()), body),
        }
        timeout = self.timeout_s
        try:
            with anyio.fail_after(timeout):
                url = _parse(row.url)
                public_only = row.trust != Trust.VERIFIED.value
                addresses = await _allowed_addresses(url, self._lookups, public_only)
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
