"""The CLI end to end: `inferactors demo` and `inferactors run` as a user runs them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from support import Unprivileged, run_as_line


def _env(llama_server: Path) -> dict[str, str]:
    return {**os.environ, "INFERACTORS_LLAMA_SERVER": str(llama_server)}


def test_demo_prints_states_one_token_and_exits_zero(server_dir: Path, llama_server: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "inferactors", "demo", "--work-dir", str(server_dir)],
        env=_env(llama_server),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "-> running" in out
    assert "deep health: one token" in out
    assert "NAME  STATE" in out
    # the instance is named by its role wherever the demo prints it; never by its id
    assert "loaded demo\n" in out
    assert "  demo  loaded -> " in out
    assert "\ndemo  running  http://127.0.0.1:" in out
    assert not re.search(r"demo-[0-9a-f]{8}-demo", out), out
    assert "stopped: exited with status 0" in out or "stopped: killed by" in out
    assert "demo finished" in out


def test_demo_fails_clearly_without_a_server(tmp_path: Path) -> None:
    env = {**os.environ, "INFERACTORS_LLAMA_SERVER": str(tmp_path / "missing")}
    done = subprocess.run(
        [sys.executable, "-m", "inferactors", "demo", "--work-dir", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "is not an executable file" in done.stderr


RUN_FILE = """
node_id = "ci"

[managed]
registry = "{registry}"
data_root = "state"
serve_programs = {{ "infer.llamacpp" = "{server}" }}
{run_as}

[[instances]]
mode = "managed"
role = "chat"
runtime = "infer.llamacpp"
model = "tiny"
serve = {{ port = {port} }}
"""


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_run_supervises_and_stops_every_managed_server_on_a_signal(
    stop_signal: signal.Signals,
    server_dir: Path,
    llama_server: Path,
    registry_path: Path,
    free_port: int,
    unprivileged: Unprivileged,
) -> None:
    run_file = server_dir / "run.toml"
    run_as = run_as_line(unprivileged.run_as)
    text = RUN_FILE.format(
        server=llama_server, port=free_port, registry=registry_path, run_as=run_as
    )
    run_file.write_text(text)
    process = subprocess.Popen(
        [sys.executable, "-m", "inferactors", "run", str(run_file)],
        env=_env(llama_server),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            lines.append(line)
            if "deep health: one token" in line:
                break
        else:
            pytest.fail("never reached running and passed deep health:\n" + "".join(lines))
        assert any("-> running" in line for line in lines)
        children = psutil.Process(process.pid).children(recursive=True)
        assert children, "the managed llama-server should be a child of inferactors run"
        process.send_signal(stop_signal)
        rest, errors = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0, errors
    assert f"{stop_signal.name}: stopping managed servers" in rest
    assert "(reason: requested)" in rest
    _gone, alive = psutil.wait_procs(children, timeout=5)
    assert not alive


def test_run_refuses_a_bad_file_naming_the_field(tmp_path: Path) -> None:
    run_file = tmp_path / "run.toml"
    run_file.write_text(
        '[[instances]]\nmode = "managed"\nrole = "x"\nruntime = "infer.llamacpp"\n'
        'serve = { port = "high" }\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "inferactors", "run", str(run_file)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "instances[0].serve.port" in done.stderr
