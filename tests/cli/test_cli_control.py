"""The control commands (``status``, ``stop``, ``logs``, ...) run as separate processes
against a real control server (hypercorn on a Unix socket) over a fake fleet: what they
print, what they send, and their exit statuses."""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import trio

from inferactors._errors import InvalidConfig
from inferactors._events import ProcessExited
from inferactors._service.control_server import control_socket_path, serve_control
from inferactors._service.views import ReloadResult
from inferactors._stop_reasons import StopReason
from service.control_support import FakeFleet


async def cli(*argv: str) -> subprocess.CompletedProcess[bytes]:
    return await trio.run_process(
        [sys.executable, "-m", "inferactors", *argv],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )


@pytest.fixture
async def fleet(tmp_path: Path, nursery: trio.Nursery) -> FakeFleet:
    served = FakeFleet()
    await nursery.start(partial(serve_control, served, state_dir=tmp_path))
    return served


async def test_status_is_a_table_from_another_process(fleet: FakeFleet, tmp_path: Path) -> None:
    done = await cli("status", "--state-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    header, chat, embed = done.stdout.decode().splitlines()
    assert header.split() == [
        "NAME", "MODE", "STATE", "ENDPOINT", "MODEL", "PID", "UPTIME", "RESTARTS", "DETAIL"
    ]  # fmt: skip
    assert chat.split() == [
        "chat", "managed", "running", "127.0.0.1:8101", "tiny", "101", "12s", "0"
    ]  # fmt: skip
    assert embed.split()[:4] == ["embed", "managed", "running", "127.0.0.1:8102"]
    assert "\x1b" not in done.stdout.decode()  # not a terminal: no colour


async def test_status_json(fleet: FakeFleet, tmp_path: Path) -> None:
    done = await cli("status", "--json", "--state-dir", str(tmp_path))
    assert b'"name": "chat"' in done.stdout
    assert b'"pid": 102' in done.stdout


async def test_stop_is_sent_for_that_instance_only(fleet: FakeFleet, tmp_path: Path) -> None:
    done = await cli("stop", "chat", "--state-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"chat: stopped (reason: requested)\n"
    assert fleet.calls == ["stop chat"]
    assert fleet.instances["embed"].status.pid == 102


async def test_a_refused_or_unknown_instance_exits_1(fleet: FakeFleet, tmp_path: Path) -> None:
    unknown = await cli("restart", "nope", "--state-dir", str(tmp_path))
    refused = await cli("start", "embed", "--state-dir", str(tmp_path))
    assert unknown.returncode == 1
    assert unknown.stderr == b"inferactors restart: no instance named 'nope'\n"
    assert refused.returncode == 1
    assert b"already running" in refused.stderr


async def test_logs_print_the_tail_with_time_stream_and_pid(
    fleet: FakeFleet, tmp_path: Path
) -> None:
    for text in ("one", "two", "three"):
        fleet.add_line("chat", text)
    done = await cli("logs", "chat", "-n", "2", "--state-dir", str(tmp_path))
    lines = done.stdout.decode().splitlines()
    assert [line.split("  ", 1)[1] for line in lines] == ["two", "three"]
    assert lines[0].split()[1:3] == ["stderr", "101"]
    assert lines[0].startswith("2023-11-14T")


async def test_logs_follow_prints_new_lines_and_ctrl_c_ends_it_quietly(
    fleet: FakeFleet, tmp_path: Path
) -> None:
    fleet.add_line("chat", "before the crash")
    command = [sys.executable, "-m", "inferactors", "logs", "chat", "-f", "--state-dir"]
    process = await trio.lowlevel.open_process(
        [*command, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None
    assert process.stderr is not None
    seen = b""
    with trio.fail_after(10):
        while b"before the crash" not in seen:
            seen += await process.stdout.receive_some()
        fleet.add_line("chat", "segmentation fault")
        while b"segmentation fault" not in seen:
            seen += await process.stdout.receive_some()
        process.send_signal(signal.SIGINT)
        assert await process.wait() == 0
    assert await process.stderr.receive_some() == b""
    await process.stdout.aclose()
    await process.stderr.aclose()


async def test_events_are_described_as_the_supervisor_prints_them(
    fleet: FakeFleet, tmp_path: Path
) -> None:
    wall = datetime.datetime(2026, 12, 1, 18, 0, 34, 884000).timestamp()
    fleet.add_event(
        ProcessExited(
            "id-chat", 101, 1, None, StopReason.CRASH, 5.0, last_lines=("oom",), wall_time=wall
        )
    )
    described = await cli("events", "--state-dir", str(tmp_path))
    raw = await cli("events", "--json", "--state-dir", str(tmp_path))
    assert described.stdout.decode().splitlines() == [
        "2026-12-01T18:00:34.884 chat  process 101 exited with status 1 (reason: crash)",
        "    | oom",
    ]
    item = json.loads(raw.stdout)
    assert item["type"] == "ProcessExited"
    assert (item["instance_id"], item["name"]) == ("id-chat", "chat")  # the id stays in JSON
    assert (item["at"], item["wall_time"]) == (5.0, wall)  # monotonic and wall clock


async def test_reload_prints_what_changed_or_the_config_error_with_2(
    fleet: FakeFleet, tmp_path: Path
) -> None:
    applied = await cli("reload", "--state-dir", str(tmp_path))
    fleet.reload_error = InvalidConfig("run.toml: $.instances[0].role: required key missing")
    refused = await cli("reload", "--state-dir", str(tmp_path))
    assert applied.stdout.decode().splitlines() == [
        "added: new",
        "changed: chat",
        "unchanged: embed",
    ]
    assert refused.returncode == 2
    assert refused.stderr.decode() == (
        "inferactors reload: the run file is invalid; nothing changed: "
        "run.toml: $.instances[0].role: required key missing\n"
    )


async def test_the_run_file_finds_the_supervisor_even_when_invalid(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    await nursery.start(partial(serve_control, FakeFleet(), state_dir=tmp_path / "data"))
    run_file = tmp_path / "run.toml"
    run_file.write_text('[managed]\ndata_root = "data"\nregistry = "r"\n[[instances]]\nbad = 1\n')
    done = await cli("status", str(run_file))
    assert done.returncode == 0, done.stderr
    assert b"chat" in done.stdout


async def test_no_supervisor_exits_3(tmp_path: Path) -> None:
    missing = await cli("status", "--state-dir", str(tmp_path))
    with socket.socket(socket.AF_UNIX) as dead:  # a socket nothing listens on
        dead.bind(str(control_socket_path(tmp_path)))
    stale = await cli("stop", "chat", "--state-dir", str(tmp_path))
    both = await cli("status", "run.toml", "--state-dir", str(tmp_path))
    assert missing.returncode == 3
    assert missing.stderr.decode() == (
        f"inferactors status: no supervisor is running (no socket at {tmp_path}/control.sock)\n"
    )
    assert stale.returncode == 3
    assert b"nothing answers at" in stale.stderr
    assert both.returncode == 2


async def test_a_state_dir_that_does_not_exist_says_a_moved_data_root_keeps_the_old(
    tmp_path: Path,
) -> None:
    moved = tmp_path / "state2"  # a run file's data_root edited while its supervisor runs
    done = await cli("status", "--state-dir", str(moved))
    assert done.returncode == 3
    said = done.stderr.decode()
    assert f"no socket at {moved}/control.sock); {moved} does not exist" in said
    assert "changed while it runs still uses the old one (pass it as --state-dir" in said


async def test_reload_prints_each_refused_instance_and_exits_1(
    fleet: FakeFleet, tmp_path: Path
) -> None:
    fleet.reload_result = ReloadResult(
        added=("new",),
        changed=("chat",),
        unchanged=("embed",),
        refused=(("chat", "flag --bogus is not in the binary's --help"), ("new", "no model x")),
    )
    done = await cli("reload", "--state-dir", str(tmp_path))
    assert done.returncode == 1, done.stderr
    assert done.stdout.decode().splitlines() == [
        "added: new",
        "changed: chat",
        "unchanged: embed",
        "refused chat: flag --bogus is not in the binary's --help",
        "refused new: no model x",
    ]


@pytest.mark.parametrize("command", [["logs", "chat", "-f"], ["events", "-f", "--json"]])
async def test_a_follow_the_supervisor_ends_prints_what_came_and_exits_0(
    fleet: FakeFleet, tmp_path: Path, command: list[str]
) -> None:
    done: list[subprocess.CompletedProcess[bytes]] = []

    async def follow() -> None:
        done.append(await cli(*command, "--state-dir", str(tmp_path)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow)
        for _ in range(1000):  # 10 s for the command to start and subscribe
            if fleet.open_follows:
                break
            await trio.sleep(0.01)
        fleet.add_line("chat", "last words")
        fleet.add_event(ProcessExited("id-chat", 101, None, 15, StopReason.REQUESTED, 9.0))
        fleet.end_follows()
    (process,) = done
    assert process.returncode == 0
    assert process.stderr == f"inferactors {command[0]}: the supervisor stopped\n".encode()
    assert (b"last words" if command[0] == "logs" else b'"reason": "requested"') in process.stdout


async def test_a_missing_state_dir_may_be_a_supervisor_just_started(tmp_path: Path) -> None:
    done = await cli("status", "--state-dir", str(tmp_path / "not-yet"))
    assert done.returncode == 3
    assert "does not exist (yet): a supervisor just started makes it" in done.stderr.decode()


async def test_a_held_state_dir_without_a_socket_is_said_to_be_starting(tmp_path: Path) -> None:
    """A supervisor that holds the lock but has not made its socket yet (it is importing,
    on a busy machine, for seconds) is not called gone."""
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        done = await cli("status", "--state-dir", str(tmp_path), "--timeout", "0.5")
    finally:
        os.close(fd)
    said = done.stderr.decode()
    assert done.returncode == 1, said
    assert "holds the state directory" in said
    assert "did not appear within 0.5 s: it is still starting (try again in a moment)" in said
