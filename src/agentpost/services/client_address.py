"""A client's address as the service keeps it: one spelling for the audit, and what lockouts
and the registration limit count by."""

from __future__ import annotations

import contextlib
import functools
import ipaddress

NO_ADDRESS = "-"
"""The address of a caller whose face could not tell one (counted together)."""
KNOWN_ADDRESSES = 4096
"""Addresses whose spellings are kept: each request is authenticated by its address, and
parsing one costs more than the rest of a remembered caller's authentication (a client of
many addresses only makes this miss)."""


@functools.lru_cache(maxsize=KNOWN_ADDRESSES)
def spelt(ip: str | None) -> str:
    """One spelling per address (`2001:DB8::1` is `2001:db8::1`, and an IPv4 address a
    dual-stack socket shows as `::ffff:192.0.2.1` is `192.0.2.1`), so that a lockout counts
    it once whatever a proxy forwarded, on either database."""
    if not ip:
        return NO_ADDRESS
    with contextlib.suppress(ValueError):
        parsed = ipaddress.ip_address(ip)
        if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
            return parsed.ipv4_mapped.compressed
        return parsed.compressed
    return ip[:64]


@functools.lru_cache(maxsize=KNOWN_ADDRESSES)
def counted(address: str) -> str:
    """What lockouts and the registration limit count by: an IPv4 address, but an IPv6
    address's /64 (`2001:db8::/64`), since one host is commonly handed a whole /64 and could
    otherwise take a fresh address for every few guesses."""
    with contextlib.suppress(ValueError):
        parsed = ipaddress.ip_address(address)
        if isinstance(parsed, ipaddress.IPv6Address):
            return ipaddress.IPv6Network((parsed, 64), strict=False).compressed
    return address


def audited(address: str) -> str | None:
    """An address as the audit keeps it: as `spelt` spells it, so that one client's
    failures, registrations and sends read alike (None: no address was told)."""
    return None if address == NO_ADDRESS else address
