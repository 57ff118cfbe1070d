"""The ``--help`` parser on the real help texts of the pinned servers, and the check that
refuses a flag the binary does not list (issue 9 item 4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferactors._errors import InvalidConfig
from inferactors._flavor import InferFlavor
from inferactors._policy.help_flags import KnownFlags, check_known_flags, parse_help_flags

TEXTS = Path(__file__).parent / "help_texts"
LLAMA_HELP = (TEXTS / "llama_server_0.5.0-dev.txt").read_text()
MLX_HELP = (TEXTS / "mlx_lm_server_0.32.2.txt").read_text()
LLAMA = InferFlavor.LLAMACPP
VERSION = "version: 0.5.0-dev (build 0, commit unknown)"


def test_llama_server_help_gives_every_spelling_of_an_option_line() -> None:
    flags = parse_help_flags(LLAMA_HELP)
    # -h,    --help, --usage                  print usage and exit
    assert {"-h", "--help", "--usage"} <= flags
    # -kvo,  --kv-offload, -nkvo, --no-kv-offload   (description on the next line)
    assert {"-kvo", "--kv-offload", "-nkvo", "--no-kv-offload"} <= flags
    # --spec-draft-model, -md, --model-draft FNAME
    assert {"--spec-draft-model", "-md", "--model-draft"} <= flags
    assert {"-fa", "--flash-attn", "-a", "--alias", "--jinja", "--no-jinja"} <= flags
    assert {"-lv", "--verbosity", "--log-verbosity", "-v", "--verbose"} <= flags
    assert {"--api-key-file", "--mmproj", "--lora", "--load-mode", "-lm"} <= flags
    assert len(flags) > 300


def test_llama_server_help_is_read_exactly() -> None:
    flags = parse_help_flags(LLAMA_HELP)
    assert "--mlock" not in flags
    assert "--no-mmap" not in flags
    # metavars, choices and description words are not flags
    for word in ("N", "FNAME", "{none,linear,yarn}", "[on|off|auto]", "-1", "--", "-----"):
        assert word not in flags
    assert all(not flag.endswith(",") for flag in flags)


def test_argparse_help_of_mlx_lm_server() -> None:
    flags = parse_help_flags(MLX_HELP)
    assert flags == {
        "-h", "--help", "--model", "--adapter-path", "--host", "--port", "--allowed-origins",
        "--draft-model", "--num-draft-tokens", "--trust-remote-code", "--log-level",
        "--chat-template", "--use-default-chat-template", "--temp", "--top-p", "--top-k",
        "--min-p", "--max-tokens", "--chat-template-args", "--decode-concurrency",
        "--prompt-concurrency", "--prefill-step-size", "--prompt-cache-size",
        "--prompt-cache-bytes", "--kv-bits", "--kv-group-size", "--quantized-kv-start",
        "--pipeline",
    }  # fmt: skip


def test_usage_lines_and_prose_give_nothing() -> None:
    assert parse_help_flags("usage: prog [-h] [--model MODEL]\n\nMLX Http Server.\n") == set()
    assert parse_help_flags("") == set()
    assert parse_help_flags("          --deep-indent   not an option line\n") == set()


def known(*flags: str, problem: str | None = None) -> KnownFlags:
    return KnownFlags("/opt/llama-server", VERSION, frozenset(flags), problem)


def refused(args: tuple[str, ...], flags: KnownFlags) -> str:
    with pytest.raises(InvalidConfig) as info:
        check_known_flags(LLAMA, args, flags)
    return str(info.value)


def test_a_flag_the_binary_lacks_is_refused_naming_flag_program_and_version() -> None:
    lacking = parse_help_flags(LLAMA_HELP)
    message = refused(
        ("--threads", "2", "--mlock"), KnownFlags("/opt/llama-server", VERSION, lacking)
    )
    assert message == (
        f"serve.extra_args[2]: --mlock is not a flag of /opt/llama-server ({VERSION})"
    )


def test_flags_the_binary_lists_pass_values_are_not_flags() -> None:
    flags = KnownFlags("/opt/llama-server", VERSION, parse_help_flags(LLAMA_HELP))
    check_known_flags(LLAMA, ("--alias", "chat", "--chat-template", "chatml", "-fa", "on"), flags)
    check_known_flags(LLAMA, (), known())  # nothing to check, nothing refused


def test_an_unreadable_help_refuses_extra_args_and_says_why() -> None:
    message = refused(("--jinja",), known(problem="--help timed out after 20 s"))
    assert "cannot check the flags against /opt/llama-server: --help timed out" in message
    assert "no flags" in refused(("--jinja",), known())
