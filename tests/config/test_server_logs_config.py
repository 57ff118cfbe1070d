"""``[managed.logs]`` (issue 10 item 4): the run file sets how many lines each instance's
ring keeps and its rotating file, through the one converter, validated with the field named."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferactors._config.config import ControlMode
from inferactors._config.convert import run_config_from_toml
from inferactors._config.server_logs import ServerLogs
from inferactors._errors import InvalidConfig
from inferactors._flavor import InferFlavor

MANAGED = '[managed]\nregistry = "models.json"\ndata_root = "state"\n'


def managed_logs(text: str) -> ServerLogs:
    config = run_config_from_toml(MANAGED + text, Path("/srv/run"), "run.toml: ")
    infer = config.infer_config(InferFlavor.OLLAMA, ControlMode.MANAGED)
    assert infer.managed is not None
    return infer.managed.logs


def test_the_run_file_sets_the_ring_and_the_file() -> None:
    text = "[managed.logs]\nlines = 50\nfile_bytes = 1048576\nfile_count = 5\n"
    assert managed_logs(text) == ServerLogs(lines=50, file_bytes=1 << 20, file_count=5)
    assert managed_logs("") == ServerLogs(lines=1000, file_bytes=10 << 20, file_count=3)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("lines = 0", "managed.logs.lines must be 1..1000000, got 0"),
        ("file_bytes = -1", "managed.logs.file_bytes must not be negative, got -1"),
        ("file_count = 0", "managed.logs.file_count must be at least 1, got 0"),
        ("lines = 5\ncolour = 1", "colour"),
    ],
)
def test_bad_values_are_refused_naming_the_field(text: str, why: str) -> None:
    with pytest.raises(InvalidConfig) as caught:
        managed_logs(f"[managed.logs]\n{text}\n")
    assert why in str(caught.value)
