"""Tests of the pure exposure logic: address classes, `lan_addresses`, the decision, the owner.

No I/O: the facts a scan gathers are written out by hand (seed-behaviour.md section 4,
checklist 59-60, issue 3 items 4-5, FC-14, FC-15).
"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferactors._config.binding import is_loopback_name
from inferactors._policy.exposure import (
    Exposure,
    Listener,
    covers,
    find_exposure,
    is_wildcard,
    lan_addresses,
    owner_pid,
    parse_address,
)


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "127.0.0.2", "127.255.255.254", "::1", "::ffff:127.0.0.1", "::ffff:127.9.8.7"],
)
def test_loopback_addresses_are_loopback(address: str) -> None:
    assert is_loopback_name(address)
    assert not is_wildcard(address)


@pytest.mark.parametrize(("name", "loopback"), [("localhost", True), ("LocalHost", True)])
def test_localhost_is_the_one_loopback_name(name: str, loopback: bool) -> None:
    assert is_loopback_name(name) is loopback


@pytest.mark.parametrize(
    "address",
    [
        *("0.0.0.0", "::", "192.0.2.2", "fd00::2", "fe80::1%eth0", "128.0.0.1", "", "x"),
        *("a.localhost", "localhost.", "[::1]", "127.0.0.1:80", "::ffff:10.0.0.1"),
    ],
)
def test_other_addresses_are_not_loopback(address: str) -> None:
    assert not is_loopback_name(address)


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "::ffff:0.0.0.0"])
def test_unspecified_addresses_are_wildcards(address: str) -> None:
    assert is_wildcard(address)


@pytest.mark.parametrize("address", ["127.0.0.1", "::1", "192.0.2.2", "0.0.0.1", "::2", "any"])
def test_specific_addresses_are_not_wildcards(address: str) -> None:
    assert not is_wildcard(address)


def test_parse_address_unwraps_ipv4_mapped_and_refuses_names() -> None:
    assert parse_address("::ffff:10.1.2.3") == ipaddress.IPv4Address("10.1.2.3")
    assert parse_address("fe80::1%eth0") == ipaddress.IPv6Address("fe80::1%eth0")
    assert parse_address("example.com") is None
    assert parse_address("02:fc:00:00:00:01") is None


def test_lan_addresses_keeps_only_lan_addresses_sorted() -> None:
    seen = [
        "fd00::2",
        "127.0.0.1",
        "::1",
        "192.0.2.2",
        "fe80::fc:ff:fe00:1%eth0",
        "0.0.0.0",
        "10.0.0.1",
        "::",
        "192.0.2.2",
        "::ffff:10.0.0.9",
        "00:00:00:00:00:00",
    ]
    assert lan_addresses(seen) == ("10.0.0.1", "10.0.0.9", "192.0.2.2", "fd00::2")


_ipv4 = st.ip_addresses(v=4).map(str)
_ipv6 = st.ip_addresses(v=6).map(str)
_special = st.sampled_from(
    ["127.0.0.1", "127.1.2.3", "::1", "0.0.0.0", "::", "fe80::1", "febf::ffff", "fe80::2%eth0"]
)
_anything = st.one_of(_ipv4, _ipv6, _special, st.text(max_size=8))


@given(st.lists(_anything, max_size=20))
def test_lan_addresses_property(addresses: list[str]) -> None:
    result = lan_addresses(addresses)
    parsed = [parse_address(address) for address in result]
    assert all(ip is not None for ip in parsed)
    for ip in parsed:
        assert ip is not None
        assert not ip.is_loopback
        assert not ip.is_unspecified
        assert not (ip.version == 6 and ip in ipaddress.IPv6Network("fe80::/10"))
    keys = [(ip.version, int(ip)) for ip in parsed if ip is not None]
    assert keys == sorted(keys)
    assert len(set(result)) == len(result)
    for address in addresses:
        ip = parse_address(address)
        kept = ip is not None and not (is_loopback_name(address) or is_wildcard(address))
        if kept and ip is not None and not (ip.version == 6 and ip.is_link_local):
            assert str(ip) in result
    assert lan_addresses(result) == result


def test_no_exposure_when_everything_keeps_to_loopback() -> None:
    listeners = [Listener("127.0.0.1", 8090, 10), Listener("::1", 8090, 10)]
    assert find_exposure(listeners, [], port=8090) is None
    assert find_exposure([], []) is None


def test_a_wildcard_listener_is_exposure_even_when_no_connect_answered() -> None:
    listeners = [Listener("127.0.0.1", 8090, 10), Listener("0.0.0.0", 9000, 11)]
    exposure = find_exposure(listeners, [], port=8090)
    assert exposure == Exposure((), (Listener("0.0.0.0", 9000, 11),), 8090)


def test_a_specific_lan_listener_is_exposure() -> None:
    exposure = find_exposure([Listener("192.0.2.2", 8090, 10)], [])
    assert exposure is not None
    assert exposure.listeners == (Listener("192.0.2.2", 8090, 10),)


def test_a_connect_that_answered_is_exposure_even_without_a_listener() -> None:
    exposure = find_exposure([], ["192.0.2.2", "127.0.0.2", "192.0.2.2"], port=8090)
    assert exposure == Exposure(("127.0.0.2", "192.0.2.2"), (), 8090)


def test_listeners_are_sorted_and_deduplicated() -> None:
    listeners = [
        Listener("::", 9001, 12),
        Listener("0.0.0.0", 8090, 10),
        Listener("0.0.0.0", 8090, 10),
        Listener("0.0.0.0", 8090, 9),
    ]
    exposure = find_exposure(listeners, [])
    assert exposure is not None
    assert exposure.listeners == (
        Listener("0.0.0.0", 8090, 9),
        Listener("0.0.0.0", 8090, 10),
        Listener("::", 9001, 12),
    )


def test_describe_names_listeners_and_reachable_endpoints() -> None:
    exposure = Exposure(("192.0.2.2",), (Listener("0.0.0.0", 8090, 123),), 8090)
    expected = "listening beyond loopback on 0.0.0.0:8090 (pid 123); reachable on 192.0.2.2:8090"
    assert exposure.describe() == expected


def test_describe_with_ipv6_and_only_one_kind_of_evidence() -> None:
    listeners_only = Exposure((), (Listener("::", 9000, 7), Listener("0.0.0.0", 9001, 8)), None)
    expected = "listening beyond loopback on [::]:9000 (pid 7), 0.0.0.0:9001 (pid 8)"
    assert listeners_only.describe() == expected
    reachable_only = Exposure(("10.0.0.1", "fd00::2"), (), 8090)
    assert reachable_only.describe() == "reachable beyond loopback on 10.0.0.1:8090, [fd00::2]:8090"
    assert Exposure(("10.0.0.1",), (), None).describe() == "reachable beyond loopback on 10.0.0.1"


@pytest.mark.parametrize(
    ("bound", "host", "expected"),
    [
        ("127.0.0.1", "127.0.0.1", True),
        ("127.0.0.1", "127.0.0.2", False),
        ("0.0.0.0", "127.0.0.1", True),
        ("0.0.0.0", "::1", False),
        ("::", "127.0.0.1", True),
        ("::", "::1", True),
        ("::1", "::1", True),
        ("::1", "127.0.0.1", False),
        ("::ffff:127.0.0.1", "127.0.0.1", True),
        ("127.0.0.1", "localhost", True),
        ("0.0.0.0", "localhost", True),
        ("192.0.2.2", "localhost", False),
        ("127.0.0.1", "example.com", False),
        ("garbage", "127.0.0.1", False),
    ],
)
def test_covers(bound: str, host: str, expected: bool) -> None:
    assert covers(bound, host) is expected


def test_owner_prefers_an_exact_binding_to_a_wildcard() -> None:
    listeners = [
        Listener("0.0.0.0", 8090, 5),
        Listener("127.0.0.1", 8090, 40),
        Listener("127.0.0.1", 8091, 3),
    ]
    assert owner_pid(listeners, "127.0.0.1", 8090) == 40
    assert owner_pid(listeners, "127.0.0.2", 8090) == 5
    assert owner_pid(listeners, "127.0.0.1", 8092) is None


def test_owner_among_equals_is_the_lowest_pid() -> None:
    listeners = [Listener("127.0.0.1", 8090, 41), Listener("127.0.0.1", 8090, 40)]
    assert owner_pid(listeners, "127.0.0.1", 8090) == 40
