"""InferenceSpec validation, the extra_args allowlist and spec (de)serialization.

Covers seed-behaviour.md section 1 and checklist items 2-13.
"""

from __future__ import annotations

import ipaddress
import json
import string
from collections.abc import Callable

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferactors._config.allowlist import ALLOWED_FLAGS, check_extra_args, is_plain_value
from inferactors._config.convert import spec_from_dict, spec_from_json, spec_from_toml, spec_to_json
from inferactors._config.convert_hooks import converter
from inferactors._config.flag_rules import rules_of
from inferactors._config.spec import (
    InferenceSpec,
    LatencyClass,
    MemoryFootprint,
    ServeArgs,
    valid_token,
)
from inferactors._errors import InvalidConfig
from inferactors._flavor import InferFlavor

LLAMA = InferFlavor.LLAMACPP
MLX = InferFlavor.MLX_LM
OLLAMA = InferFlavor.OLLAMA
TOKEN_CHARS = set(string.ascii_letters + string.digits + "._+:-")


def spec(runtime: InferFlavor = LLAMA, **serve: object) -> InferenceSpec:
    return InferenceSpec(role="planner", runtime=runtime, model="qwen", serve=ServeArgs(**serve))  # type: ignore[arg-type]  # test helper forwards keyword fields


def refused(s: InferenceSpec) -> str:
    with pytest.raises(InvalidConfig) as info:
        s.validate()
    return str(info.value)


# ---- tokens, ports, hosts (checklist 2-5) ------------------------------------------------


def test_valid_token_examples() -> None:
    assert valid_token("planner", 64)
    assert valid_token("qwen2.5-7b:q4_K_M+x", 64)
    assert valid_token("a" * 64, 64)
    assert not valid_token("a" * 65, 64)
    assert not valid_token("", 64)
    assert not valid_token("has space", 64)
    assert not valid_token("../etc/passwd", 128)
    assert not valid_token("-flag", 64)


@given(
    first=st.sampled_from(list("._+:- /\\$é\x00")),
    rest=st.text(alphabet=sorted(TOKEN_CHARS), max_size=20),
)
def test_tokens_with_a_bad_first_char_are_refused(first: str, rest: str) -> None:
    bad = first + rest
    assert not valid_token(bad, 64)
    assert refused(attrs.evolve(spec(), role=bad)).startswith("role must be a plain token")


@given(
    head=st.text(alphabet=string.ascii_letters, min_size=1, max_size=5),
    bad=st.characters().filter(lambda c: c not in TOKEN_CHARS),
    tail=st.text(alphabet=sorted(TOKEN_CHARS), max_size=5),
)
def test_tokens_with_a_bad_char_anywhere_are_refused(head: str, bad: str, tail: str) -> None:
    token = head + bad + tail
    assert not valid_token(token, 128)
    message = refused(attrs.evolve(spec(), model=token))
    assert message.startswith("model must be a plain token")


@pytest.mark.parametrize("name", ["has space", "../etc/passwd", "", "x" * 129])
def test_bad_model_and_draft_names_are_refused(name: str) -> None:
    assert refused(attrs.evolve(spec(), model=name)).startswith("model ")
    assert refused(spec(draft_model=name)).startswith("serve.draft_model ")


def test_role_longer_than_64_is_refused_and_model_of_128_is_fine() -> None:
    assert refused(attrs.evolve(spec(), role="r" * 65)).startswith("role ")
    attrs.evolve(spec(), model="m" * 128).validate()


@pytest.mark.parametrize(("flavor", "port"), [(LLAMA, 8090), (MLX, 8081), (OLLAMA, 11434)])
def test_default_ports_apply_only_without_serve_port(flavor: InferFlavor, port: int) -> None:
    assert spec(flavor).port() == port
    assert spec(flavor, port=9123).port() == 9123


def test_port_zero_and_out_of_range_are_refused() -> None:
    assert refused(spec(port=0)) == "serve.port must not be 0"
    assert refused(spec(port=65536)).startswith("serve.port 65536")
    assert refused(spec(port=-1)).startswith("serve.port -1")


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.7", "::", "example.com", "10.0.0.1"])
def test_non_loopback_hosts_are_refused(host: str) -> None:
    message = refused(spec(host=host))
    assert message.startswith(f"serve.host {host}") or message.startswith(f'serve.host "{host}"')


def test_host_that_is_not_an_ip_names_it() -> None:
    assert refused(spec(host="example.com")) == 'serve.host "example.com" is not an IP address'
    assert "not loopback" in refused(spec(host="192.0.2.7"))
    assert "scope" in refused(spec(host="::1%lo"))


@pytest.mark.parametrize(
    ("host", "ip"),
    [(None, "127.0.0.1"), ("localhost", "127.0.0.1"), ("127.0.0.1", "127.0.0.1"), ("::1", "::1")],
)
def test_loopback_hosts_are_accepted(host: str | None, ip: str) -> None:
    s = spec(host=host)
    s.validate()
    assert s.bind_ip() == ipaddress.ip_address(ip)


def test_base_url_brackets_ipv6() -> None:
    assert spec().base_url() == "http://127.0.0.1:8090"
    assert spec(MLX, port=9000).base_url() == "http://127.0.0.1:9000"
    assert spec(host="::1", port=8091).base_url() == "http://[::1]:8091"


# ---- ctx, kv, draft, memory, excludes, api (checklist 6, 7, 12, 13) -------------------------


def test_ctx_must_be_positive() -> None:
    assert refused(spec(ctx=0)).startswith("serve.ctx must be positive")
    assert refused(spec(ctx=-5)).startswith("serve.ctx must be positive")
    spec(ctx=1).validate()


@pytest.mark.parametrize("kv", ["q8:0", "q8+0", "q" * 17, "", "-q8", "q 8"])
def test_bad_kv_quant_is_refused(kv: str) -> None:
    assert refused(spec(kv_quant=kv)).startswith("serve.kv_quant ")


def test_kv_quant_token_of_16_is_fine() -> None:
    spec(kv_quant="q8_0").validate()
    spec(kv_quant="f" * 16).validate()


@pytest.mark.parametrize("flavor", [MLX, OLLAMA])
def test_draft_model_only_on_llamacpp(flavor: InferFlavor) -> None:
    message = refused(spec(flavor, draft_model="tiny"))
    assert message.startswith("serve.draft_model: draft models are supported by infer.llamacpp")
    spec(LLAMA, draft_model="tiny").validate()


@pytest.mark.parametrize("field", ["weights_bytes", "kv_budget_bytes"])
def test_memory_cap_is_4_tib_inclusive(field: str) -> None:
    attrs.evolve(spec(), memory=MemoryFootprint(**{field: 1 << 42})).validate()
    over = attrs.evolve(spec(), memory=MemoryFootprint(**{field: (1 << 42) + 1}))
    assert refused(over).startswith(f"memory.{field} ")
    negative = attrs.evolve(spec(), memory=MemoryFootprint(**{field: -1}))
    assert refused(negative).startswith(f"memory.{field} ")


def test_excludes_entries_are_tokens() -> None:
    attrs.evolve(spec(), excludes=("role:coder", "chat")).validate()
    assert refused(attrs.evolve(spec(), excludes=("ok", "bad one"))).startswith("excludes[1] ")


def test_only_openai_v1_api() -> None:
    assert refused(attrs.evolve(spec(), api="openai-v2")).startswith('api "openai-v2"')


# The rule breakers of validate(), in the reference's order (mlx base so a draft is a fault).
BREAKERS: list[tuple[str, Callable[[InferenceSpec], InferenceSpec]]] = [
    ("role", lambda s: attrs.evolve(s, role="bad role")),
    ("model", lambda s: attrs.evolve(s, model="../m")),
    ("serve.host", lambda s: attrs.evolve(s, serve=attrs.evolve(s.serve, host="0.0.0.0"))),
    ("serve.port", lambda s: attrs.evolve(s, serve=attrs.evolve(s.serve, port=0))),
    ("serve.ctx", lambda s: attrs.evolve(s, serve=attrs.evolve(s.serve, ctx=0))),
    ("serve.kv_quant", lambda s: attrs.evolve(s, serve=attrs.evolve(s.serve, kv_quant="a:b"))),
    ("serve.draft_model", lambda s: attrs.evolve(s, serve=attrs.evolve(s.serve, draft_model="d"))),
    (
        "serve.extra_args",
        lambda s: attrs.evolve(s, serve=attrs.evolve(s.serve, extra_args=("-x",))),
    ),
    ("memory.weights_bytes", lambda s: attrs.evolve(s, memory=MemoryFootprint(1 << 43))),
    ("excludes", lambda s: attrs.evolve(s, excludes=("a b",))),
    ("api", lambda s: attrs.evolve(s, api="x")),
]


@given(st.sets(st.integers(0, len(BREAKERS) - 1), min_size=1))
def test_validate_reports_the_first_broken_rule_in_reference_order(broken: set[int]) -> None:
    s = spec(MLX)
    for index in sorted(broken):
        s = BREAKERS[index][1](s)
    assert refused(s).startswith(BREAKERS[min(broken)][0])


# ---- extra_args (checklist 8-11) -----------------------------------------------------------


def extra_refused(flavor: InferFlavor, *args: str) -> str:
    with pytest.raises(InvalidConfig) as info:
        check_extra_args(flavor, args)
    return str(info.value)


def test_llamacpp_allowlist_accepts_the_reference_example() -> None:
    args = ("--threads", "4", "--flash-attn", "on", "-ngl", "99", "--temp", "-0.5")
    check_extra_args(LLAMA, args)
    spec(extra_args=args).validate()


@pytest.mark.parametrize(
    "args",
    [
        ["--threads"],
        ["--flash-attn"],
        ["--flash-attn", "yes"],
        ["--threads", "--host"],
        ["--threads=4"],
        ["--hos"],
        ["-md"],
        ["--ctx-size"],
        ["-c"],
        ["--lora"],
        ["--api-key"],
        ["--path"],
        ["--log-file"],
        [""],
        ["stray"],
    ],
)
def test_checklist_9_entries_are_refused(args: list[str]) -> None:
    assert extra_refused(LLAMA, *args).startswith("serve.extra_args")


@pytest.mark.parametrize(
    "flag",
    [
        "--host", "--port", "-m", "--model", "--model-draft", "-hf", "--hf-repo", "-mu",
        "--model-url", "--api-key-file", "--models-dir", "--reuse-port", "--api-key", "--mmproj",
        "--THREADS", "\u2014threads", "--threads\u200b", "-ngl=99", "--kv", "--draft", "--ctx",
    ],
)  # fmt: skip
def test_owned_and_dangerous_flags_are_not_on_the_list(flag: str) -> None:
    message = extra_refused(LLAMA, flag, "1")
    assert "is not an allowed infer.llamacpp flag" in message


@pytest.mark.parametrize(
    "value", ["4 --host 0.0.0.0", "1\t2", "0.5\x00--host", "$(id)", "`id`", "99;rm", "a,b", "x|y"]
)
def test_smuggled_values_are_refused(value: str) -> None:
    assert extra_refused(LLAMA, "--threads", value).startswith("serve.extra_args[1] ")


def test_whitespace_entry_message_and_missing_value_message() -> None:
    assert extra_refused(LLAMA, "--threads", "4 5") == (
        'serve.extra_args[1] must be a single token without whitespace or NUL: "4 5"'
    )
    assert (
        extra_refused(LLAMA, "--mlock", "--seed") == "serve.extra_args[1] --seed needs 1 value(s)"
    )
    assert extra_refused(LLAMA, "--bogus") == (
        'serve.extra_args[0] "--bogus" is not an allowed infer.llamacpp flag '
        "(exact spelling, value as a separate entry)"
    )


def test_more_than_32_entries_are_refused() -> None:
    check_extra_args(LLAMA, ["--mlock"] * 32)
    assert "at most 32" in extra_refused(LLAMA, *(["--mlock"] * 33))


def test_value_length_limit_is_256() -> None:
    check_extra_args(LLAMA, ["--temp", "1" * 256])
    assert extra_refused(LLAMA, "--temp", "1" * 257).startswith("serve.extra_args[1] ")


def test_mlx_and_ollama_lists() -> None:
    check_extra_args(MLX, ["--max-tokens", "512", "--log-level", "DEBUG"])
    assert "not an allowed infer.mlx-lm flag" in extra_refused(MLX, "--jinja")
    for flag in ["--threads", "--temp", "-ngl", "--metrics"]:
        assert "not an allowed infer.ollama flag" in extra_refused(OLLAMA, flag, "1")


@given(st.text(max_size=20).filter(lambda f: f not in ALLOWED_FLAGS[LLAMA]))
def test_any_unlisted_flag_is_refused(flag: str) -> None:
    assert extra_refused(LLAMA, flag).startswith("serve.extra_args[0] ")


@given(st.floats(max_value=-1e-300, allow_nan=False, allow_infinity=False))
def test_negative_numbers_are_plain_values(number: float) -> None:
    assert is_plain_value(repr(number))
    check_extra_args(LLAMA, ["--temp", repr(number)])


@given(
    st.text(min_size=1, max_size=30).filter(
        lambda v: (
            not (v[0] != "-" and set(v) <= set(string.ascii_letters + string.digits + "._:+/-"))
        )
    )
)
def test_values_outside_the_plain_set_are_refused(value: str) -> None:
    if value.startswith("-") and is_plain_value(value):
        return  # a negative number is a legal value
    with pytest.raises(InvalidConfig):
        check_extra_args(LLAMA, ["--seed", value])


@pytest.mark.parametrize("value", ["-inf", "-nan", "--5", "-1_0", "-", "-e5", "-x"])
def test_dash_values_that_are_not_decimal_numbers_are_refused(value: str) -> None:
    assert not is_plain_value(value)


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
