"""The extra_args allowlist of InferenceSpec: what each flavor accepts, and the flags,
values and counts refused (checklist items 8-11).
"""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from config.spec_support import LLAMA, MLX, OLLAMA, spec
from inferactors._config.allowlist import ALLOWED_FLAGS, check_extra_args, is_plain_value
from inferactors._errors import InvalidConfig
from inferactors._flavor import InferFlavor

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
