"""A control socket being made again (a supervisor holds the state directory; the socket
file is bound but not yet listening) is waited for within the client's deadline, not
reported as "no supervisor is running" (seen in a full run: the CLI connected between the
supervisor's bind and its listen)."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from inferactors._cli.control_client import EXIT_NO_SUPERVISOR, ControlClient, ControlError
from inferactors._edges.state_lock import acquire_state_lock

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


def _listen_later(sock: socket.socket, after_s: float) -> None:
    time.sleep(after_s)
    sock.listen(1)
    connection, _ = sock.accept()
    with connection:
        connection.recv(65536)
        connection.sendall(ANSWER)


def test_a_socket_bound_but_not_yet_listening_is_waited_for(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    lock = acquire_state_lock(state)
    path = state / "control.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))  # a supervisor between its bind and its listen
        thread = threading.Thread(target=_listen_later, args=(sock, 0.5), daemon=True)
        thread.start()
        try:
            assert ControlClient.open(path, timeout_s=5.0).get("/status") == {}
        finally:
            thread.join(2)
            lock.release()


def test_no_supervisor_holding_the_directory_is_said_at_once(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    path = state / "control.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))  # a stale socket: nobody listens, nobody holds the lock
        began = time.monotonic()
        with pytest.raises(ControlError) as raised:
            ControlClient.open(path, timeout_s=5.0).get("/status")
    assert raised.value.exit_status == EXIT_NO_SUPERVISOR
    assert time.monotonic() - began < 1.0
