"""The grown ``serve.extra_args`` allowlist (issue 9 item 4): every flag checked against the
real ``--help`` of the pinned servers, each accepted with a good value and refused with bad
ones, and every path or secret flag refused naming the typed field to use instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferactors._config.allowlist import check_extra_args, check_typed_fields
from inferactors._config.flag_rules import (
    FLAG_RULES,
    TYPED_FIELDS,
    FlagRule,
    TypedField,
    ValueKind,
)
from inferactors._errors import InvalidConfig
from inferactors._flavor import InferFlavor
from inferactors._policy.help_flags import parse_help_flags

LLAMA = InferFlavor.LLAMACPP
MLX = InferFlavor.MLX_LM
TEXTS = Path(__file__).parents[1] / "policy" / "help_texts"
HELP = {
    LLAMA: parse_help_flags((TEXTS / "llama_server_0.5.0-dev.txt").read_text()),
    MLX: parse_help_flags((TEXTS / "mlx_lm_server_0.32.2.txt").read_text()),
}
NOT_IN_THIS_BUILD = {"--mlock", "--mmap", "--no-mmap"}
"""Listed for builds that have them; the pinned llama-server has not (admission refuses)."""

RULE_CASES = [
    (flavor, s, rule) for rule in FLAG_RULES for flavor in rule.flavors for s in rule.spellings
]


def refused(flavor: InferFlavor, *args: str) -> str:
    with pytest.raises(InvalidConfig) as info:
        check_extra_args(flavor, args)
    return str(info.value)


@pytest.mark.parametrize(("flavor", "flag", "rule"), RULE_CASES, ids=lambda v: str(v)[:30])
def test_every_allowed_spelling_is_in_the_real_help(
    flavor: InferFlavor, flag: str, rule: FlagRule
) -> None:
    assert flag in HELP[flavor] or flag in NOT_IN_THIS_BUILD


@pytest.mark.parametrize(("flavor", "flag", "rule"), RULE_CASES, ids=lambda v: str(v)[:30])
def test_every_allowed_flag_takes_its_example(
    flavor: InferFlavor, flag: str, rule: FlagRule
) -> None:
    example = rule.example
    check_extra_args(flavor, [flag] if example is None else [flag, example])


@pytest.mark.parametrize("entry", [e for e in TYPED_FIELDS], ids=lambda e: e.spellings[0])
def test_path_and_secret_flags_are_refused_naming_the_field(entry: TypedField) -> None:
    for flavor in entry.flavors:
        for flag in entry.spellings:
            message = refused(flavor, flag, "x")
            assert message.startswith(f'serve.extra_args[0] "{flag}" is not an allowed')
            assert f"takes {entry.takes}" in message
            field = entry.field
            assert (f"use {field} instead" if field else "no field replaces it") in message


def test_the_everyday_flags_of_the_issue() -> None:
    check_extra_args(LLAMA, [
        "--alias", "chat", "--jinja", "--chat-template", "chatml", "--embedding", "-v",
        "-np", "4", "-b", "512", "-ub", "256", "--cont-batching", "--metrics", "--slots",
        "-fa", "auto", "-lv", "3", "--pooling", "mean", "--reranking", "-n", "-1",
    ])  # fmt: skip
    inline = "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}\n{% endfor %}"
    check_extra_args(LLAMA, ["--jinja", "--chat-template", inline])
    check_extra_args(LLAMA, ["--chat-template-kwargs", '{"enable_thinking": false}'])
    check_extra_args(MLX, ["--chat-template", inline, "--chat-template-args", '{"a": [1]}'])
    check_extra_args(MLX, ["--use-default-chat-template", "--decode-concurrency", "8"])


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["-fa"], "-fa needs 1 value"),
        (["--flash-attn", "yes"], "is not one of `on`, `off`, `auto`"),
        (["--pooling", "max"], "is not one of"),
        (["-np", "four"], "is not an integer"),
        (["-np", "1.5"], "is not an integer"),
        (["--temp", "hot"], "is not a decimal number"),
        (["--alias", "a,b"], "is not a name"),
        (["--alias", "-x"], "is not a name"),
        (["--alias", "x y"], "must be a single token"),
        (["--chat-template", "\n\n \t"], "is only whitespace"),
        (["--chat-template", "a\x00b"], "control character"),
        (["--chat-template", "--api-key"], "starts with '-'"),
        (["--chat-template", "x" * (64 * 1024 + 1)], "must be 1 to 65536 characters"),
        (["--chat-template-kwargs", "[1]"], "is not a JSON object"),
        (["--chat-template-kwargs", '{"a": 1, "a": 2}'], "is not JSON"),
        (["--chat-template-kwargs", "{nope"], "is not JSON"),
        (["--reasoning-budget", "-"], "is not an integer"),
    ],
)
def test_bad_values_are_refused_naming_the_entry(args: list[str], why: str) -> None:
    message = refused(LLAMA, *args)
    assert message.startswith("serve.extra_args[")
    assert why in message


def test_mlx_refuses_llama_only_flags_and_trust_remote_code() -> None:
    assert "not an allowed infer.mlx-lm flag" in refused(MLX, "--jinja")
    message = refused(MLX, "--trust-remote-code")
    assert "permission to run the model's code" in message
    assert "use serve.lora instead" in refused(MLX, "--adapter-path", "/a")


def test_typed_fields_are_checked() -> None:
    check_typed_fields(LLAMA, "proj", ("a", "b"), "/etc/inferactors/key")
    check_typed_fields(MLX, None, ("adapter",), None)
    bad = [
        ((LLAMA, "../proj", (), None), "serve.mmproj must be a registry model name"),
        ((MLX, "proj", (), None), "serve.mmproj is supported by infer.llamacpp only"),
        ((LLAMA, None, ("ok", "/abs"), None), "serve.lora[1] must be a registry model name"),
        ((LLAMA, None, tuple("abcdefghi"), None), "takes at most 8"),
        ((MLX, None, ("a", "b"), None), "infer.mlx-lm takes at most 1"),
        ((InferFlavor.OLLAMA, None, ("a",), None), "takes at most 0"),
        ((LLAMA, None, (), "key.txt"), "serve.api_key_file must be an absolute path"),
        ((LLAMA, None, (), "/a\x00b"), "must be an absolute path"),
        ((MLX, None, (), "/key"), "serve.api_key_file is supported by infer.llamacpp only"),
    ]
    for args, message in bad:
        with pytest.raises(InvalidConfig) as info:
            check_typed_fields(*args)
        assert message in str(info.value)


def test_every_value_kind_is_used_and_described() -> None:
    used = {rule.kind for rule in FLAG_RULES}
    assert used == set(ValueKind) - {ValueKind.PLAIN}
