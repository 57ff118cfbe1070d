"""The kernel's LISTEN sockets through a raw netlink ``sock_diag`` socket (Linux).

`SockDiag` sends the kernel an ``inet_diag_req_v2`` (``SOCK_DIAG_BY_FAMILY``, TCP, state
LISTEN only, optionally one source port) for each address family and reads its
``inet_diag_msg`` replies: the bound address, port and socket inode of each listener. The
kernel filters by state and port, so the host's connections and TIME_WAIT sockets cost
nothing. The request and reply layouts are the kernel's ABI (``linux/inet_diag.h``,
``linux/netlink.h``), packed and read with `struct`; pyroute2 decodes the same messages
through its generic netlink classes (about 78 us per listener) and runs an asyncio loop in
the calling thread for each query (0.6 to 0.8 ms of CPU each), where this costs a few
microseconds per listener plus two system calls per family.

The socket is non-blocking and used from the trio thread: the kernel writes the first part
of a dump during the send and the next part during each read, so no read ever waits; a
read that would all the same is given `WAIT_S` at most. Errors are `OSError` (the caller
falls back to psutil).
"""

from __future__ import annotations

import errno
import os
import select
import socket
import struct
from typing import NamedTuple

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
NLMSG_ERROR = 2
NLMSG_DONE = 3
TCP_LISTEN = 10

WAIT_S = 0.2
"""The longest a read waits for the kernel (float seconds); it never should."""

RECEIVE_BYTES = 64 * 1024

_HEADER = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
_REQUEST = struct.Struct("=BBBBI")  # inet_diag_req_v2: family, protocol, ext, pad, states
_SOCKID = struct.Struct("!HH16s16s")  # inet_diag_sockid: sport, dport, src, dst (network order)
_SOCKID_TAIL = struct.Struct("=III")  # inet_diag_sockid: if, cookie[2] (host order)
_MESSAGE = struct.Struct("=BBBB")  # inet_diag_msg: family, state, timer, retrans
_INODE = struct.Struct("=I")
_ERROR = struct.Struct("=i")
_INODE_AT = _HEADER.size + _MESSAGE.size + _SOCKID.size + _SOCKID_TAIL.size + 16
"""Offset of ``idiag_inode`` in a reply: after the sockid come expires, rqueue, wqueue, uid."""
_NO_COOKIE = 0xFFFFFFFF


class Listening(NamedTuple):
    """One LISTEN socket: its bound ``address`` (as the OS prints it), ``port``, ``inode``."""

    address: str
    port: int
    inode: int


def request(family: int, port: int | None, seq: int) -> bytes:
    """The netlink message asking for the TCP LISTEN sockets of ``family`` (on ``port``)."""
    sockid = _SOCKID.pack(port or 0, 0, bytes(16), bytes(16))
    sockid += _SOCKID_TAIL.pack(0, _NO_COOKIE, _NO_COOKIE)
    body = _REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, 1 << TCP_LISTEN) + sockid
    flags = NLM_F_REQUEST | NLM_F_DUMP
    return _HEADER.pack(_HEADER.size + len(body), SOCK_DIAG_BY_FAMILY, flags, seq, 0) + body


def parse(data: bytes, seq: int, found: list[Listening]) -> bool:
    """Append the listeners in one read of replies to ``found``; True at the dump's end.
    Messages of another sequence number (a dump given up earlier) are skipped.

    Raises:
        OSError: the kernel answered the request with an error.
    """
    offset, done = 0, False
    while offset + _HEADER.size <= len(data):
        length, kind, _flags, their_seq, _pid = _HEADER.unpack_from(data, offset)
        if length < _HEADER.size:
            raise OSError(errno.EPROTO, "sock_diag: malformed netlink message")
        if their_seq == seq:
            if kind == NLMSG_DONE:
                done = True
            elif kind == NLMSG_ERROR:
                code = -_ERROR.unpack_from(data, offset + _HEADER.size)[0]
                if code:
                    raise OSError(code, f"sock_diag: {os.strerror(code)}")
            elif kind == SOCK_DIAG_BY_FAMILY and length >= _INODE_AT + _INODE.size:
                found.append(_listening(data, offset))
        offset += (length + 3) & ~3
    return done


def _listening(data: bytes, offset: int) -> Listening:
    family = data[offset + _HEADER.size]
    sport, _dport, source, _dest = _SOCKID.unpack_from(data, offset + _HEADER.size + 4)
    inode = _INODE.unpack_from(data, offset + _INODE_AT)[0]
    raw = source[:4] if family == socket.AF_INET else source
    return Listening(socket.inet_ntop(family, raw), sport, inode)


class SockDiag:
    """One netlink ``sock_diag`` socket, opened at the first query; see the module notes."""

    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self._seq = 0

    def listeners(self, port: int | None = None) -> list[Listening]:
        """The TCP LISTEN sockets of both families (on ``port`` only, when given).

        Raises:
            OSError: netlink sock_diag cannot be used here (not Linux, EPERM, gVisor) or
                the kernel refused the query.
        """
        sock = self._sock or self._open()
        found: list[Listening] = []
        for family in (socket.AF_INET, socket.AF_INET6):
            self._seq = (self._seq + 1) & 0x7FFFFFFF
            sock.send(request(family, port, self._seq))
            while not parse(self._receive(sock), self._seq, found):
                pass
        return found

    def open(self) -> None:
        """Open the socket now (a query opens it too).

        Raises:
            OSError: netlink sock_diag cannot be used here.
        """
        if self._sock is None:
            self._open()

    def close(self) -> None:
        """Close the socket (a later query opens another)."""
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def _open(self) -> socket.socket:
        kind = socket.SOCK_DGRAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC
        sock = socket.socket(socket.AF_NETLINK, kind, NETLINK_SOCK_DIAG)  # type: ignore[attr-defined,unused-ignore]  # Linux only
        try:
            sock.bind((0, 0))
        except OSError:
            sock.close()
            raise
        self._sock = sock
        return sock

    def _receive(self, sock: socket.socket) -> bytes:
        try:
            return sock.recv(RECEIVE_BYTES)
        except BlockingIOError:
            poll = select.poll()
            poll.register(sock, select.POLLIN)
            if not poll.poll(WAIT_S * 1000):
                self.close()  # the dump's rest may still come: start afresh next time
                raise OSError(errno.ETIMEDOUT, "sock_diag: the kernel did not answer") from None
            return sock.recv(RECEIVE_BYTES)
