"""Test helper: a server that leaves a daemon behind the classic way (fork, ``setsid``,
fork), in a new session and process group, ignoring SIGTERM and SIGHUP; the daemon writes
its pid to ``WORKDIR/daemon.pid`` (atomically) and sleeps.

Usage: python late_daemon.py WORKDIR MODE [LINGER]

- ``crash``: listen on 127.0.0.1 at a free port (written to ``WORKDIR/port``), daemonize
  a grandchild that keeps the listening socket, and once it wrote its pid, exit 1: the
  server crashed and its daemon holds the port.
- ``serve``: as ``crash``, but a child subreaper first (as the exec helper makes every
  server), and it keeps running.
- ``on-term``: write ``WORKDIR/ready`` and wait; on SIGTERM daemonize a grandchild, wait
  until it wrote its pid, linger ``LINGER`` seconds (0 by default), exit 0.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
import time
from pathlib import Path
from types import FrameType

PR_SET_CHILD_SUBREAPER = 36


def write(path: Path, text: str) -> None:
    part = path.with_name(path.name + ".part")
    part.write_text(text)
    part.rename(path)


def daemonize(workdir: Path) -> None:
    """Leave a daemon; return once it has written its pid."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            write(workdir / "daemon.pid", str(os.getpid()))
            while True:
                time.sleep(600)
        os._exit(0)
    while not (workdir / "daemon.pid").exists():
        time.sleep(0.005)


def main() -> None:
    workdir, mode = Path(sys.argv[1]), sys.argv[2]
    linger = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the intermediate child reaps itself
    if mode in ("crash", "serve"):
        if mode == "serve":
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(1), 0, 0, 0)
        listener = socket.create_server(("127.0.0.1", 0))
        write(workdir / "port", str(listener.getsockname()[1]))
        daemonize(workdir)
        if mode == "crash":
            os._exit(1)
        while True:
            time.sleep(600)

    def on_term(signum: int, frame: FrameType | None) -> None:
        daemonize(workdir)
        time.sleep(linger)
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    write(workdir / "ready", "1")
    while True:
        time.sleep(600)


if __name__ == "__main__":
    main()
