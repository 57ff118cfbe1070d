"""A real ``inferactors run`` speaks systemd's notify protocol (issue 10 item 8).

``NOTIFY_SOCKET`` names a datagram socket this test reads, ``WATCHDOG_USEC`` asks for
pings; two managed fake servers. In order: STATUS lines, READY=1 once
both settled, WATCHDOG=1 every half period, RELOADING=1 with a CLOCK_MONOTONIC
MONOTONIC_USEC on SIGHUP and READY=1 after it, STOPPING=1 on SIGTERM, exit 0.
"""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferactors.testing import write_fake_server_program
from support import Unprivileged, run_as_line

WATCHDOG_USEC = 1_000_000  # pings every 0.5 s
RUN_FILE = """
node_id = "ci"

[managed]
registry = "{registry}"
data_root = "state"
serve_programs = {{ "infer.llamacpp" = "{server}" }}
{run_as}
[[instances]]
mode = "managed"
role = "one"
runtime = "infer.llamacpp"
model = "tiny"
serve = {{ port = {port1} }}

[[instances]]
mode = "managed"
role = "two"
runtime = "infer.llamacpp"
model = "tiny"
serve = {{ port = {port2} }}
"""


class Datagrams:
    """The notifications received, each as (arrival monotonic time, its fields)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.seen: list[tuple[float, dict[str, str]]] = []

    def until(self, key: str, value: str | None = None, timeout_s: float = 30.0) -> dict[str, str]:
        """Read until a notification carries ``key`` (with ``value``); return it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                break
            fields = dict(line.split("=", 1) for line in data.decode().splitlines())
            self.seen.append((time.monotonic(), fields))
            if key in fields and (value is None or fields[key] == value):
                return fields
        pytest.fail(f"no {key}={value or '*'} in {timeout_s} s; seen: {self.seen}")

    def keys(self) -> list[str]:
        return [key for _, fields in self.seen for key in fields]


@pytest.fixture
def datagrams(tmp_path: Path) -> Iterator[Datagrams]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(tmp_path / "notify.sock"))
        yield Datagrams(sock)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


# Not exclusive: the pings' rhythm is the supervisor's own loop answering at once (gaps of
# 0.50-0.52 s seen on a loaded shared machine, against the bound of 0.75 s).
def test_run_notifies_ready_status_watchdog_reload_and_stopping(
    tmp_path: Path,
    datagrams: Datagrams,
    server_dir: Path,
    registry_path: Path,
    unprivileged: Unprivileged,
) -> None:
    program = write_fake_server_program(
        server_dir / "fake", python=unprivileged.python, sys_path=unprivileged.sys_path
    )
    run_file = server_dir / "run.toml"
    run_file.write_text(
        RUN_FILE.format(
            registry=registry_path,
            server=program,
            run_as=run_as_line(unprivileged.run_as),
            port1=_free_port(),
            port2=_free_port(),
        )
    )
    env = {
        **os.environ,
        "NOTIFY_SOCKET": str(tmp_path / "notify.sock"),
        "WATCHDOG_USEC": str(WATCHDOG_USEC),
    }
    with subprocess.Popen(
        [sys.executable, "-m", "inferactors", "run", str(run_file)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as run:
        try:
            ready = datagrams.until("READY", "1")
            assert ready["STATUS"] == "2 of 2 running", datagrams.seen
            pings = [datagrams.until("WATCHDOG", "1") for _ in range(3)]
            assert len(pings) == 3
            before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
            run.send_signal(signal.SIGHUP)
            reloading = datagrams.until("RELOADING", "1")
            after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
            assert before <= int(reloading["MONOTONIC_USEC"]) <= after
            datagrams.until("READY", "1")
            run.send_signal(signal.SIGTERM)
            datagrams.until("STOPPING", "1")
            output, _ = run.communicate(timeout=60)
        finally:
            if run.poll() is None:
                run.kill()
    assert run.returncode == 0, output
    _assert_watchdog_rhythm(datagrams)
    keys = datagrams.keys()
    assert keys.index("READY") < keys.index("RELOADING") < keys.index("STOPPING")
    statuses = [fields["STATUS"] for _, fields in datagrams.seen if "STATUS" in fields]
    assert statuses[-1] == "stopping"


def _assert_watchdog_rhythm(datagrams: Datagrams) -> None:
    """Pings at most 0.75 of WATCHDOG_USEC apart (a healthy tree answers at once)."""
    times = [at for at, fields in datagrams.seen if "WATCHDOG" in fields]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps
    assert max(gaps) < 0.75 * WATCHDOG_USEC / 1e6, gaps
