"""Where a webhook may point: the address rule, spelling by spelling. An agent the owner has not
vouched for may reach public addresses only; the owner's agents may reach their neighbours too."""

from __future__ import annotations

import pytest

from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.services.outbound import check_url, refused_address

NOT_PUBLIC = {
    "127.0.0.1": "loopback",
    "127.8.9.10": "loopback",
    "::1": "loopback",
    "10.0.0.5": "private",
    "172.16.0.1": "private",
    "192.168.1.20": "private",
    "fc00::1": "private",
    "fd12:3456::1": "private",
    "100.64.0.1": "carrier-grade NAT",
    "100.127.255.254": "carrier-grade NAT",
    "0.1.2.3": "'this network'",
    "192.0.0.8": "IETF protocol",  # called global by Python before 3.11.10
    "192.0.2.1": "documentation",
    "198.51.100.1": "documentation",
    "203.0.113.9": "documentation",
    "2001:db8::1": "documentation",
    "3fff::1": "documentation",  # RFC 9637, called global by older Pythons
    "198.18.0.1": "benchmarking",
    "240.0.0.1": "reserved",
    "100::1": "reserved",  # discard-only
    "5f00::1": "reserved",  # SRv6 SIDs
    "fec0::1": "site-local",
    "2001:2::1": "IETF protocol",
    # IPv4 addresses in IPv6 spellings, which `ipaddress` calls global: judged as the IPv4.
    "::ffff:127.0.0.1": "loopback",  # IPv4-mapped
    "::ffff:10.0.0.5": "private",
    "::127.0.0.1": "loopback",  # IPv4-compatible
    "::ffff:0:7f00:1": "loopback",  # IPv4-translated
    "64:ff9b::7f00:1": "loopback",  # NAT64, the well-known prefix
    "64:ff9b::a00:5": "private",
    "64:ff9b::6440:1": "carrier-grade NAT",
    "2002:7f00:1::": "loopback",  # 6to4
    "2002:a00:5::1": "private",
    "64:ff9b:1::808:808": "local-use NAT64",  # a local gateway reaches the local network
    "2001:0:4136:e378:8000:63bf:5a55:fefe": "IETF protocol",  # Teredo
}

PUBLIC = [
    "8.8.8.8",
    "1.1.1.1",
    "2606:4700:4700::1111",
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",
    "2002:808:808::1",
]


@pytest.mark.parametrize(("address", "reason"), sorted(NOT_PUBLIC.items()))
def test_an_address_that_is_not_public_is_refused_to_an_agent_not_vouched_for(
    address: str, reason: str
) -> None:
    refused = refused_address(address, public_only=True)
    assert refused is not None
    assert reason in refused


@pytest.mark.parametrize("address", sorted(NOT_PUBLIC))
def test_an_address_that_is_not_public_is_allowed_to_an_agent_the_owner_vouches_for(
    address: str,
) -> None:
    assert refused_address(address) is None


@pytest.mark.parametrize("address", PUBLIC)
def test_a_public_address_is_allowed_to_anyone(address: str) -> None:
    assert refused_address(address, public_only=True) is None


@pytest.mark.parametrize(
    "address", ["169.254.169.254", "::ffff:169.254.169.254", "fe80::1", "224.0.0.1", "0.0.0.0"]
)
def test_what_is_refused_to_everyone_is_refused_with_its_own_reason(address: str) -> None:
    assert refused_address(address, public_only=True) == refused_address(address)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:6379/",
        "http://10.0.0.5/admin",
        "http://[::1]:8080/",
        "http://[::ffff:7f00:1]/",
        "http://[64:ff9b::7f00:1]/",
        "http://[2002:7f00:1::]/",
        "http://2130706433/",  # 127.0.0.1 as one number
        "http://0x7f.1/",
        "http://100.64.0.1/",
    ],
)
def test_a_url_to_an_address_that_is_not_public_is_refused_naming_why(url: str) -> None:
    with pytest.raises(AgentpostError) as refused:
        check_url(url, public_only=True)
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT
    assert "public addresses only" in refused.value.message
    assert check_url(url) == url


@pytest.mark.parametrize(
    "url", ["http://localhost:8080/hook", "https://hooks.example.com/in", "http://8.8.8.8/"]
)
def test_a_url_by_name_or_to_a_public_address_is_taken_from_anyone(url: str) -> None:
    """A name is judged once resolved, at each delivery: it can resolve anywhere."""
    assert check_url(url, public_only=True) == url
