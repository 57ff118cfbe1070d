"""``inferactors run`` start-up: instances are admitted concurrently, so a server that
accepts and never answers delays no other, and Ctrl-C is heard at once, even in the middle
of start-up. Real processes: the CLI, and loopback listeners that never reply.

Not ``exclusive``: each bound is timed from the first probe's arrival (the supervisor up
and admitting, its interpreter's start-up behind it) and leaves seconds between what the
rule gives and what breaking it would take, so a shared machine cannot blur the two."""

from __future__ import annotations

import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from support import own_state_dir_env

SILENT = 6
PROBE_TIMEOUT_S = 2.0
"""Side by side, the silent servers' admissions end together about this long after the
first probe; one after another, `SILENT` times this."""
CTRL_C_PROBE_TIMEOUT_S = 10.0
"""The probe timeout of the Ctrl-C test: start-up waited out would last this long, an
interrupted one ends within a few seconds even on a loaded machine."""


@contextmanager
def silent_servers(count: int) -> Iterator[list[socket.socket]]:
    """``count`` listeners whose connections complete in the kernel and are never answered."""
    with ExitStack() as stack:
        listeners = []
        for _ in range(count):
            listener = stack.enter_context(socket.socket())
            listener.bind(("127.0.0.1", 0))
            listener.listen(64)
            listeners.append(listener)
        yield listeners


def wait_for_a_probe(listeners: list[socket.socket]) -> None:
    """Until some probe has connected: the supervisor is up and admitting."""
    readable, _, _ = select.select(listeners, [], [], 30.0)
    assert readable, "no probe reached any silent server within 30 s"


def run_file(
    tmp_path: Path, listeners: list[socket.socket], probe_timeout_s: float = PROBE_TIMEOUT_S
) -> Path:
    text = f'node_id = "startup"\nprobe_timeout_s = {probe_timeout_s}\n'
    for i, port in enumerate(listener.getsockname()[1] for listener in listeners):
        text += (
            f'[[instances]]\nmode = "adopted"\nrole = "silent{i}"\n'
            f'runtime = "infer.llamacpp"\nserve = {{ port = {port} }}\n'
        )
    path = tmp_path / "run.toml"
    path.write_text(text)
    return path


def start(path: Path) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "inferactors", "run", str(path)]
    env = own_state_dir_env(path.parent)  # its own state directory (no [managed])
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def test_silent_servers_are_admitted_side_by_side_not_one_after_another(tmp_path: Path) -> None:
    with silent_servers(SILENT) as listeners:
        process = start(run_file(tmp_path, listeners))
        try:
            wait_for_a_probe(listeners)  # the first admission has begun
            began = time.monotonic()
            assert process.stdout is not None
            for line in process.stdout:
                if "supervising" in line:
                    break
            took = time.monotonic() - began
            process.send_signal(signal.SIGINT)
            rest, _ = process.communicate(timeout=30)
        finally:
            process.kill()
    assert f"supervising 0 of {SILENT} instance(s)" in line
    # From the first probe, one after another this takes SILENT x PROBE_TIMEOUT_S (12 s);
    # side by side, one PROBE_TIMEOUT_S (2 s).
    assert took < 3 * PROBE_TIMEOUT_S, took
    assert process.returncode == 0, rest  # stopped by SIGINT (the adopted are retried)


def test_ctrl_c_in_the_middle_of_start_up_stops_at_once(tmp_path: Path) -> None:
    with silent_servers(SILENT) as listeners:
        process = start(run_file(tmp_path, listeners, CTRL_C_PROBE_TIMEOUT_S))
        try:
            wait_for_a_probe(listeners)  # admissions under way (each waits out its timeout)
            asked = time.monotonic()
            process.send_signal(signal.SIGINT)
            out, errors = process.communicate(timeout=30)
            took = time.monotonic() - asked
        finally:
            process.kill()
    assert "SIGINT: stopping managed servers" in out, out + errors
    assert "supervising" not in out  # start-up was cut short, not waited out
    assert took < CTRL_C_PROBE_TIMEOUT_S / 2, took  # waited out: CTRL_C_PROBE_TIMEOUT_S
