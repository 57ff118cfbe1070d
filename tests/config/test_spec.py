"""InferenceSpec validation: tokens, ports, hosts, ctx, kv, draft, memory, excludes, api,
and the order in which `validate` reports its rules.

Covers seed-behaviour.md section 1 and checklist items 2-7, 12-13.
"""

from __future__ import annotations

import ipaddress
import string
from collections.abc import Callable

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from config.spec_support import LLAMA, MLX, OLLAMA, spec
from inferactors._config.spec import (
    InferenceSpec,
    MemoryFootprint,
    valid_token,
)
from inferactors._errors import InvalidConfig
from inferactors._flavor import InferFlavor

TOKEN_CHARS = set(string.ascii_letters + string.digits + "._+:-")


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
