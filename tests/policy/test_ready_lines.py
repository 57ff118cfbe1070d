"""`ready_line` on the real servers' start-up output (``ready_texts/``), on upstream
llama.cpp's phrasing, and against every failed start-up transcript (``startup_texts/``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferactors._policy.ready_lines import ready_line

HERE = Path(__file__).parent
READY = HERE / "ready_texts"
FAILED = HERE / "startup_texts"
MLX_AT = "127.0.0.1 on port 18778"


def said(path: Path) -> list[tuple[str, str]]:
    """The ``(what, line)`` of every line of ``path`` that `ready_line` matches."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [(found, line) for line in lines if (found := ready_line(line)) is not None]


def test_the_real_llama_server_says_loaded_then_listening_and_nothing_else_counts() -> None:
    assert said(READY / "llama_tiny_start.txt") == [
        ("loaded", "0.00.015.172 I srv  llama_server: model loaded"),
        ("listening", "0.00.015.203 I srv  llama_server: listening on http://127.0.0.1:18777"),
    ]


def test_the_real_mlx_server_says_it_starts_its_httpd_and_nothing_else_counts() -> None:
    assert said(READY / "mlx_tiny_start.txt") == [
        ("listening", f"2026-12-01 19:52:32,344 - INFO - Starting httpd at {MLX_AT}..."),
    ]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("main: HTTP server is listening, hostname: 127.0.0.1, port: 8080, http threads: 5",
         "listening"),
        ("main: server is listening on http://127.0.0.1:8080", "listening"),
        ("main: model loaded", "loaded"),
        ("main: server is listening on http://127.0.0.1:8080 - starting the main loop", "loaded"),
        ("srv  update_slots: all slots are idle", "loaded"),
        ("inferactors fake server (llamacpp) listening on http://127.0.0.1:80 pid 7", "listening"),
        ("inferactors fake server (mlx) listening on http://[::1]:8090 pid 7", "listening"),
        ("main: loading model", None),
        ("srv    load_model: loading model '/m/tiny.gguf'", None),
        ("my prompt said: model loaded", None),
        ('127.0.0.1 - - [05/Mar/2025 10:00:01] "GET /health HTTP/1.1" 200 -', None),
        ("", None),
    ],
)  # fmt: skip
def test_upstream_llama_cpp_and_fake_lines(line: str, expected: str | None) -> None:
    assert ready_line(line) == expected


@pytest.mark.parametrize("path", sorted(FAILED.glob("*.txt")), ids=lambda path: path.stem)
def test_no_line_of_a_failed_start_says_loaded(path: Path) -> None:
    """mlx_lm.server listens before it loads its model (at the first request), so those that
    failed to load did say they listen; nothing else did, and nobody said loaded."""
    found = said(path)
    assert all(what == "listening" and "Starting httpd" in line for what, line in found)
    assert bool(found) == (path.stem in MLX_LISTENED)


MLX_LISTENED = {"mlx_empty_safetensors", "mlx_missing_layer", "mlx_random_safetensors"}
