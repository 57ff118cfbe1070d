"""The fake server program's tie to the process that started it (its launcher).

The fake exits when its launcher dies (`exit_if_orphaned`, checked every `SLICE_S`), and
the child it forks for FC-12 (`fork_child`) exits then too, though it outlives the fake
itself; so a test runner killed by SIGTERM, or a script that never calls ``stop()``,
leaves no fake behind. Not a parent-death signal: the kernel sends that when the *thread*
that forked ends (a trio worker thread, say), not the process.

The launcher is the parent, unless the fake runs inside a session that a wrapper leads
(a managed server's ``sh`` that forks it, FC-12): then it is whoever started that session
(the supervisor), so a wrapper that dies first does not end the fake. Watched through a
pidfd. Like the program, imports nothing of the ``inferactors`` package.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from pathlib import Path

SLICE_S = 0.05
"""How often the program checks its launcher (and its pending crash) in seconds."""


class Launcher:
    """The process that started the fake, watched for its exit."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._handle: int | None = None
        self._gone = False
        try:
            self._handle = os.pidfd_open(pid)
        except ProcessLookupError:
            self._gone = True
        except OSError:
            pass  # no pidfd here: `gone` polls

    @classmethod
    def find(cls) -> Launcher:
        """Our parent; or, in a session a wrapper of ours leads, the parent of the nearest
        ancestor outside our process group (the process that started the session)."""
        pid, group = os.getppid(), os.getpgrp()
        if os.getsid(0) == group:  # something started this tree as a unit (setsid)
            while pid > 1 and _group_of(pid) == group:
                pid = _parent_of(pid)
        return cls(pid)

    def gone(self) -> bool:
        """Whether it has exited."""
        if self._gone or self._handle is None:
            return self._gone or not _exists(self.pid)
        return bool(select.select([self._handle], [], [], 0)[0])

    def wait(self) -> None:
        """Return once it has exited."""
        while not self.gone():
            time.sleep(SLICE_S)


def _group_of(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return -1


def _parent_of(pid: int) -> int:
    """The parent of ``pid`` (1 when it cannot be read)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 1


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's: it exists
    return True


def fork_child(launcher: Launcher | None) -> int:
    """Fork a child that sleeps until a signal ends it or ``launcher`` exits, in our process
    group, holding our listening sockets; return its pid. It outlives us (FC-12), not our
    launcher (None: it waits only for a signal)."""
    pid = os.fork()
    if pid == 0:
        try:
            while launcher is None:
                signal.pause()
            launcher.wait()
        finally:
            os._exit(0)
    return pid


def sleep_watching(seconds: float, launcher: Launcher | None) -> None:
    """Sleep ``seconds``, exiting early if ``launcher`` dies."""
    deadline = time.monotonic() + seconds
    while (left_s := deadline - time.monotonic()) > 0:
        time.sleep(min(SLICE_S, left_s))
        exit_if_orphaned(launcher)


def exit_if_orphaned(launcher: Launcher | None) -> None:
    """Exit (status 0) if ``launcher`` is gone: a test runner killed by SIGTERM or a
    script that never called ``stop()`` leaves no fake behind. None: never
    (``--outlive-parent``)."""
    if launcher is not None and launcher.gone():
        print("inferactors fake server: its launcher is gone: exiting", file=sys.stderr, flush=True)
        os._exit(0)
