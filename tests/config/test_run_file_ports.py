"""Tests of issue 8 item 10: a run file with two instances on one ip:port is refused at
validation, naming both fields, whatever their flavors and modes (`check_endpoints` in
``_config/runfile.py``; the address rule is ``_config/binding.py``, shared with the
occupied-port check before a launch).
"""

from __future__ import annotations

import ipaddress
from itertools import count
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferactors import InvalidConfig
from inferactors._config.binding import addresses_collide, hosts_collide
from inferactors._config.convert import run_config_from_toml

HEAD = """
[managed]
registry = "models.json"
data_root = "state"
serve_programs = { "infer.llamacpp" = "/bin/llama-server", "infer.mlx-lm" = "/bin/mlx" }
"""


_ROLES = count()  # roles name instances: each unique


def instance(mode: str, runtime: str, port: int | None = None, host: str | None = None) -> str:
    serve = [f"port = {port}"] if port is not None else []
    serve += [f'host = "{host}"'] if host is not None else []
    model = 'model = "m"\n' if mode == "managed" else ""
    table = "[instances.serve]\n" + "\n".join(serve) + "\n" if serve else ""
    head = f'\n[[instances]]\nmode = "{mode}"\nrole = "r{next(_ROLES)}"\n'
    return f'{head}runtime = "{runtime}"\n{model}{table}'


def load(*instances: str) -> None:
    run_config_from_toml(HEAD + "".join(instances), Path("/etc/inferactors"), "run.toml: ")


def test_two_instances_on_one_port_are_refused_naming_both_fields() -> None:
    with pytest.raises(InvalidConfig) as refused:
        load(
            instance("managed", "infer.llamacpp", 8080),
            instance("managed", "infer.mlx-lm", 9000),
            instance("adopted", "infer.ollama", 8080),
        )
    assert str(refused.value) == (
        "run.toml: $.instances[2].serve.port: 8080 on 127.0.0.1 is already used by $.instances[0]"
    )


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("managed", "infer.llamacpp"), ("managed", "infer.llamacpp")),
        (("managed", "infer.llamacpp"), ("adopted", "infer.mlx-lm")),
        (("adopted", "infer.ollama"), ("adopted", "infer.llamacpp")),
        (("adopted", "infer.mlx-lm"), ("managed", "infer.mlx-lm")),
    ],
)
def test_flavors_and_modes_do_not_matter(first: tuple[str, str], second: tuple[str, str]) -> None:
    with pytest.raises(InvalidConfig, match=r"\$\.instances\[1\]\.serve\.port: 7000 on"):
        load(instance(*first, 7000), instance(*second, 7000))


def test_default_ports_count_as_the_port_used() -> None:
    """Two llama.cpp instances without a port both take the flavor's default, 8090."""
    with pytest.raises(InvalidConfig, match=r"instances\[1\]\.serve\.port: 8090 on 127\.0\.0\.1"):
        load(instance("managed", "infer.llamacpp"), instance("adopted", "infer.llamacpp"))


@pytest.mark.parametrize(
    ("host", "other", "message"),
    [
        ("localhost", "127.0.0.1", "8080 on 127.0.0.1 is already used by $.instances[0] (on "),
        ("::1", "127.0.0.1", "8080 on 127.0.0.1 is already used by $.instances[0] (on ::1)"),
        ("localhost", "::1", "8080 on ::1 is already used by $.instances[0] (on localhost)"),
        ("::1", "::1", "8080 on ::1 is already used by $.instances[0]"),
    ],
)
def test_localhost_and_ipv6_loopback_take_both_loopback_families(
    host: str, other: str, message: str
) -> None:
    with pytest.raises(InvalidConfig) as refused:
        load(
            instance("managed", "infer.llamacpp", 8080, host),
            instance("adopted", "infer.mlx-lm", 8080, other),
        )
    assert f"$.instances[1].serve.port: {message}" in str(refused.value)


def test_distinct_ports_or_distinct_ipv4_loopback_addresses_are_accepted() -> None:
    load(
        instance("managed", "infer.llamacpp", 8080),
        instance("managed", "infer.llamacpp", 8081),
        instance("adopted", "infer.mlx-lm", 8080, "127.0.0.2"),
        instance("adopted", "infer.ollama", 8081, "127.0.0.3"),
    )


ADDRESSES = st.sampled_from(
    ["0.0.0.0", "::", "127.0.0.1", "127.0.0.2", "::1", "10.0.0.5", "fd00::2"]
).map(ipaddress.ip_address)


@given(first=ADDRESSES, second=ADDRESSES)
def test_wildcards_collide_with_every_address_they_cover(
    first: ipaddress.IPv4Address | ipaddress.IPv6Address,
    second: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    """0.0.0.0 covers IPv4, :: covers both families (dual stack); else only equal ones."""

    def covers(wildcard: object, other: object) -> bool:
        if wildcard == ipaddress.ip_address("::"):
            return True
        return wildcard == ipaddress.ip_address("0.0.0.0") and getattr(other, "version", 0) == 4

    expected = first == second or covers(first, second) or covers(second, first)
    assert addresses_collide(first, second) is expected
    assert addresses_collide(second, first) is expected


def test_hosts_collide_through_their_footprints() -> None:
    assert hosts_collide("localhost", "::1")
    assert hosts_collide("127.0.0.1", "::1")
    assert hosts_collide("0.0.0.0", "localhost")
    assert not hosts_collide("127.0.0.2", "::1")
    assert not hosts_collide("0.0.0.0", "fd00::2")
