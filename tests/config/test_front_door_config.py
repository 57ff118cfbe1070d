"""The run file's ``[front_door]`` table: loopback unless said otherwise, and never beyond
loopback without a key; every bad value refused naming its field."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferactors._config.convert import run_config_from_toml
from inferactors._config.front_door import FrontDoorConfig
from inferactors._errors import InvalidConfig

INSTANCE = """
[[instances]]
role = "chat"
runtime = "infer.llamacpp"
mode = "adopted"
serve = { port = 8090 }
"""


def _load(table: str, base: Path = Path("/etc/inferactors")) -> FrontDoorConfig:
    config = run_config_from_toml(f"[front_door]\n{table}\n{INSTANCE}", base)
    assert config.front_door is not None
    return config.front_door


def test_defaults_are_loopback_and_a_relative_key_file_resolves() -> None:
    door = _load("port = 8800")
    assert (door.host, door.port, door.api_key_file) == ("127.0.0.1", 8800, None)
    keyed = _load('port = 0\napi_key_file = "door.key"')
    assert keyed.api_key_file == Path("/etc/inferactors/door.key")
    assert run_config_from_toml(INSTANCE, Path("/")).front_door is None


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ('port = 1\nhost = "0.0.0.0"', "$.front_door.host 0.0.0.0 is not loopback"),
        (
            'port = 1\nhost = "0.0.0.0"\nallow_beyond_loopback = true',
            "$.front_door.api_key_file is required to listen beyond loopback",
        ),
        ('port = 1\nhost = "example.org"', "$.front_door.host 'example.org' is not an IP"),
        ("port = 70000", "$.front_door.port must be 0 to 65535"),
        (
            "port = 1\nbody_timeout_s = 0",
            "$.front_door.body_timeout_s must be a positive number of seconds",
        ),
        ("port = 1\nmax_body_bytes = -1", "$.front_door.max_body_bytes must be positive"),
        ("port = 1\nspeed = 3", "speed"),
        ('port = "x"', "$.front_door.port"),
        ("host = '::1'", "port"),
    ],
)
def test_bad_values_are_refused_by_field(table: str, words: str) -> None:
    with pytest.raises(InvalidConfig) as raised:
        _load(table)
    assert words in str(raised.value)


def test_beyond_loopback_with_a_key_is_accepted() -> None:
    door = _load('port = 1\nhost = "0.0.0.0"\nallow_beyond_loopback = true\napi_key_file = "k"')
    assert not door.loopback()
    assert door.listen_host() == "0.0.0.0"
    assert _load('port = 1\nhost = "localhost"').listen_host() == "127.0.0.1"
