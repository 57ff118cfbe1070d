"""Servers that daemonize a grandchild, for the tests of "nothing outlives a stop": a serve
program that runs the kit's fake llama-server behind ``helpers/daemon_wrapper.sh`` (fork,
``setsid``, fork; the daemon ignores SIGTERM and SIGHUP and writes ``daemon.pid`` in the
server's working directory, its instance directory), the host situations to run them in,
and the clean-up that leaves no daemon behind whatever the test did."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs

HELPERS = Path(__file__).parent / "helpers"
DAEMON_WRAPPER = HELPERS / "daemon_wrapper.sh"
HOSTS = ("no cgroup", "cgroup")
"""The host situations: no delegated cgroup (this host's default), and a cgroup the test
makes and runs the supervisor's servers under (skipped, saying why, where it cannot)."""


def daemonizing_program(where: Path, server: Path) -> Path:
    """A serve program at ``where`` that daemonizes a grandchild, then runs ``server``
    (``--help`` and ``--version`` go to ``server`` alone: the capability probe starts no
    daemon)."""
    where.write_text(
        "#!/bin/sh\n"
        f'case " $* " in *" --help "*|*" --version "*) exec {server} "$@" ;; esac\n'
        f'exec /bin/sh {DAEMON_WRAPPER} daemon.pid {server} "$@"\n'
    )
    where.chmod(0o755)
    return where


@attrs.define
class Daemons:
    """The daemons a test saw; `cleanup` SIGKILLs any still alive (through a pidfd opened
    while it was known to be that daemon, never a reused pid)."""

    fds: dict[int, int] = attrs.Factory(dict)

    def seen(self, pid: int) -> int:
        """Hold ``pid`` (a daemon just read from its pid file) for the clean-up."""
        try:
            self.fds.setdefault(pid, os.pidfd_open(pid))
        except ProcessLookupError:
            pass
        return pid

    def wait_new(self, instance_dir: Path, timeout_s: float = 30.0) -> int:
        """The pid in ``instance_dir/daemon.pid`` once it names a daemon not seen before."""
        deadline = time.monotonic() + timeout_s
        path = instance_dir / "daemon.pid"
        while time.monotonic() < deadline:
            try:
                pid = int(path.read_text())
            except (OSError, ValueError):
                pid = 0
            if pid and pid not in self.fds:
                return self.seen(pid)
            time.sleep(0.02)
        raise AssertionError(f"no new daemon wrote {path}")

    def cleanup(self) -> None:
        for fd in self.fds.values():
            try:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.close(fd)
        self.fds.clear()


@contextmanager
def daemons_killed_after() -> Iterator[Daemons]:
    """`Daemons`, cleaned up at the end of the block."""
    daemons = Daemons()
    try:
        yield daemons
    finally:
        daemons.cleanup()


def instance_dir(data_root: Path, role: str, timeout_s: float = 30.0) -> Path:
    """The instance directory of ``role`` under ``data_root`` (``<role>-<hash>-<node>``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = sorted(data_root.glob(f"{role}-*/"))
        if found:
            return found[0]
        time.sleep(0.02)
    raise AssertionError(f"no instance directory of {role} under {data_root}")
