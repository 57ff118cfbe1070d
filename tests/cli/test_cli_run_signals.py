"""``inferactors run`` in its first moments and after a reload that leaves nothing (issue 10
items 3, 7 and 8, found by an operator), each with a real process supervising a fake
llama-server.

- Signals from the start: the console script installs its handlers before the half second
  of imports, so a SIGHUP 50 to 200 ms after they are installed (the kernel shows them
  caught in ``/proc/PID/status``) is a reload, not death (exit 129), and a SIGINT or
  SIGTERM then is a clean stop (exit 0) without a traceback. (Before the interpreter runs
  the script, its first ~20 ms on an idle machine, the kernel's default still applies: not
  tested. The wait for the handlers keeps a busy machine's slower start out of the test.)
- A reload whose only instance is refused at its start keeps the exit contract (exit 78:
  its port is another process's, which a restart cannot fix), and says why.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli.run_support import RunProcess
from inferactors.testing import RuntimeKit
from inferactors.testing._fake_processes import free_port
from service.fleet_support import Entry, RunFile
from support import own_state_dir_env

SCRIPT = Path(sys.executable).with_name("inferactors")
"""The console script an operator (or systemd) runs."""


def start_script(path: Path) -> RunProcess:
    """``inferactors run PATH`` through the console script (not ``python -m``)."""
    env = own_state_dir_env(path.parent)  # its own state directory (no [managed])
    process = subprocess.Popen(
        [str(SCRIPT), "run", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    return RunProcess.reading(process)


def signals_caught(pid: int) -> set[int]:
    """The signals ``pid`` has handlers for (the ``SigCgt`` mask of its status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            mask = int(line.split()[1], 16)
            return {number for number in range(1, 65) if mask >> (number - 1) & 1}
    raise AssertionError(f"no SigCgt in /proc/{pid}/status")


def wait_for_the_early_handlers(process: RunProcess) -> None:
    """Until the console script handles SIGINT, SIGTERM and SIGHUP (its first step)."""
    wanted = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    deadline = time.monotonic() + 30.0
    while not wanted <= signals_caught(process.process.pid):
        assert process.process.poll() is None, process.output()
        assert time.monotonic() < deadline, "the console script never handled the signals"
        time.sleep(0.001)


@pytest.mark.parametrize("delay_ms", [50, 100, 200])
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_in_the_first_moments_exits_0(
    inferactors_kit: RuntimeKit, stop: signal.Signals, delay_ms: int
) -> None:
    run = RunFile.create(inferactors_kit)
    run.write(Entry("a", free_port()))
    process = start_script(run.path)
    wait_for_the_early_handlers(process)
    time.sleep(delay_ms / 1000)
    process.process.send_signal(stop)
    assert process.finish() == 0, process.output()
    assert "Traceback" not in process.output()
    assert "KeyboardInterrupt" not in process.output()


@pytest.mark.parametrize("delay_ms", [50, 100, 200])
def test_a_sighup_in_the_first_moments_is_a_reload(
    inferactors_kit: RuntimeKit, delay_ms: int
) -> None:
    run = RunFile.create(inferactors_kit)
    run.write(Entry("a", free_port()))
    process = start_script(run.path)
    try:
        wait_for_the_early_handlers(process)
        time.sleep(delay_ms / 1000)
        process.process.send_signal(signal.SIGHUP)
        process.wait_for("supervising 1 of 1")
        assert process.process.poll() is None, process.output()
        process.process.send_signal(signal.SIGTERM)
        assert process.finish() == 0, process.output()
    finally:
        process.process.kill()
    assert "Traceback" not in process.output()


def test_a_reload_that_leaves_nothing_exits_78_saying_why(inferactors_kit: RuntimeKit) -> None:
    """The port is held by another process: a restart of the supervisor cannot fix that
    (exit 78, which the shipped unit does not restart)."""
    run = RunFile.create(inferactors_kit)
    run.write(Entry("a", free_port()))
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        held = holder.getsockname()[1]
        process = RunProcess.start(run.path)
        try:
            process.wait_for("supervising 1 of 1")
            run.write(Entry("a", held))
            process.process.send_signal(signal.SIGHUP)
            assert process.finish() == 78, process.output()
        finally:
            process.process.kill()
    refusal = f"admission-refused: serve.port: something already holds port {held}"
    [reloaded] = [line for line in process.lines if "reloaded:" in line]
    assert f"ERROR    reloaded: changed a; 0 unchanged; refused a: {refusal}" in reloaded
    [last] = [line for line in process.lines if "nothing left to supervise" in line]
    assert "ERROR    nothing left to supervise: " in last
    assert f"(a: refused: {refusal}" in last
