"""Tests of the fake inference server's life as a real process: a delayed bind, crashes by
exit status or signal (also on a completion, FC-08), SIGTERM obeyed or ignored (FC-11), a
port already taken, an extra listening port, a forked child left in its group, and the
module entry point. Loopback only (127.0.0.1 and 127.0.0.2).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from inferactors._policy.probe_parse import completion_body
from inferactors.testing._fake_faults import FakeServerFaults, Flavor
from inferactors.testing._fake_server import read_request_log
from proc_checks import is_gone
from testing.fake_server_support import CHAT, Fakes, eventually, free_port_on


def test_bind_delay_refuses_connections_until_it_listens(fakes: Fakes, free_port: int) -> None:
    fake = fakes.start(free_port, wait=False, faults=FakeServerFaults(bind_delay_s=1.0))
    with pytest.raises(httpx.ConnectError):
        fake.get("/health")
    assert not (fake.dir / "pid").exists()
    fake.wait_listening()
    assert fake.get("/health").status_code == 200


def test_crash_after_exits_with_the_exit_code(fakes: Fakes, free_port: int) -> None:
    fake = fakes.start(free_port, faults=FakeServerFaults(crash_after_s=1.0, exit_code=3))
    assert fake.get("/health").status_code == 200
    assert fake.returncode() == 3
    assert "inferactors fake server: crash (exit status 3)" in fake.stderr()


@pytest.mark.parametrize("name", ["SIGABRT", "SIGKILL"])
def test_crash_after_dies_of_the_signal(fakes: Fakes, free_port: int, name: str) -> None:
    faults = FakeServerFaults(crash_after_s=0.2, crash_signal=name)
    fake = fakes.start(free_port, faults=faults)
    assert fake.returncode() == -signal.Signals[name]
    assert f"crash ({name})" in fake.stderr()


def test_fc08_dies_of_sigkill_on_its_first_completion(fakes: Fakes, free_port: int) -> None:
    fake = fakes.start(free_port, faults=FakeServerFaults(crash_on_completion="SIGKILL"))
    assert fake.get("/health").status_code == 200
    with pytest.raises(httpx.TransportError):
        fake.post(CHAT, completion_body(None))
    assert fake.returncode() == -signal.SIGKILL
    last = read_request_log(fake.dir / "requests.jsonl")[-1]
    assert (last.method, last.path, last.json()) == ("POST", CHAT, completion_body(None))


@pytest.mark.parametrize(("flavor", "status"), [("llamacpp", 0), ("mlx", -signal.SIGTERM)])
def test_sigterm_ends_it_like_the_real_server(
    fakes: Fakes, free_port: int, flavor: Flavor, status: int
) -> None:
    fake = fakes.start(free_port, flavor=flavor)
    fake.process.terminate()
    assert fake.returncode() == status


def test_fc11_ignores_sigterm_until_sigkill(fakes: Fakes, free_port: int) -> None:
    fake = fakes.start(free_port, faults=FakeServerFaults(ignore_sigterm=True))
    fake.process.terminate()
    time.sleep(0.3)
    assert fake.process.poll() is None
    assert fake.get("/health").status_code == 200
    fake.process.kill()
    assert fake.returncode() == -signal.SIGKILL


def test_port_in_use_exits_with_status_1(fakes: Fakes, free_port: int) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", free_port))
        holder.listen()
        fake = fakes.start(free_port, wait=False)
        assert fake.returncode() == 1
    assert f"cannot listen on 127.0.0.1:{free_port}" in fake.stderr()


def test_extra_port_listens_on_the_requested_host(fakes: Fakes, free_port: int) -> None:
    extra = free_port_on("127.0.0.2")
    faults = FakeServerFaults(extra_port=extra, extra_host="127.0.0.2")
    fake = fakes.start(free_port, faults=faults)
    listening = {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(fake.pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }
    assert listening == {("127.0.0.1", free_port), ("127.0.0.2", extra)}
    assert fakes.client.get(f"http://127.0.0.2:{extra}/health").status_code == 200


def test_fork_child_stays_alive_in_the_same_group(fakes: Fakes, free_port: int) -> None:
    fake = fakes.start(
        free_port,
        faults=FakeServerFaults(fork_child=True),
        child_pid_file=fakes.root / "child.pid",
    )
    child = int((fakes.root / "child.pid").read_text())
    assert psutil.Process(child).ppid() == fake.pid
    assert os.getpgid(child) == os.getpgid(fake.pid) == fake.pid
    ports = {c.laddr.port for c in psutil.Process(child).net_connections(kind="tcp")}
    assert free_port in ports  # it holds the listening socket it inherited
    fake.process.kill()
    assert fake.returncode() == -signal.SIGKILL
    time.sleep(0.2)
    assert not is_gone(child)  # orphaned, still running
    os.killpg(fake.pid, signal.SIGKILL)
    eventually(lambda: is_gone(child))


def test_module_entry_point_runs_the_same_program(
    fakes: Fakes, free_port: int, tmp_path: Path
) -> None:
    where = tmp_path / "module"
    where.mkdir()
    argv = [sys.executable, "-m", "inferactors.testing._fake_server", "--port", str(free_port)]
    fake = fakes.spawn([*argv, "--pid-file", str(where / "pid")], free_port, where)
    assert fake.get("/health").json() == {"status": "ok"}
    fake.process.terminate()
    assert fake.returncode() == 0
