"""An exit contract a service manager can act on (issue 18 item 3), with a real
``inferactors run``, the real CLI and the notify protocol on a real datagram socket; the
shipped unit's restart settings are read from ``contrib/systemd/inferactors.service`` and
applied as systemd applies them (`restarted`).

- a required instance given up stops the run while an optional one serves (exit 1: a
  restart may help); an optional one given up leaves the required one supervised;
- what a restart cannot fix exits 78 (``EX_CONFIG``), which the unit does not restart: a
  tampered model, a port another process holds, a state directory the supervisor cannot
  use; never a traceback, also when the state directory becomes unwritable under it;
- a control socket removed by hand is made again, and the CLI reaches it; while the
  supervisor cannot make it (stopped), the CLI names the pid that holds the state lock.
"""

from __future__ import annotations

import configparser
import os
import pwd
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs
import pytest

from cli.run_support import RunProcess
from inferactors._models.registry import ModelRegistry
from inferactors._policy.fleet_exit import EXIT_CONFIG, EXIT_NOTHING_LEFT, EXIT_STOPPED
from inferactors.testing import (
    CrashAt,
    RuntimeKit,
    Timeline,
    start_fake_server,
    write_tiny_gguf,
)
from inferactors.testing._fake_processes import free_port
from service.fleet_support import Entry, RunFile

UNIT = Path(__file__).resolve().parents[2] / "contrib" / "systemd" / "inferactors.service"


def restarted(code: int) -> bool:
    """Whether systemd restarts the unit after ``inferactors run`` exits with ``code``:
    ``Restart=on-failure`` (any status but 0) unless ``RestartPreventExitStatus=`` lists it."""
    unit = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string(UNIT.read_text())
    service = unit["Service"]
    assert service["Restart"] == "on-failure"
    prevented = {int(word) for word in service["RestartPreventExitStatus"].split()}
    return code != 0 and code not in prevented


def cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "inferactors", *args]
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, env=env)


def notified(run: RunFile, datagrams: Collected) -> RunProcess:
    """``inferactors run`` with ``NOTIFY_SOCKET`` on the test's datagram socket."""
    socket_path = datagrams.sock.getsockname()
    argv = [sys.executable, "-m", "inferactors", "run", str(run.path)]
    env = {**os.environ, "HOME": str(run.path.parent), "NOTIFY_SOCKET": socket_path}
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    return RunProcess.reading(process)


@attrs.define
class Collected:
    """Every notification, read by a thread as it comes (a datagram socket holds only a
    few unread ones: systemd reads as they come too)."""

    sock: socket.socket
    seen: list[dict[str, str]] = attrs.Factory(list)

    def read(self) -> None:
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:
                return
            self.seen.append(dict(line.split("=", 1) for line in data.decode().splitlines()))

    def until(self, key: str, value: str, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(fields.get(key) == value for fields in list(self.seen)):
                return
            time.sleep(0.02)
        pytest.fail(f"no {key}={value} in {timeout_s} s; seen: {self.seen}")


@pytest.fixture
def datagrams(tmp_path: Path) -> Iterator[Collected]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(tmp_path / "notify.sock"))
        collected = Collected(sock)
        threading.Thread(target=collected.read, daemon=True).start()
        yield collected
        sock.shutdown(socket.SHUT_RDWR)


def adopted(name: str, port: int) -> Entry:
    return Entry(name, port, mode="adopted", extra="required = false\n")


def test_a_required_instance_given_up_stops_the_run_while_an_optional_one_serves(
    inferactors_kit: RuntimeKit, datagrams: Collected, tmp_path: Path
) -> None:
    fake = start_fake_server(tmp_path / "optional", model="tiny")
    try:
        run = RunFile.create(inferactors_kit, Timeline.of(CrashAt(after_s=0.1, exit_code=3)))
        run.write(Entry("main", free_port()), adopted("extra", fake.port))
        process = notified(run, datagrams)
        code = process.finish(60)
    finally:
        fake.stop()
    assert code == EXIT_NOTHING_LEFT, process.output()
    assert "a required instance is down for good (main)" in process.output()
    assert "exit 1: a restart may fix it" in process.output()
    datagrams.until("STOPPING", "1")
    assert restarted(code)


def test_an_optional_instance_given_up_leaves_the_required_one_supervised(
    inferactors_kit: RuntimeKit, tmp_path: Path
) -> None:
    fake = start_fake_server(tmp_path / "required", model="tiny")
    try:
        run = RunFile.create(inferactors_kit, Timeline.of(CrashAt(after_s=0.1, exit_code=3)))
        main = Entry("main", fake.port, mode="adopted")
        run.write(Entry("extra", free_port(), extra="required = false\n"), main)
        process = RunProcess.start(run.path)
        process.wait_for("gave up")
        time.sleep(1.0)
        assert process.process.poll() is None, process.output()  # still supervising main
        probe = cli("probe", "readyz", str(run.path), home=run.path.parent)
        assert probe.returncode == 0, probe.stdout + probe.stderr  # extra is optional
        process.process.send_signal(signal.SIGTERM)
        assert process.finish() == EXIT_STOPPED, process.output()
    finally:
        fake.stop()


def test_a_tampered_model_exits_78_and_is_not_restarted(
    inferactors_kit: RuntimeKit, datagrams: Collected
) -> None:
    own = write_tiny_gguf(inferactors_kit.root / "own.gguf")
    ModelRegistry.open(inferactors_kit.registry()).add(own, name="own")
    run = RunFile.create(inferactors_kit)
    run.write(Entry("chat", free_port(), model="own"))
    process = notified(run, datagrams)
    datagrams.until("READY", "1")
    with own.open("r+b") as model:  # the same byte: only its ctime moves
        byte = model.read(1)
        model.seek(0)
        model.write(byte)
    code = process.finish(60)
    assert code == EXIT_CONFIG, process.output()
    assert "held down after a stop for tampered" in process.output()
    assert "exit 78: a restart cannot fix it" in process.output()
    assert "Traceback" not in process.output()
    datagrams.until("STOPPING", "1")
    assert not restarted(code)


def test_a_port_held_by_another_process_exits_78(inferactors_kit: RuntimeKit) -> None:
    with socket.socket() as stranger:
        stranger.bind(("127.0.0.1", 0))
        stranger.listen()
        run = RunFile.create(inferactors_kit)
        run.write(Entry("chat", stranger.getsockname()[1]))
        process = RunProcess.start(run.path)
        code = process.finish(60)
    assert code == EXIT_CONFIG, process.output()
    assert "something already holds port" in process.output()
    assert not restarted(code)


@contextmanager
def as_nobody(kit: RuntimeKit) -> Iterator[dict[str, object]]:
    """How to run a command as ``nobody`` (as root; a privilege check as any other user is
    none): its user, its own group alone, and the import path of our source."""
    if os.geteuid() != 0 or kit.workspace.run_as is None:
        pytest.skip("needs root, to run the supervisor as another user")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(kit.workspace.sys_path)}
    user = pwd.getpwnam(kit.workspace.run_as)
    yield {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": [], "env": env}


def test_a_state_directory_it_cannot_write_exits_78_in_one_line(
    inferactors_kit: RuntimeKit,
) -> None:
    with as_nobody(inferactors_kit) as nobody:
        run = RunFile.create(inferactors_kit)
        run.write(Entry("chat", free_port()))
        state = inferactors_kit.root / "state"
        state.mkdir(mode=0o755)  # root's: nobody may read it, not write it
        text = run.path.read_text().replace('run_as = "nobody"\n', "")
        run.path.write_text(text)
        argv = [inferactors_kit.workspace.python, "-m", "inferactors", "run", str(run.path)]
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=60, check=False, **nobody
        )  # type: ignore[call-overload]
    assert done.returncode == EXIT_CONFIG, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("inferactors run: ")
    assert str(state) in lines[0]
    assert "is owned by uid 0 (mode 0755), not by this supervisor's user" in lines[0]


def test_a_state_directory_made_unwritable_while_running_stops_without_a_traceback(
    inferactors_kit: RuntimeKit,
) -> None:
    with as_nobody(inferactors_kit) as nobody:
        run = RunFile.create(inferactors_kit)
        run.write(Entry("chat", free_port()))
        text = run.path.read_text().replace('run_as = "nobody"\n', "")
        run.path.write_text(text)
        state = inferactors_kit.root / "state"
        state.mkdir(mode=0o700)
        os.chown(state, nobody["user"], nobody["group"])  # type: ignore[arg-type]  # its own
        argv = [inferactors_kit.workspace.python, "-m", "inferactors", "run", str(run.path)]
        process = RunProcess.reading(
            subprocess.Popen(  # type: ignore[call-overload]
                argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **nobody
            )
        )
        process.wait_for("deep health: one token")
        for place in (state, *state.iterdir()):
            if place.is_dir():
                place.chmod(0o555)  # root does it; nobody can no longer write there
        process.process.send_signal(signal.SIGTERM)
        code = process.finish()
        state.chmod(0o755)
    assert code == EXIT_STOPPED, process.output()
    assert "Traceback" not in process.output()
    assert "cannot remove" in process.output()


def test_a_removed_control_socket_is_made_again_and_the_cli_names_a_frozen_holder(
    inferactors_kit: RuntimeKit,
) -> None:
    run = RunFile.create(inferactors_kit)
    run.write(Entry("chat", free_port()))
    process = RunProcess.start(run.path)
    try:
        process.wait_for("control API listening on")
        sock = inferactors_kit.root / "state" / "control.sock"
        sock.unlink()
        status = cli("status", str(run.path), home=run.path.parent)
        assert status.returncode == 0, status.stderr  # the CLI waited for it to come back
        assert "chat" in status.stdout
        assert "vanished; making it again" in process.wait_for("vanished")
        process.process.send_signal(signal.SIGSTOP)  # it cannot make it again now
        try:
            sock.unlink()
            frozen = cli("status", "--timeout", "1", str(run.path), home=run.path.parent)
        finally:
            process.process.send_signal(signal.SIGCONT)
        assert frozen.returncode == 1, frozen.stderr
        assert f"a supervisor (pid {process.process.pid}) holds the state directory" in (
            frozen.stderr
        )
        assert "no supervisor is running" not in frozen.stderr
        again = cli("status", str(run.path), home=run.path.parent)
        assert again.returncode == 0, again.stderr
    finally:
        process.process.send_signal(signal.SIGTERM)
        process.finish()
    gone = cli("status", str(run.path), home=run.path.parent)
    assert gone.returncode == 3, gone.stderr  # now none holds it: no supervisor is running


def test_a_watchdog_it_cannot_honour_is_refused_and_a_short_one_warned(
    inferactors_kit: RuntimeKit,
) -> None:
    run = RunFile.create(inferactors_kit)
    run.write(Entry("chat", free_port()))
    argv = [sys.executable, "-m", "inferactors", "run", str(run.path)]
    env = {**os.environ, "HOME": str(run.path.parent), "WATCHDOG_USEC": "400000"}
    refused = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert refused.returncode == EXIT_CONFIG, refused.stderr
    assert "WatchdogSec=0.4s cannot be honoured" in refused.stderr
    assert not restarted(refused.returncode)
    short = {**env, "WATCHDOG_USEC": "4000000"}
    process = RunProcess.reading(
        subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=short
        )
    )
    try:
        assert "WatchdogSec=4s is short" in process.wait_for("WatchdogSec")
        process.wait_for("supervising 1 of 1")
    finally:
        process.process.send_signal(signal.SIGTERM)
        assert process.finish() == EXIT_STOPPED, process.output()


def test_a_read_group_reads_through_its_own_socket_and_commands_are_refused(
    inferactors_kit: RuntimeKit,
) -> None:
    """``--control-read-group nogroup``: ``nobody`` (in it) reads status through
    ``control-ro.sock``; its stop is refused (403 read-only); the full socket stays 0600."""
    with as_nobody(inferactors_kit) as nobody:
        run = RunFile.create(inferactors_kit)
        run.write(Entry("chat", free_port()))
        state = inferactors_kit.root / "state"
        process = RunProcess.start(run.path, "--control-read-group", "nogroup")
        try:
            process.wait_for("supervising 1 of 1")
            base = [inferactors_kit.workspace.python, "-m", "inferactors"]
            as_user = {"capture_output": True, "text": True, "timeout": 60, **nobody}

            def nobody_runs(*args: str) -> subprocess.CompletedProcess[str]:
                return subprocess.run([*base, *args], check=False, **as_user)  # type: ignore[call-overload, no-any-return]

            status = nobody_runs("status", "--state-dir", str(state))
            assert status.returncode == 0, status.stderr
            assert "chat" in status.stdout
            stop = nobody_runs("stop", "chat", "--state-dir", str(state))
            assert stop.returncode == 1, stop.stderr
            assert "read-only" in stop.stderr
            assert stat.S_IMODE((state / "control.sock").stat().st_mode) == 0o600
            assert stat.S_IMODE((state / "control-ro.sock").stat().st_mode) == 0o660
            assert stat.S_IMODE(state.stat().st_mode) == 0o711
        finally:
            process.process.send_signal(signal.SIGTERM)
            assert process.finish() == EXIT_STOPPED, process.output()
