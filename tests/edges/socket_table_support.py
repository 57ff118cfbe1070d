"""A listening process for the socket-table tests, and 2,000 TIME_WAIT sockets.

`listener_process` starts ``python -c`` that binds and listens on ``host:port`` (port 0: a
free one), reports its port on stdout and sleeps; it is killed, and reaped, on exit.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import attrs

_LISTEN = """
import socket, sys, time
host, port = sys.argv[1], int(sys.argv[2])
sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind((host, port))
sock.listen(8)
print(sock.getsockname()[1], flush=True)
time.sleep(600)
"""


@attrs.frozen
class Listening:
    """A listening process: its pid and the port it listens on."""

    pid: int
    port: int


@contextmanager
def listener_process(host: str, port: int = 0) -> Iterator[Listening]:
    """A process listening on ``host:port`` until the block ends (then killed and reaped)."""
    args = [sys.executable, "-c", _LISTEN, host, str(port)]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line, "the listener process exited before it listened"
        yield Listening(process.pid, int(line))
    finally:
        process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def make_time_wait(count: int) -> int:
    """Leave ``count`` client sockets in TIME_WAIT on loopback (the client closes first);
    returns the port of the (closed) server they talked to."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(128)
        port = int(server.getsockname()[1])
        for _ in range(count):
            client = socket.create_connection(("127.0.0.1", port))
            accepted, _ = server.accept()
            client.close()  # the active closer keeps TIME_WAIT
            accepted.close()
    return port
