"""InferenceSpec (de)serialization: JSON and TOML round trips, defaults skipped, and bad
data named by its path (checklist item 13).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from config.spec_support import LLAMA, OLLAMA, spec
from inferactors._config.convert import spec_from_dict, spec_from_json, spec_from_toml, spec_to_json
from inferactors._config.convert_hooks import converter
from inferactors._config.flag_rules import rules_of
from inferactors._config.spec import (
    InferenceSpec,
    LatencyClass,
    MemoryFootprint,
    ServeArgs,
)
from inferactors._errors import InvalidConfig
from inferactors._flavor import InferFlavor

# ---- serialization (checklist 13) ----------------------------------------------------------

TOKEN = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._+:-]{0,20}", fullmatch=True)


@st.composite
def extra_args(draw: st.DrawFn, flavor: InferFlavor) -> tuple[str, ...]:
    rules = rules_of(flavor)
    if not rules:
        return ()
    out: list[str] = []
    for flag in draw(st.lists(st.sampled_from(sorted(rules)), max_size=8)):
        example = rules[flag].example
        out += [flag] if example is None else [flag, example]
    return tuple(out)


@st.composite
def valid_specs(draw: st.DrawFn) -> InferenceSpec:
    flavor = draw(st.sampled_from(InferFlavor))
    serve = ServeArgs(
        host=draw(st.sampled_from([None, "localhost", "127.0.0.1", "127.0.0.9", "::1"])),
        port=draw(st.none() | st.integers(1, 65535)),
        ctx=draw(st.none() | st.integers(1, 2**32 - 1)),
        kv_quant=draw(st.none() | st.from_regex(r"[a-z0-9][a-z0-9_.-]{0,15}", fullmatch=True)),
        draft_model=draw(st.none() | TOKEN) if flavor is LLAMA else None,
        extra_args=draw(extra_args(flavor)),
    )
    return InferenceSpec(
        role=draw(TOKEN),
        runtime=flavor,
        model=draw(st.none() | TOKEN),
        serve=serve,
        memory=MemoryFootprint(draw(st.integers(0, 1 << 42)), draw(st.integers(0, 1 << 42))),
        excludes=tuple(draw(st.lists(TOKEN, max_size=3))),
        latency_class=draw(st.sampled_from(LatencyClass)),
        sticky=draw(st.booleans()),
    )


@settings(max_examples=150)
@given(valid_specs())
def test_valid_specs_round_trip_through_json(s: InferenceSpec) -> None:
    s.validate()
    text = spec_to_json(s)
    assert spec_from_json(text) == s
    assert "null" not in text
    assert "[]" not in text


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value)  # ints, and strings: JSON escapes are valid TOML escapes


def to_toml(data: dict[str, object], prefix: str = "") -> str:
    lines = [f"{k} = {toml_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for key, table in data.items():
        if isinstance(table, dict):
            lines += [f"[{prefix}{key}]", to_toml(table, f"{prefix}{key}.")]
    return "\n".join(lines) + "\n"


@settings(max_examples=100)
@given(valid_specs())
def test_valid_specs_round_trip_through_toml(s: InferenceSpec) -> None:
    assert spec_from_toml(to_toml(converter.unstructure(s))) == s


def test_to_json_skips_none_empty_and_defaults() -> None:
    s = InferenceSpec(role="chat", runtime=OLLAMA)
    assert json.loads(spec_to_json(s)) == {"role": "chat", "runtime": "infer.ollama"}
    s = spec(port=9000, extra_args=("--mlock",))
    assert json.loads(spec_to_json(s)) == {
        "role": "planner",
        "runtime": "infer.llamacpp",
        "model": "qwen",
        "serve": {"port": 9000, "extra_args": ["--mlock"]},
    }


def test_spec_from_toml_reads_tables() -> None:
    s = spec_from_toml(
        """
        role = "planner"
        runtime = "infer.llamacpp"
        model = "qwen"
        latency_class = "interactive"
        excludes = ["role:coder"]
        [serve]
        port = 9001
        ctx = 4096
        kv_quant = "q8_0"
        extra_args = ["-ngl", "99"]
        [memory]
        weights_bytes = 5_000_000_000
        """
    )
    assert s.serve == ServeArgs(port=9001, ctx=4096, kv_quant="q8_0", extra_args=("-ngl", "99"))
    assert s.latency_class is LatencyClass.INTERACTIVE
    assert s.memory == MemoryFootprint(weights_bytes=5_000_000_000)


MLX_BASE = {"role": "a", "runtime": "infer.mlx-lm"}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"role": "a", "runtime": "infer.llamacpp", "gpu": 1}, "$.gpu: unknown key"),
        (
            {"role": "a", "runtime": "infer.llamacpp", "serve": {"gpu_layers": 9}},
            "$.serve.gpu_layers: unknown key",
        ),
        ({"role": "a", "runtime": "infer.llamacpp", "memory": {"x y": 1}}, '$.memory["x y"]'),
        ({"runtime": "infer.llamacpp"}, "$.role: required key missing"),
        ({"role": "a", "runtime": "llama"}, '$.runtime: expected one of "infer.llamacpp"'),
        ({**MLX_BASE, "serve": {"port": "80"}}, "$.serve.port: expected int"),
        ({**MLX_BASE, "serve": {"port": 8.0}}, "$.serve.port: expected int"),
        ({**MLX_BASE, "sticky": 1}, "$.sticky: expected bool"),
        ({"role": 7, "runtime": "infer.mlx-lm"}, "$.role: expected string, got int"),
        ({**MLX_BASE, "excludes": "ab"}, "$.excludes: expected a list"),
        (
            {**MLX_BASE, "serve": {"extra_args": ["--temp", 1]}},
            "$.serve.extra_args[1]: expected string, got int",
        ),
        ({**MLX_BASE, "memory": 5}, "$.memory: expected a table"),
        ({**MLX_BASE, "serve": {"port": 0}}, "$.serve.port must not be 0"),
        ([], "$: expected a table, got list"),
    ],
)  # fmt: skip
def test_bad_spec_data_names_the_path(data: object, message: str) -> None:
    with pytest.raises(InvalidConfig) as info:
        spec_from_dict(data)
    assert message in str(info.value)


def test_several_problems_are_all_reported() -> None:
    with pytest.raises(InvalidConfig) as info:
        spec_from_dict({"role": 1, "runtime": "infer.x", "zzz": 0})
    message = str(info.value)
    assert message.startswith("3 problems: ")
    assert "$.role: expected string" in message
    assert "$.runtime: expected one of" in message
    assert "$.zzz: unknown key" in message


def test_json_syntax_errors_and_duplicate_keys() -> None:
    with pytest.raises(InvalidConfig, match="JSON syntax error at line 2, column"):
        spec_from_json('{"role": "a",\n "runtime": }')
    with pytest.raises(InvalidConfig, match='the key "role" twice'):
        spec_from_json('{"role": "a", "runtime": "infer.ollama", "role": "b"}')


def test_toml_syntax_error_names_the_line() -> None:
    with pytest.raises(InvalidConfig, match=r"TOML syntax error: .*line 2, column"):
        spec_from_toml('role = "a"\nruntime = infer.ollama\n')
    with pytest.raises(InvalidConfig, match=r"TOML syntax error: .*end of document, after line 3"):
        spec_from_toml('role = "a"\nruntime = "infer.ollama"\nserve = [\n')


def test_json_round_trip_keeps_a_full_spec() -> None:
    s = InferenceSpec(
        role="planner",
        runtime=LLAMA,
        model="qwen",
        serve=ServeArgs("::1", 9000, 8192, "q8_0", "tiny", ("--threads", "4")),
        memory=MemoryFootprint(10, 20),
        excludes=("role:coder",),
        latency_class=LatencyClass.INTERACTIVE,
        sticky=True,
    )
    assert spec_from_json(spec_to_json(s)) == s
