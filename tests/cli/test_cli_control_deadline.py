"""The control commands never hang and never call a busy or frozen supervisor absent: a
socket that listens but never accepts (a frozen supervisor) is "did not answer within",
a full accept queue is "busy", both exit 1 within ``--timeout``; exit 3 stays for no
socket or a refused connection (``test_cli_control``)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferactors._service.control_server import control_socket_path

# Not exclusive: each bound is the call's 1 s timeout with 5 s to spare for a CLI start on
# a shared machine (the suite's exclusive tests run alone, and every second of them is
# waited for by every worker).

COMMANDS = [
    ["status"],
    ["stop", "chat"],
    ["restart", "chat"],
    ["reload"],
    ["logs", "chat", "-n", "1"],
    ["logs", "chat", "-f"],
    ["events", "-f"],
    ["probe", "livez"],
]


def cli(*argv: str) -> tuple[subprocess.CompletedProcess[str], float]:
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "inferactors", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done, time.monotonic() - began


@contextlib.contextmanager
def frozen(state_dir: Path, backlog: int = 16) -> Iterator[socket.socket]:
    """A control socket that listens and never accepts: a supervisor under SIGSTOP."""
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(control_socket_path(state_dir)))
        listener.listen(backlog)
        yield listener


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_frozen_supervisor_is_said_within_the_timeout(tmp_path: Path, command: list[str]) -> None:
    with frozen(tmp_path):
        done, took = cli(*command, "--timeout", "1", "--state-dir", str(tmp_path))
    path = control_socket_path(tmp_path)
    assert done.returncode == 1, done.stderr
    assert f"the supervisor at {path} did not answer within 1.0 s" in done.stderr
    assert took < 6.0


@pytest.mark.parametrize("command", [["status"], ["probe", "livez"], ["logs", "chat", "-f"]])
def test_a_full_accept_queue_is_busy_not_absent(tmp_path: Path, command: list[str]) -> None:
    with frozen(tmp_path, backlog=0) as listener, contextlib.ExitStack() as held:
        while True:  # fill the accept queue, as 63 pending connections did
            client = held.enter_context(socket.socket(socket.AF_UNIX))
            client.setblocking(False)
            try:
                client.connect(listener.getsockname())
            except BlockingIOError:
                break
        done, took = cli(*command, "--timeout", "1", "--state-dir", str(tmp_path))
    assert done.returncode == 1, done.stderr
    assert "is busy: its control socket took no connection within 1.0 s" in done.stderr
    assert "no supervisor is running" not in done.stderr
    assert 0.9 < took < 6.0
