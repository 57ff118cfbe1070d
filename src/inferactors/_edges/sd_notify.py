"""systemd's notify protocol: ``KEY=value`` lines in one datagram to ``$NOTIFY_SOCKET``.

Under ``Type=notify`` systemd hands the service an ``AF_UNIX`` datagram
socket's address in ``NOTIFY_SOCKET`` (a path, or an abstract name when it starts with
``@``); each notification is one datagram of newline-separated assignments (``READY=1``,
``STATUS=...``, ``WATCHDOG=1``, ``RELOADING=1``, ``MONOTONIC_USEC=...``, ``STOPPING=1``).
See sd_notify(3). The whole protocol is one ``sendto``, so it is written here rather than
taken from ``sdnotify`` (unmaintained since 2017, synchronous and blocking, errors
swallowed) or ``systemd-python`` (needs libsystemd's headers to build).

`open_notifier` answers a `NullNotifier` when ``NOTIFY_SOCKET`` is unset (not run by
systemd), so callers notify unconditionally. A ``vsock:`` address (systemd in a VM) is
not supported and is treated as unset.

The socket is non-blocking: a notification never blocks the event loop; one that the
receiver's full queue refuses is dropped and `SocketNotifier.notify` answers False.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from typing import Protocol

import attrs

NOTIFY_SOCKET = "NOTIFY_SOCKET"
WATCHDOG_USEC = "WATCHDOG_USEC"
WATCHDOG_PID = "WATCHDOG_PID"


class Notifier(Protocol):
    """Where service notifications go."""

    def notify(self, **fields: str | int) -> bool:
        """Send ``KEY=value`` for each field, in order, as one datagram; True if sent."""
        ...


@attrs.define(eq=False)
class NullNotifier:
    """The notifier when not run by systemd: every notification is a no-op."""

    def notify(self, **fields: str | int) -> bool:
        """Send nothing; answer False."""
        return False

    def close(self) -> None:
        """Nothing to close."""


def _datagram_socket() -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
    sock.setblocking(False)
    return sock


def _one_line(value: str | int) -> str:
    return str(value).replace("\r", " ").replace("\n", " ")


@attrs.define(eq=False)
class SocketNotifier:
    """Notifications to one ``AF_UNIX`` datagram address; `close` it when done."""

    address: str
    _sock: socket.socket = attrs.field(init=False, factory=_datagram_socket)

    def notify(self, **fields: str | int) -> bool:
        """Send the fields as one datagram (newlines in a value become spaces);
        True if sent, False if the receiver is gone or its queue is full."""
        payload = "".join(f"{key}={_one_line(value)}\n" for key, value in fields.items())
        try:
            self._sock.sendto(payload.encode(), self.address)
        except OSError:  # receiver gone, queue full (BlockingIOError), refused
            return False
        return True

    def close(self) -> None:
        """Close the socket."""
        self._sock.close()


def notify_address(environ: Mapping[str, str]) -> str | None:
    """The socket address ``NOTIFY_SOCKET`` names (``@name`` becomes the abstract
    ``\\0name``), or None when it is unset, empty or not an ``AF_UNIX`` address."""
    value = environ.get(NOTIFY_SOCKET, "")
    if value.startswith("@"):
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    return None


def open_notifier(environ: Mapping[str, str] | None = None) -> SocketNotifier | NullNotifier:
    """A notifier for ``NOTIFY_SOCKET`` in ``environ`` (default: this process's
    environment), or a `NullNotifier` when there is none. Opens a socket; never raises."""
    address = notify_address(os.environ if environ is None else environ)
    if address is None:
        return NullNotifier()
    try:
        return SocketNotifier(address)
    except OSError:
        return NullNotifier()


def watchdog_interval_s(environ: Mapping[str, str] | None = None) -> float | None:
    """Half of ``WATCHDOG_USEC`` in float seconds (systemd's advice: ping at half the
    timeout), or None when the watchdog is off, malformed, or meant for another process
    (``WATCHDOG_PID`` set to a pid not ours)."""
    env = os.environ if environ is None else environ
    pid = env.get(WATCHDOG_PID)
    if pid is not None and pid != str(os.getpid()):
        return None
    try:
        usec = int(env.get(WATCHDOG_USEC, ""))
    except ValueError:
        return None
    return usec / 2_000_000 if usec > 0 else None


def monotonic_usec() -> int:
    """``CLOCK_MONOTONIC`` in whole microseconds, as ``MONOTONIC_USEC=`` wants it."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
