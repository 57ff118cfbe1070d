"""systemd's notify protocol against real ``AF_UNIX`` datagram sockets (issue 10 item 8)."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from inferactors._edges.sd_notify import (
    NullNotifier,
    SocketNotifier,
    monotonic_usec,
    notify_address,
    open_notifier,
    watchdog_interval_s,
)


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "notify")
    sock.bind(path)
    sock.settimeout(5.0)
    with sock:
        yield sock, path


def test_fields_arrive_as_one_datagram_of_lines(receiver: tuple[socket.socket, str]) -> None:
    sock, path = receiver
    notifier = open_notifier({"NOTIFY_SOCKET": path})
    assert isinstance(notifier, SocketNotifier)
    assert notifier.notify(RELOADING=1, MONOTONIC_USEC=42, STATUS="a\nb\rc")
    notifier.close()
    assert sock.recv(4096) == b"RELOADING=1\nMONOTONIC_USEC=42\nSTATUS=a b c\n"


def test_an_abstract_address_starts_with_at() -> None:
    name = f"inferactors-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5.0)
        with closing(open_notifier({"NOTIFY_SOCKET": "@" + name})) as notifier:
            assert notifier.notify(READY=1)
        assert sock.recv(4096) == b"READY=1\n"


@pytest.mark.parametrize("value", [None, "", "relative/path", "vsock:2:1234"])
def test_without_a_unix_address_notifying_is_a_no_op(value: str | None) -> None:
    environ = {} if value is None else {"NOTIFY_SOCKET": value}
    assert notify_address(environ) is None
    notifier = open_notifier(environ)
    assert isinstance(notifier, NullNotifier)
    assert not notifier.notify(READY=1)


def test_a_receiver_that_is_gone_is_not_an_error(tmp_path: Path) -> None:
    with closing(open_notifier({"NOTIFY_SOCKET": str(tmp_path / "nobody-listens")})) as notifier:
        assert not notifier.notify(READY=1)


def test_a_full_queue_drops_the_notification_without_blocking(
    receiver: tuple[socket.socket, str],
) -> None:
    _, path = receiver
    with closing(open_notifier({"NOTIFY_SOCKET": path})) as notifier:
        sent = [notifier.notify(STATUS="x" * 1000) for _ in range(10_000)]
    assert sent[0]
    assert not sent[-1]  # the receiver never reads: its queue filled, we did not block


def test_watchdog_interval_is_half_the_timeout_for_this_process() -> None:
    mine = str(os.getpid())
    assert watchdog_interval_s({"WATCHDOG_USEC": "30000000"}) == 15.0
    assert watchdog_interval_s({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": mine}) == 1.0
    assert watchdog_interval_s({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "1"}) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "0"}) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "soon"}) is None
    assert watchdog_interval_s({}) is None


def test_monotonic_usec_is_clock_monotonic_in_microseconds() -> None:
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    value = monotonic_usec()
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert before <= value <= after
