"""Run files and specs written to break the loader: every one is refused with `InvalidConfig`
naming the file and where, on one line, never a RecursionError or ValueError traceback.

TOML nesting bombs (arrays and inline tables 100,000 deep, which tomllib recurses into),
tables nested past 64 levels by dotted keys (refused on the text, before tomllib, which
would take minutes: tests/config/test_run_file_bounds.py), integers of 5,000 digits
(past Python's conversion limit) and of 150 (below it); JSON specs with bombs, duplicate
keys and huge integers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from inferactors._config.convert import (
    load_run_config,
    run_config_from_toml,
    spec_from_json,
    spec_from_toml,
)
from inferactors._errors import InvalidConfig

INSTANCE = """
[[instances]]
mode = "adopted"
role = "chat"
runtime = "infer.llamacpp"
serve = {{ port = {port} }}
"""


def refused(text: str) -> str:
    with pytest.raises(InvalidConfig) as caught:
        run_config_from_toml(text, Path("/etc/inferactors"), "run.toml: ")
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    "bomb",
    [
        "a = " + "[" * 100_000 + "]" * 100_000,
        "a = " + "{b = " * 100_000 + "}" * 100_000,
        "a = " + "[" * 100_000,  # never closed
    ],
)
def test_a_nesting_bomb_is_refused_not_a_recursion_error(bomb: str) -> None:
    assert refused(bomb) == (
        "run.toml: TOML nested too deep (over 64 levels of tables, arrays or dotted keys) at line 1"
    )


def test_tables_nested_past_64_levels_by_dotted_keys_are_refused_naming_the_line() -> None:
    text = "x = 1\n[" + ".".join(["t"] * 10_000) + "]\nx = 1\n"
    assert refused(text) == (
        "run.toml: TOML nested too deep (over 64 levels of tables, arrays or dotted keys) at line 2"
    )


@pytest.mark.parametrize("depth", [62, 63, 64, 200])
def test_nesting_is_judged_at_64_levels_counting_the_top_level_table(depth: int) -> None:
    message = refused(f"a = {'[' * depth}1{']' * depth}")
    assert ("nested" in message) is (depth + 1 > 64), message


@pytest.mark.parametrize(("segments", "deep"), [(61, False), (62, True)])
def test_depth_the_text_scan_cannot_see_is_refused_after_parsing(segments: int, deep: bool) -> None:
    # A header extending an array of tables lands in its last element, a level the text
    # scan does not count (it never counts more than the tree holds): check_tree judges it.
    text = "[[a]]\n[" + ".".join(["a"] + ["b"] * segments) + "]\nx = 1\n"
    expected = (
        "$.a[0].b.b.b.b.b.b...(64 steps): nested deeper than 64 levels"
        if deep
        else "$.a: unknown key"
    )
    assert refused(text) == f"run.toml: {expected}"


@pytest.mark.parametrize("digits", [150, 5000, 100_000])
def test_a_huge_integer_is_refused_naming_its_path(digits: int) -> None:
    text = INSTANCE.format(port=5) + INSTANCE.format(port="9" * digits)
    assert refused(text) == (
        "run.toml: $.instances[1].serve.port: an integer of more than 100 digits"
    )


def test_a_long_run_of_digits_in_a_string_does_not_hide_the_huge_integer() -> None:
    text = f'node_id = "{"1" * 5000}"\nprobe_timeout_s = {"2" * 5000}\n'
    assert refused(text) == "run.toml: $.probe_timeout_s: an integer of more than 100 digits"


def test_a_huge_integer_with_underscores_is_found_too() -> None:
    text = "probe_timeout_s = " + "_".join(["1234"] * 1500) + "\n"
    assert refused(text) == "run.toml: $.probe_timeout_s: an integer of more than 100 digits"


def test_a_huge_hex_integer_passes_the_parser_and_is_refused_by_the_check() -> None:
    text = INSTANCE.format(port="0x" + "f" * 5000)
    assert refused(text) == (
        "run.toml: $.instances[0].serve.port: an integer of more than 100 digits"
    )


def test_load_run_config_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("x = " + "[" * 50_000 + "]" * 50_000)
    with pytest.raises(InvalidConfig, match=rf"^{path}: TOML nested too deep"):
        load_run_config(path)


def test_a_sane_run_file_still_loads() -> None:
    config = run_config_from_toml(INSTANCE.format(port=8091), Path("/etc"), "run.toml: ")
    assert config.instances[0].spec.port() == 8091


# Specs as TOML and JSON (the same rules through the same parsers).


def test_a_toml_spec_bomb_is_refused() -> None:
    with pytest.raises(InvalidConfig, match=r"^TOML nested too deep"):
        spec_from_toml("role = " + "[" * 100_000 + "]" * 100_000)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, "JSON nested deeper than 64 levels at line 1, column 65"),
        (
            '{"role": "a", "runtime": "infer.ollama", "serve": {"port": 1, "port": 2}}',
            '$.serve: the object has the key "port" twice',
        ),
        (
            '{"role": "a", "runtime": "infer.ollama", "serve": {"port": ' + "1" * 5000 + "}}",
            "$.serve.port: an integer of 5000 digits (at most 100)",
        ),
    ],
)
def test_a_hostile_json_spec_is_refused_naming_where(text: str, message: str) -> None:
    with pytest.raises(InvalidConfig) as caught:
        spec_from_json(text)
    assert str(caught.value) == message
