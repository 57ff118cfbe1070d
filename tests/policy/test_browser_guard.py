"""The one rule against web pages, for the front door and the control API: a loopback
service's ``Host`` names loopback (and is present), an ``Origin`` is exactly the service's
own, a ``Sec-Fetch-Site`` is ``same-origin`` or ``none``; the control API's reads skip the
origin checks. Where the two services' earlier rules differed, the stricter one holds."""

from __future__ import annotations

import pytest

from inferactors._policy.browser_guard import browser_refusal, host_name

OWN = "127.0.0.1:8765"


@pytest.mark.parametrize(
    ("host", "name"),
    [
        ("127.0.0.1:8765", "127.0.0.1"),
        ("[::1]:8765", "::1"),
        ("localhost", "localhost"),
        ("localhost:", "localhost"),
        ("::1", None),  # IPv6 without brackets
        ("[localhost]:80", None),  # brackets hold IPv6 only
        ("[::1", None),
        ("localhost:80x", None),
        ("localhost:\uff18\uff10", None),  # digits, but not ASCII ones
        (":8765", None),
    ],
)
def test_the_name_of_a_host_header(host: str, name: str | None) -> None:
    assert host_name(host) == name


@pytest.mark.parametrize(
    ("host", "origin", "site", "header"),
    [
        (OWN, None, None, None),  # curl, openai, ollama
        (OWN, f"http://{OWN}", "same-origin", None),  # the service's own page
        ("localhost", "http://localhost", "none", None),
        (None, None, None, "Host"),  # a loopback service needs a Host
        ("app.localhost:8765", None, None, "Host"),  # only localhost itself
        ("attacker.example:8765", "http://attacker.example:8765", None, "Host"),
        (OWN, "http://evil.example", None, "Origin"),
        (OWN, "HTTP://127.0.0.1:8765", None, "Origin"),  # exactly the own origin
        (OWN, "null", None, "Origin"),
        (OWN, None, "cross-site", "Sec-Fetch-Site"),
        (OWN, None, "Same-Origin", "Sec-Fetch-Site"),  # exactly
    ],
)
def test_one_rule_for_every_loopback_service(
    host: str | None, origin: str | None, site: str | None, header: str | None
) -> None:
    refusal = browser_refusal(host, origin, site, loopback_only=True)
    assert (refusal and refusal.header) == header


def test_the_control_apis_reads_skip_the_origin_checks_but_not_the_host() -> None:
    foreign = ("http://evil.example", "cross-site")
    assert browser_refusal(OWN, *foreign, loopback_only=True, check_origin=False) is None
    rebound = browser_refusal("evil.example", None, None, loopback_only=True, check_origin=False)
    assert rebound is not None
    assert rebound.header == "Host"


def test_beyond_loopback_the_host_is_not_checked_but_the_origin_is() -> None:
    assert browser_refusal("gpu-box:1", None, None, loopback_only=False) is None
    assert browser_refusal(None, None, None, loopback_only=False) is None
    foreign = browser_refusal("gpu-box:1", "http://evil.example", None, loopback_only=False)
    assert foreign is not None
    assert foreign.message.startswith("Origin 'http://evil.example' is not this service's own")
    hostless = browser_refusal(None, "http://gpu-box:1", None, loopback_only=False)
    assert hostless is not None
    assert hostless.header == "Origin"
