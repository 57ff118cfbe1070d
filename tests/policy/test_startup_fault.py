"""The start-up fault classifier on the real servers' own words (issue 9 item 1).

The transcripts in ``startup_texts/`` were captured from the pinned llama-server and
mlx_lm.server (see its README); each must give its kind and the server's line that says it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from inferactors._policy.startup_fault import (
    LAST_LINES,
    StartupWatch,
    clean,
    diagnose,
    last_lines,
    read_exit,
)
from inferactors._stop_reasons import FaultKind, StopReason

TEXTS = Path(__file__).parent / "startup_texts"


def lines_of(name: str) -> list[str]:
    return (TEXTS / name).read_bytes().decode("utf-8", errors="replace").splitlines()


CASES = [
    (
        "llama_empty_gguf.txt",
        FaultKind.BAD_MODEL_FILE,
        "gguf_init_from_reader: failed to read magic",
    ),
    (
        "llama_truncated_gguf.txt",
        FaultKind.BAD_MODEL_FILE,
        "gguf_init_from_reader: failed to read key-value pairs",
    ),
    (
        "llama_random_gguf.txt",
        FaultKind.BAD_MODEL_FILE,
        "gguf_init_from_reader: invalid magic characters",
    ),
    (
        "llama_unreadable_gguf.txt",
        FaultKind.PERMISSION_DENIED,
        "failed to open GGUF file '/tmp/partA/noperm.gguf' (Permission denied)",
    ),
    ("llama_unknown_flag.txt", FaultKind.INVALID_FLAG, "error: invalid argument: --no-such-flag"),
    ("llama_mlock.txt", FaultKind.INVALID_FLAG, "error: invalid argument: --mlock"),
    (
        "llama_bare_flash_attn.txt",
        FaultKind.INVALID_FLAG,
        'error while handling argument "--flash-attn": expected value for argument',
    ),
    (
        "llama_flash_attn_bad_value.txt",
        FaultKind.INVALID_FLAG,
        "unknown value for --flash-attn: 'maybe'",
    ),
    (
        "llama_port_bound.txt",
        FaultKind.CANNOT_BIND,
        "srv start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 18556",
    ),
    ("llama_port_listening.txt", FaultKind.CANNOT_BIND, "couldn't bind HTTP server socket"),
    (
        "llama_port_80_unprivileged.txt",
        FaultKind.CANNOT_BIND,
        "couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 80",
    ),
    (
        "llama_out_of_memory.txt",
        FaultKind.OUT_OF_MEMORY,
        "ggml_aligned_malloc: insufficient memory (attempted to allocate 488.31 MB)",
    ),
    (
        "llama_missing_library.txt",
        FaultKind.MISSING_LIBRARY,
        "libgomp.so.1: cannot open shared object file",
    ),
    (
        "mlx_port_listening.txt",
        FaultKind.ADDRESS_IN_USE,
        "OSError: [Errno 98] Address already in use",
    ),
    (
        "mlx_unknown_flag.txt",
        FaultKind.INVALID_FLAG,
        "mlx_lm.server: error: unrecognized arguments: --no-such-flag",
    ),
    (
        "mlx_empty_safetensors.txt",
        FaultKind.BAD_MODEL_FILE,
        "generation thread died: [read] Unable to read 8 bytes from file.",
    ),
    (
        "mlx_random_safetensors.txt",
        FaultKind.BAD_MODEL_FILE,
        "[load_safetensors] Invalid json header length",
    ),
    (
        "mlx_missing_layer.txt",
        FaultKind.BAD_MODEL_FILE,
        "generation thread died: Missing 9 parameters:",
    ),
    (
        "python_missing_module.txt",
        FaultKind.MISSING_LIBRARY,
        "ModuleNotFoundError: No module named 'mlx_lm_no_such_module'",
    ),
]
"""Transcript, kind, and words of the line the diagnosis must quote."""


@pytest.mark.parametrize(("name", "kind", "line"), CASES)
def test_each_real_transcript_gives_its_kind_and_the_servers_line(
    name: str, kind: FaultKind, line: str
) -> None:
    found = diagnose(lines_of(name))
    assert found is not None
    assert (found.kind, line in found.line) == (kind, True), found.line
    assert found.last_lines == last_lines(lines_of(name))
    assert found.describe() == f"{kind.value}: {found.line}"


def test_the_line_drops_log_prefixes_and_keeps_the_servers_words() -> None:
    found = diagnose(lines_of("llama_empty_gguf.txt"))
    assert found is not None
    assert found.line == "gguf_init_from_reader: failed to read magic"
    mlx = diagnose(lines_of("mlx_empty_safetensors.txt"))
    assert mlx is not None
    assert mlx.line == (
        "ERROR - mlx_lm.server generation thread died: [read] Unable to read 8 bytes from file."
    )


def test_the_line_is_one_short_printable_line() -> None:
    noisy = "E: failed to allocate " + "\x1b[31m\x07x" * 400 + "\tend"
    found = diagnose([noisy])
    assert found is not None
    assert found.kind is FaultKind.OUT_OF_MEMORY
    for control in ("\x1b", "\x07", "\t"):
        assert control not in found.line
    assert found.line.endswith("... (426 characters)")  # 22 + 400 x + " end"
    assert len(found.line) < 340


def test_last_lines_are_the_last_twenty_non_empty_ones() -> None:
    lines = [f"line {n}" if n % 3 else "   " for n in range(100)]
    kept = last_lines(lines)
    assert len(kept) == LAST_LINES
    assert kept[-1] == "line 98"
    assert all(line.strip() for line in kept)
    found = diagnose([*lines, "error: invalid argument: --x"])
    assert found is not None
    assert found.last_lines[-1] == "error: invalid argument: --x"
    assert len(found.last_lines) == LAST_LINES


def test_a_python_traceback_with_no_named_cause_is_a_python_traceback() -> None:
    traceback = [
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "    raise KeyError('model_type')",
        "KeyError: 'model_type'",
    ]
    found = diagnose(["loading", *traceback])
    assert found is not None
    assert (found.kind, found.line) == (FaultKind.PYTHON_TRACEBACK, "KeyError: 'model_type'")


def test_only_the_exception_line_of_a_traceback_counts_not_its_frames() -> None:
    found = diagnose(
        [
            "Traceback (most recent call last):",
            '  File "/srv/failed_to_bind.py", line 3, in cannot_bind',
            "    raise Permission denied",
            "ValueError: bad value",
        ]
    )
    assert found is not None
    assert (found.kind, found.line) == (FaultKind.PYTHON_TRACEBACK, "ValueError: bad value")


def test_a_traceback_socketserver_prints_for_one_request_is_not_a_fault() -> None:
    lines = [
        "----------------------------------------",
        "Exception occurred during processing of request from ('127.0.0.1', 40000)",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.11/socketserver.py", line 691, in process_request_thread',
        "ConnectionResetError: [Errno 104] Connection reset by peer",
        "----------------------------------------",
    ]
    assert diagnose(lines) is None


def test_warnings_and_lines_below_error_level_never_count() -> None:
    lines = [
        "0.00.010.000 W llama_model_loader: warning: failed to mlock 1024-byte buffer: "
        "Cannot allocate memory",
        "0.00.010.100 I srv  load_model: address already in use? no",
        "2026-12-01 16:59:20,057 - INFO - port 8080: Address already in use, retrying",
        "/srv/server.py:1894: UserWarning: permission denied to the cache",
    ]
    assert diagnose(lines) is None


def test_a_strong_cause_beats_a_generic_model_load_failure() -> None:
    lines = [
        "0.00.005.000 E srv  load_model: failed to load model, 'x.gguf'",
        "0.00.005.100 E llama_model_load: error loading model: unable to allocate CPU buffer",
    ]
    found = diagnose(lines)
    assert found is not None
    assert found.kind is FaultKind.OUT_OF_MEMORY
    weak = diagnose(lines[:1])
    assert weak is not None
    assert (weak.kind, weak.line) == (FaultKind.BAD_MODEL_FILE, lines[0][15:].replace("  ", " "))


def test_plain_output_has_no_diagnosis() -> None:
    assert diagnose([]) is None
    assert diagnose(["listening on http://127.0.0.1:8080", "all slots are idle"]) is None


def test_the_watch_reads_line_by_line_and_names_each_strong_line() -> None:
    watch = StartupWatch()
    lines = lines_of("mlx_port_listening.txt")
    named = [found for line in lines if (found := watch.feed(line)) is not None]
    assert [d.kind for d in named] == [FaultKind.ADDRESS_IN_USE]
    assert watch.strong == named[0]


def test_clean_cuts_and_strips() -> None:
    assert clean("0.00.001.241 I srv  llama_server: initializing ...") == (
        "srv llama_server: initializing ..."
    )
    assert clean("a" * 400).endswith("... (400 characters)")


@pytest.mark.parametrize(
    ("reason", "ever_ready", "expected", "diagnosed"),
    [
        (StopReason.CRASH, False, StopReason.STARTUP_FAILURE, True),
        (StopReason.CRASH, True, StopReason.CRASH, True),
        (StopReason.READINESS_TIMEOUT, False, StopReason.READINESS_TIMEOUT, True),
        (StopReason.REQUESTED, False, StopReason.REQUESTED, False),
        (StopReason.UNLOAD, True, StopReason.UNLOAD, False),
    ],
)
def test_read_exit_turns_a_diagnosed_crash_before_running_into_a_start_up_failure(
    reason: StopReason, ever_ready: bool, expected: StopReason, diagnosed: bool
) -> None:
    stderr = "loading\nerror: invalid argument: --no-such-flag\n"
    reading = read_exit(reason, ever_ready=ever_ready, live=None, stdout="", stderr=stderr)
    assert reading.reason is expected
    assert (reading.diagnosis is not None) is diagnosed
    assert reading.last_lines == ("loading", "error: invalid argument: --no-such-flag")


def test_read_exit_without_a_match_stays_a_crash() -> None:
    reading = read_exit(
        StopReason.CRASH, ever_ready=False, live=None, stdout="hello\n", stderr="bye\n"
    )
    assert (reading.reason, reading.diagnosis, reading.last_lines) == (
        StopReason.CRASH,
        None,
        ("hello", "bye"),
    )
