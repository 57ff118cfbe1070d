"""Follow streams whose clients stop reading, against a real ``inferactors run`` whose
server writes output steadily: raw sockets subscribed to ``logs`` and ``events`` that never
read, and an ``inferactors logs -f`` whose stdout is a pipe nobody reads (a paused pager).

SIGTERM still ends the supervisor within its stop and its one-second grace (before, the
blocked writes kept it alive for ever after its servers stopped, and a second SIGTERM did
nothing); a second SIGTERM during a long shutdown cuts those clients at once."""

from __future__ import annotations

import array
import fcntl
import os
import signal
import socket
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from cli.run_support import RunProcess
from inferactors.testing import FakeServerFaults, RuntimeKit
from inferactors.testing._fake_launch import write_fake_server_program
from inferactors.testing._fake_processes import free_port
from service.fleet_support import Entry, RunFile

CHATTY = 200_000.0
"""Bytes a second of the server's log lines: a verbose server, not a flood."""


def chatty_run(kit: RuntimeKit, **faults: object) -> RunFile:
    program = write_fake_server_program(
        kit.root / "chatty-server",
        faults=FakeServerFaults(flood_bytes_per_s=CHATTY, **faults),  # type: ignore[arg-type]
        python=kit.workspace.python,
        sys_path=kit.workspace.sys_path,
    )
    run = RunFile.create(kit)
    run.write(Entry("a", free_port()), program=program)
    return run


def stalled_socket(sock_path: Path, target: str) -> socket.socket:
    """A client that asks for ``target`` and then never reads (a small receive buffer)."""
    client = socket.socket(socket.AF_UNIX)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(str(sock_path))
    client.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return client


@contextmanager
def stalled_clients(run: RunFile) -> Iterator[tuple[list[socket.socket], int]]:
    """Two raw sockets (logs and events, followed) and a ``logs -f`` piped to nobody (the
    pipe's reading end is yielded with the sockets)."""
    sock_path = run.kit.root / "state" / "control.sock"
    with ExitStack() as stack:
        sockets = [
            stack.enter_context(stalled_socket(sock_path, target))
            for target in ("/v1/instances/a/logs?follow=1&lines=1000", "/v1/events?follow=1")
        ]
        unread, pager = os.pipe()
        argv = [sys.executable, "-m", "inferactors", "logs", "-f", "a", str(run.path)]
        follower = subprocess.Popen(argv, stdout=pager, stderr=subprocess.DEVNULL)
        os.close(pager)
        try:
            yield sockets, unread
        finally:
            follower.kill()
            follower.wait()
            os.close(unread)


def queued(fd: int) -> int:
    """Bytes waiting to be read on ``fd`` (a socket or a pipe)."""
    count = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, count)
    return count[0]


def wait_stalled(sockets: list[socket.socket], unread: int) -> None:
    """Until the logs socket's receive buffer and the ``logs -f`` process's pipe are full
    (the supervisor's writes to both then wait)."""
    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline:
        if queued(sockets[0].fileno()) >= 2048 and queued(unread) >= 60_000:
            time.sleep(2.0)  # the buffers on the supervisor's side fill too (at CHATTY)
            return
        time.sleep(0.2)
    raise AssertionError(f"not stalled: {queued(sockets[0].fileno())}, {queued(unread)} queued")


def drained_to_end(client: socket.socket, within_s: float) -> bool:
    """Whether ``client`` reaches its end (EOF or a reset) within ``within_s``, reading
    what was queued."""
    client.settimeout(0.2)
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if client.recv(1 << 16) == b"":
                return True
        except TimeoutError:
            continue
        except ConnectionResetError:
            return True
    return False


# Not exclusive: its bound (8 s for the server's stop and the 1 s grace) is seconds above
# what a loaded machine takes, and what it catches never ends (the wait's 20 s timeout).
def test_stalled_followers_do_not_hold_the_supervisor_after_sigterm(
    inferactors_kit: RuntimeKit,
) -> None:
    run = chatty_run(inferactors_kit)
    supervisor = RunProcess.start(run.path)
    try:
        supervisor.wait_for("supervising 1 of 1 instance(s)")
        with stalled_clients(run) as (sockets, unread):
            wait_stalled(sockets, unread)
            began = time.monotonic()
            supervisor.process.send_signal(signal.SIGTERM)
            code = supervisor.process.wait(timeout=20)
            took = time.monotonic() - began
            assert all(drained_to_end(client, 5.0) for client in sockets)
    finally:
        supervisor.finish()
    assert code == 0, supervisor.output()
    assert took < 8.0, f"{took:.1f} s"  # the server's stop, then the 1 s grace


# Not exclusive: it waits out a 10 s stop grace, and its one bound (what is left to read
# after the cut arrives within 3 s) holds on a shared machine.
def test_a_second_sigterm_cuts_stalled_followers_at_once(inferactors_kit: RuntimeKit) -> None:
    # the server ignores SIGTERM: the shutdown waits its 10 s stop grace
    run = chatty_run(inferactors_kit, ignore_sigterm=True)
    supervisor = RunProcess.start(run.path)
    try:
        supervisor.wait_for("supervising 1 of 1 instance(s)")
        with stalled_clients(run) as (sockets, unread):
            wait_stalled(sockets, unread)
            supervisor.process.send_signal(signal.SIGTERM)
            supervisor.wait_for("SIGTERM: stopping managed servers")
            supervisor.process.send_signal(signal.SIGTERM)
            supervisor.wait_for("SIGTERM during shutdown: cutting the control API's clients")
            assert all(drained_to_end(client, 3.0) for client in sockets)
            assert supervisor.process.poll() is None  # the server's grace goes on
        code = supervisor.process.wait(timeout=30)
    finally:
        supervisor.finish()
    assert code == 0, supervisor.output()


def stalled_tcp(port: int, token: str, target: str) -> socket.socket:
    """A client of the TCP listener that asks for ``target`` and then never reads."""
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(("127.0.0.1", port))
    auth = f"Authorization: Bearer {token}\r\n"
    client.sendall(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}\r\n".encode())
    return client


# Not exclusive: as the first test here, 8 s against a supervisor held for ever (30 s).
def test_stalled_page_and_event_streams_on_tcp_do_not_hold_the_supervisor(
    inferactors_kit: RuntimeKit,
) -> None:
    """The page's live stream and log stream, and a followed ``/v1/events`` replayed from
    the start, each read by a TCP client that never reads: SIGTERM still ends the
    supervisor within its stop and the grace."""
    run = chatty_run(inferactors_kit)
    token_file = run.path.parent / "token"
    token = "a-token-of-some-length-0123456789"
    token_file.write_text(token)
    token_file.chmod(0o600)
    port = free_port()
    flags = ("--control-port", str(port), "--control-token-file", str(token_file))
    supervisor = RunProcess.start(run.path, *flags)
    try:
        supervisor.wait_for("supervising 1 of 1 instance(s)")
        targets = ("/ui/api/stream", "/ui/api/instances/a/logs", "/v1/events?follow=1&since=0")
        with ExitStack() as stack:
            sockets = [stack.enter_context(stalled_tcp(port, token, t)) for t in targets]
            deadline = time.monotonic() + 20.0
            while queued(sockets[1].fileno()) < 2048 and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(3.0)  # the supervisor's send buffers fill too
            began = time.monotonic()
            supervisor.process.send_signal(signal.SIGTERM)
            code = supervisor.process.wait(timeout=30)
            took = time.monotonic() - began
    finally:
        supervisor.finish()
    assert code == 0, supervisor.output()
    assert took < 8.0, f"{took:.1f} s"  # the server's stop, then the 1 s grace
