"""The raw netlink ``sock_diag`` reader (``_edges/sock_diag.py``) against the real kernel:
LISTEN sockets of both families with their inodes, one port or all, the same listeners
psutil sees; and the reply parser on messages built by hand (an error, another dump's
messages, a truncated message)."""

from __future__ import annotations

import errno
import os
import socket
import struct
import sys

import psutil
import pytest

from inferactors._edges.sock_diag import (
    NLMSG_DONE,
    NLMSG_ERROR,
    SOCK_DIAG_BY_FAMILY,
    Listening,
    SockDiag,
    parse,
    request,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="netlink: Linux")


def _ipv6_loopback_works() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "0.0.0.0", pytest.param("::1", marks=pytest.mark.skipif(
        not _ipv6_loopback_works(), reason="no IPv6 loopback"))],
)  # fmt: skip
def test_a_listener_is_read_with_its_inode_and_only_listeners(host: str) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    diag = SockDiag()
    with socket.socket(family) as listening, socket.socket(family) as bound_only:
        listening.bind((host, 0))
        listening.listen(1)
        bound_only.bind((host, 0))  # bound, not listening: not in the table
        port = listening.getsockname()[1]
        inode = os.fstat(listening.fileno()).st_ino
        assert diag.listeners(port) == [Listening(host, port, inode)]
        assert Listening(host, port, inode) in diag.listeners()
        assert diag.listeners(bound_only.getsockname()[1]) == []
    assert diag.listeners(port) == []
    diag.close()


@pytest.mark.exclusive  # the whole host's table, twice: no other test may open a listener
def test_the_whole_table_is_what_psutil_sees() -> None:
    diag = SockDiag()
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        ours = {(item.address, item.port) for item in diag.listeners()}
        theirs = {
            (item.laddr.ip, item.laddr.port)
            for item in psutil.net_connections(kind="tcp")
            if item.status == psutil.CONN_LISTEN and isinstance(item.laddr, tuple) and item.laddr
        }
    diag.close()
    assert ours == theirs


HEADER = struct.Struct("=IHHII")


def _message(kind: int, seq: int, body: bytes) -> bytes:
    message = HEADER.pack(HEADER.size + len(body), kind, 0, seq, 0) + body
    return message + bytes(-len(message) % 4)


def _reply(family: int, address: bytes, port: int, inode: int) -> bytes:
    sockid = struct.pack("!HH16s16s", port, 0, address.ljust(16, b"\0"), bytes(16))
    sockid += struct.pack("=III", 0, 0, 0)
    body = struct.pack("=BBBB", family, 10, 0, 0) + sockid + struct.pack("=5I", 0, 0, 0, 0, inode)
    return _message(SOCK_DIAG_BY_FAMILY, 7, body)


def test_replies_of_another_dump_are_skipped_and_the_end_is_seen() -> None:
    data = (
        _reply(socket.AF_INET, bytes([10, 0, 0, 1]), 8080, 99)
        + _message(SOCK_DIAG_BY_FAMILY, 6, bytes(72))  # left over from a dump given up
        + _reply(socket.AF_INET6, socket.inet_pton(socket.AF_INET6, "::"), 22, 5)
        + _message(NLMSG_DONE, 7, struct.pack("=i", 0))
    )
    found: list[Listening] = []
    assert parse(data, 7, found) is True
    assert found == [Listening("10.0.0.1", 8080, 99), Listening("::", 22, 5)]
    assert parse(_reply(socket.AF_INET, bytes(4), 1, 2), 7, []) is False  # more to come


def test_an_error_reply_is_an_oserror_and_a_malformed_one_too() -> None:
    refused = _message(NLMSG_ERROR, 3, struct.pack("=i", -errno.EPERM) + bytes(16))
    with pytest.raises(OSError, match="sock_diag") as caught:
        parse(refused, 3, [])
    assert caught.value.errno == errno.EPERM
    with pytest.raises(OSError, match="malformed"):
        parse(struct.pack("=IHHII", 4, SOCK_DIAG_BY_FAMILY, 0, 3, 0), 3, [])


def test_the_request_asks_for_tcp_listeners_of_one_port() -> None:
    message = request(socket.AF_INET6, 8090, 42)
    length, kind, flags, seq, _ = HEADER.unpack_from(message)
    assert (length, kind, seq) == (len(message), SOCK_DIAG_BY_FAMILY, 42)
    assert flags == 0x301  # NLM_F_REQUEST | NLM_F_DUMP
    family, protocol, _ext, _pad, states = struct.unpack_from("=BBBBI", message, 16)
    assert (family, protocol, states) == (socket.AF_INET6, socket.IPPROTO_TCP, 1 << 10)
    assert struct.unpack_from("!H", message, 24) == (8090,)
