"""``inferactors run``'s exit contract (issue 10 item 7, issue 18 item 3) and SIGHUP (item
3), each with a real ``inferactors run`` process supervising fake llama-servers: 0 stopped
by a signal, 1 given up after crashes, 2 a bad run file, 78 what a restart cannot fix;
SIGHUP applies only what changed."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cli.run_support import RunProcess
from inferactors.testing import CrashAt, RuntimeKit, Timeline, start_fake_server
from inferactors.testing._fake_processes import free_port
from service.fleet_support import Entry, RunFile
from support import own_state_dir_env


def run_once(path: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "inferactors", "run", str(path)]
    env = own_state_dir_env(path.parent)  # its own state directory (no [managed])
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, env=env)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('node_id = "empty"\n', "the run file names no instance: nothing to supervise"),
        ("[[instances]\n", "TOML syntax error"),
        (
            '[[instances]]\nmode = "adopted"\nrole = "a"\nruntime = "infer.llamacpp"\n'
            '[[instances]]\nmode = "adopted"\nrole = "a"\nruntime = "infer.llamacpp"\n'
            "serve = { port = 9 }\n",
            "$.instances[1].role: 'a' is already the role of $.instances[0]",
        ),
    ],
)
def test_a_bad_run_file_exits_2(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "run.toml"
    path.write_text(text)
    done = run_once(path)
    assert done.returncode == 2, done.stderr
    assert words in done.stderr


def test_every_instance_refused_at_start_exits_78(inferactors_kit: RuntimeKit) -> None:
    """Unknown models: a restart of the supervisor cannot fix that (EX_CONFIG)."""
    run = RunFile.create(inferactors_kit)
    run.write(Entry("a", free_port(), model="unregistered"), Entry("b", free_port(), model="nor"))
    done = run_once(run.path)
    assert done.returncode == 78, done.stdout + done.stderr
    assert "supervising 0 of 2 instance(s)" in done.stdout
    assert "nothing left to supervise" in done.stdout


def test_a_required_instance_given_up_after_crashes_exits_1(inferactors_kit: RuntimeKit) -> None:
    """Crashes after the server served (3 s in): a crash loop, spent by the budget. (The
    same crash twice before it ever served would be a config error: exit 78.)"""
    run = RunFile.create(inferactors_kit, Timeline.of(CrashAt(after_s=3.0, exit_code=3)))
    run.write(Entry("a", free_port()), Entry("b", free_port()))
    done = run_once(run.path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "gave up after 2 restart(s): restart budget spent" in done.stdout
    assert "is down for good" in done.stdout  # the first required one stops the run
    assert "stopping (exit 1: a restart may fix it)" in done.stdout


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_exits_0(inferactors_kit: RuntimeKit, stop_signal: signal.Signals) -> None:
    run = RunFile.create(inferactors_kit)
    optional = Entry("refused", free_port(), model="unregistered", extra="required = false\n")
    run.write(Entry("a", free_port()), optional)
    process = RunProcess.start(run.path)
    process.wait_for("deep health: one token")
    process.process.send_signal(stop_signal)
    assert process.finish() == 0, process.output()
    assert f"{stop_signal.name}: stopping managed servers" in process.output()


def test_sighup_reloads_only_what_changed(inferactors_kit: RuntimeKit) -> None:
    """An invalid file changes nothing; a valid one adds, removes, and leaves ``keep``'s
    server alone: one process started for it in the whole run, and it is the one still up."""
    run = RunFile.create(inferactors_kit)
    keep, drop = Entry("keep", free_port()), Entry("drop", free_port())
    run.write(keep, drop)
    process = RunProcess.start(run.path)
    try:
        process.wait_for("supervising 2 of 2")
        run.path.write_text("[[instances]\n")
        process.process.send_signal(signal.SIGHUP)
        refused = process.wait_for("reload refused")
        assert "nothing changed" in refused
        assert "TOML syntax error" in refused
        run.write(keep, Entry("add", free_port()))
        process.process.send_signal(signal.SIGHUP)
        done = process.wait_for("reloaded:")
        assert done.endswith("reloaded: added add; removed drop; 1 unchanged"), done
        process.wait_for("deep health: one token")  # (the first was keep's or drop's)
        process.wait_for("add  ")  # its events, named by its role
        process.process.send_signal(signal.SIGTERM)
        assert process.finish() == 0, process.output()
    finally:
        process.process.kill()
    started = [m for line in process.lines if (m := STARTED.search(line))]
    roles = sorted(m["role"] for m in started)
    assert roles == ["add", "drop", "keep"], process.output()
    pid = {m["role"]: m["pid"] for m in started}
    lines = process.lines
    stopping = next(i for i, line in enumerate(lines) if "SIGTERM: stopping" in line)
    reloaded = next(i for i, line in enumerate(lines) if "reloaded:" in line)
    exits = {m["pid"]: i for i, line in enumerate(lines) if (m := EXITED.search(line))}
    assert exits[pid["drop"]] < reloaded < stopping < exits[pid["keep"]], process.output()


STARTED = re.compile(r"  (?P<role>[a-z]+)  process (?P<pid>\d+) started")
EXITED = re.compile(r"process (?P<pid>\d+) (exited|killed)")


def test_an_adopted_server_down_at_start_is_retried_until_it_answers(tmp_path: Path) -> None:
    port = free_port()
    path = tmp_path / "run.toml"
    path.write_text(
        '[[instances]]\nmode = "adopted"\nrole = "late"\nruntime = "infer.llamacpp"\n'
        f"serve = {{ port = {port} }}\n"
        "supervision = { restart = { base_s = 0.2, cap_s = 0.5, max_restarts = 100 },"
        " watchdog = { interval_s = 600 } }\n"  # asks for deep health: proved once up
    )
    process = RunProcess.start(path)
    try:
        process.wait_for("late: not started: admission-refused")
        process.wait_for("supervising 0 of 1 instance(s); 1 adopted server(s) not answering")
        server = start_fake_server(tmp_path / "server", port=port)
        try:
            process.wait_for("late  loaded -> running")  # named by its role
            process.wait_for("deep health: one token")
        finally:
            server.stop()
        process.process.send_signal(signal.SIGINT)
        assert process.finish() == 0, process.output()
    finally:
        process.process.kill()


def test_run_help_documents_every_exit_status() -> None:
    argv = [sys.executable, "-m", "inferactors", "run", "--help"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    statuses = re.findall(r"^  (\d)  ", done.stdout, flags=re.MULTILINE)
    assert statuses == ["0", "1", "2"], done.stdout
    assert "SIGHUP reloads the run file" in done.stdout


def test_an_instance_on_the_control_port_is_a_bad_run_file_exit_2(
    inferactors_kit: RuntimeKit,
) -> None:
    """The control API's own port is the supervisor's: an instance there is refused with
    the run file (exit 2, naming the field), not at its admission as a port someone holds
    (which said "adopt it instead" and exited 1)."""
    run = RunFile.create(inferactors_kit)
    port = free_port()
    run.write(Entry("a", free_port()), Entry("b", port))
    token = run.path.parent / "token"
    token.write_text("0123456789abcdef0123\n")
    token.chmod(0o600)
    argv = [sys.executable, "-m", "inferactors", "run", str(run.path)]
    argv += ["--control-port", str(port), "--control-token-file", str(token)]
    env = own_state_dir_env(run.path.parent)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        f"$.instances[1].serve.port: {port} on 127.0.0.1 is the control API's port "
        "(--control-port): choose another"
    ) in done.stderr
    assert "adopt it instead" not in done.stdout + done.stderr
    assert "started" not in done.stdout  # nothing was started
