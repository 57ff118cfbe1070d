"""Test helper: a process that listens on TCP, optionally with a forked child on a second port.

Usage: python net_listen.py READY HOST [CHILD_HOST]

Listens on HOST at a free port. With CHILD_HOST, forks a child that listens on CHILD_HOST at
another free port (the "extra port on 0.0.0.0" of issue 3 item 4); the child closes its
copy of the parent's socket, so each port has exactly one holder. When both listen, writes
READY atomically as JSON: {"pid", "port", "child_pid", "child_port"} (the child fields null
without CHILD_HOST). Then each accepts and closes connections until signalled.

Leaves nothing behind: SIGCHLD is ignored, so the kernel reaps a child that dies first, and
on SIGTERM the parent kills its child, waits for it, and exits 0. The child dies with its
parent (PR_SET_PDEATHSIG) if the parent is SIGKILLed.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import sys
from types import FrameType

_PR_SET_PDEATHSIG = 1
_child_pid: int | None = None


def listen_on(host: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.bind((host, 0))
    sock.listen(8)
    return sock


def on_term(signum: int, frame: FrameType | None) -> None:
    if _child_pid is not None:
        try:
            os.kill(_child_pid, signal.SIGKILL)
            os.waitpid(_child_pid, 0)
        except OSError:
            pass  # already gone and reaped (SIGCHLD is ignored)
    os._exit(0)


def run_child(host: str, report: int) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    sock = listen_on(host)
    os.write(report, str(sock.getsockname()[1]).encode())
    os.close(report)
    serve(sock)


def serve(sock: socket.socket) -> None:
    """Accepts and closes connections forever, like a server would (the queue never fills)."""
    while True:
        connection, _ = sock.accept()
        connection.close()


def fork_child(host: str, inherited: socket.socket) -> tuple[int, int]:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        inherited.close()  # so the parent's port has exactly one holder
        run_child(host, write_end)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as reader:
        port = int(reader.read())
    return pid, port


def write_ready(path: str, info: dict[str, int | None]) -> None:
    staging = path + ".tmp"
    with open(staging, "w") as out:
        json.dump(info, out)
    os.rename(staging, path)


def main(ready: str, host: str, child_host: str | None) -> None:
    global _child_pid
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, on_term)
    sock = listen_on(host)
    child_port = None
    if child_host is not None:
        _child_pid, child_port = fork_child(child_host, sock)
    info = {"pid": os.getpid(), "port": sock.getsockname()[1]}
    write_ready(ready, {**info, "child_pid": _child_pid, "child_port": child_port})
    serve(sock)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
