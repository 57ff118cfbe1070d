"""``python -m inferactors.testing.fake_ollama``, the program whose entry point is in `_cli`:
it serves, and Ctrl-C stops it cleanly (exit 0, no traceback)."""

from __future__ import annotations

import signal
import subprocess
import sys

import httpx


def test_the_fake_ollama_program_serves_and_stops_cleanly_on_ctrl_c() -> None:
    argv = [sys.executable, "-m", "inferactors.testing.fake_ollama", "--port", "0"]
    argv += ["--model", "tiny:latest"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        assert p.stdout is not None
        line = p.stdout.readline().strip()
        assert line.startswith("fake ollama listening on http://127.0.0.1:"), line
        tags = httpx.get(line.rsplit(" ", 1)[1] + "/api/tags", timeout=5).json()
        assert [m["name"] for m in tags["models"]] == ["tiny:latest"]
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=10)
    assert (p.returncode, err) == (0, "")
