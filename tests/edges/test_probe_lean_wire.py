"""The lean probe wire (``probe_h11``) against real loopback servers: a Python
``http.server`` fake in HTTP/1.0 and HTTP/1.1, and keep-alive servers that drop, reset,
close after N answers, close when idle, or answer slowly; each request leaves in one write
on a ``TCP_NODELAY`` socket; an encoded or oversized reply never leaves its connection to be
reused; new connections are paced per trio run (under MockClock)."""

from __future__ import annotations

import os
import socket

import pytest
import trio
import trio.testing

from edges.hostile_server_support import Reply, bomb, hostile_server
from edges.http_server_support import Version, http_server
from edges.keepalive_support import keepalive_server
from inferactors._edges import probe_h11_conn
from inferactors._edges.probe import MAX_BODY_BYTES, ProbeClient, ProbeFailure
from inferactors._edges.probe_connect import (
    RECONNECT_BURST,
    RECONNECTS_PER_S,
    connect_pacer,
    tcp_connect,
)
from inferactors._edges.probe_h11 import H11Wire
from inferactors._flavor import InferFlavor
from inferactors._policy.probe_report import Unreachable, Up


@pytest.mark.parametrize(("version", "connections"), [("HTTP/1.0", 10), ("HTTP/1.1", 1)])
async def test_an_http_server_fake_is_probed_in_both_versions(
    version: Version, connections: int
) -> None:
    with http_server(version) as server:
        port = server.server_address[1]
        async with ProbeClient.open(f"http://127.0.0.1:{port}", timeout_s=5.0) as probe:
            assert isinstance(probe.wire, H11Wire)
            for _ in range(5):
                report = await probe.report(InferFlavor.MLX_LM)
                assert (report.health, report.models) == (Up(), ("tiny.gguf",))
        assert server.paths == ["/health", "/v1/models"] * 5
        assert server.connections == connections  # HTTP/1.0 closes after each reply


async def test_each_request_leaves_in_one_write_on_a_nodelay_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writes: list[bytes] = []
    nodelay: list[int] = []
    sockets: list[int] = []

    def recorded(fd: int, data: bytes | memoryview) -> int:
        if fd in sockets:
            writes.append(bytes(data))
        return os.write(fd, data)

    monkeypatch.setattr(probe_h11_conn, "_write", recorded)
    async with keepalive_server() as server:
        connect = tcp_connect("127.0.0.1", server.port)

        async def spying() -> trio.abc.Stream:
            stream = await connect()
            assert isinstance(stream, trio.SocketStream)
            nodelay.append(stream.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            sockets.append(stream.socket.fileno())
            return stream

        async with ProbeClient.open(server.base_url, timeout_s=2.0, connect=spying) as probe:
            await probe.report(InferFlavor.LLAMACPP)
            await probe.post_json("/v1/chat/completions", {"max_tokens": 1})
    assert [write.split(b" ", 2)[:2] for write in writes] == [
        [b"GET", b"/health"],
        [b"GET", b"/v1/models"],
        [b"POST", b"/v1/chat/completions"],
    ]
    assert writes[2].endswith(b'\r\n\r\n{"max_tokens":1}')  # the body in the same write
    assert nodelay
    assert all(nodelay)


async def test_a_stream_that_is_no_socket_is_spoken_to_through_its_own_methods() -> None:
    """The lean path (writes and reads on the descriptor) is for trio sockets only: any
    other stream (here an in-memory pair, as tests inject) is sent and read as a stream."""
    ours, theirs = trio.testing.memory_stream_pair()
    reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"

    async def serve() -> None:
        asked = b""
        while not asked.endswith(b"\r\n\r\n"):
            asked += await theirs.receive_some()
        await theirs.send_all(reply)

    async def connect() -> trio.abc.Stream:
        return ours

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        wire = H11Wire.open("http://127.0.0.1:9", timeout_s=2.0, connect=connect)
        try:
            deadline = trio.current_time() + 2.0
            assert await wire.exchange("GET", "/health", None, deadline) == (200, b"{}")
        finally:
            await wire.aclose()


async def test_a_reset_on_a_kept_connection_is_retried_once_for_a_get() -> None:
    async with (
        keepalive_server(drop="reset-reused") as server,
        ProbeClient.open(server.base_url, timeout_s=2.0) as probe,
    ):
        assert (await probe.get("/health"))[0] == 200
        assert (await probe.get("/health"))[0] == 200  # reset, then sent again
        status, _ = await probe.post_json("/v1/chat/completions", {"max_tokens": 1})
        assert status == 200  # on a connection of its own: never a reused one
    assert server.requests == [
        (1, "GET", "/health", True),
        (1, "GET", "/health", False),
        (2, "GET", "/health", True),
        (3, "POST", "/v1/chat/completions", True),
    ]


async def test_a_server_that_closes_after_n_answers_costs_no_failure() -> None:
    async with (
        keepalive_server(close_after=3) as server,
        ProbeClient.open(server.base_url, timeout_s=2.0) as probe,
    ):
        for _ in range(5):
            report = await probe.report(InferFlavor.LLAMACPP)
            assert report.health == Up()
            await trio.sleep(0.01)
    assert all(answered for *_, answered in server.requests)
    assert server.connections == 4  # 10 requests, 3 per connection


async def test_a_connection_the_server_closed_while_idle_is_not_used_again() -> None:
    async with (
        keepalive_server(idle_close_s=0.1) as server,
        ProbeClient.open(server.base_url, timeout_s=2.0) as probe,
    ):
        for _ in range(3):
            assert (await probe.report(InferFlavor.LLAMACPP)).health == Up()
            await trio.sleep(0.3)  # the server closes it meanwhile; we see it readable
    assert server.connections == 3
    assert all(answered for *_, answered in server.requests)  # nothing sent into a close


@pytest.mark.parametrize(("timeout_s", "kind"), [(0.2, "timeout"), (2.0, None)])
async def test_slow_replies_time_out_or_arrive(timeout_s: float, kind: str | None) -> None:
    async with (
        keepalive_server(delay_s=0.5) as server,
        ProbeClient.open(server.base_url, timeout_s=timeout_s) as probe,
    ):
        if kind is None:
            assert (await probe.get("/health"))[0] == 200
        else:
            with pytest.raises(ProbeFailure) as caught:
                await probe.get("/health")
            assert caught.value.kind == kind


@pytest.mark.parametrize(
    "reply",
    [
        Reply(headers=(("Content-Encoding", "gzip"),), body=bomb("gzip")),
        Reply(body=b"x" * (MAX_BODY_BYTES + 1)),
        Reply(headers=(("Content-Length", str(MAX_BODY_BYTES + 1)),), body=b"x"),
    ],
)
async def test_a_refused_reply_never_leaves_its_connection_for_the_next_request(
    reply: Reply,
) -> None:
    opened: list[int] = []
    async with hostile_server({"/bad": reply, "/health": Reply(body=b"{}")}) as server:
        connect = tcp_connect("127.0.0.1", server.port)

        async def counted() -> trio.abc.Stream:
            opened.append(1)
            return await connect()

        async with ProbeClient.open(server.base_url, timeout_s=5.0, connect=counted) as probe:
            with pytest.raises(ProbeFailure):
                await probe.get("/bad")
            assert await probe.get("/health") == (200, b"{}")
    assert len(opened) == 2


async def test_new_connections_are_paced_per_run(autojump_clock: trio.testing.MockClock) -> None:
    opened_at: list[float] = []

    async def connect_at() -> trio.abc.Stream:
        opened_at.append(trio.current_time())
        ours, _theirs = trio.testing.memory_stream_pair()
        return ours

    count = int(RECONNECT_BURST) + 200
    assert connect_pacer() is connect_pacer()  # one per run
    async with trio.open_nursery() as nursery:
        for _ in range(count):
            wire = H11Wire.open("http://127.0.0.1:9", timeout_s=5.0, connect=connect_at)
            nursery.start_soon(wire._new, trio.CancelScope())
    assert opened_at.count(0.0) == RECONNECT_BURST
    assert max(opened_at) == pytest.approx(200 / RECONNECTS_PER_S)


@pytest.mark.skipif(not hasattr(socket, "TCP_QUICKACK"), reason="TCP_QUICKACK: Linux only")
async def test_every_read_asks_for_a_quick_ack(monkeypatch: pytest.MonkeyPatch) -> None:
    """An ``http.server`` writes a reply's head and body apart with Nagle on: our delayed ACK
    of the head would hold the body 40 ms, so each read first asks for a quick ACK."""
    reads: list[int] = []
    quickacks: list[int] = []
    sockets: list[int] = []

    def counted(fd: int, size: int) -> bytes:
        if fd in sockets:
            reads.append(len(quickacks))
        return os.read(fd, size)

    monkeypatch.setattr(probe_h11_conn, "_read", counted)
    with http_server("HTTP/1.1") as server:
        port = server.server_address[1]
        connect = tcp_connect("127.0.0.1", port)

        async def spying() -> trio.abc.Stream:
            stream = await connect()
            assert isinstance(stream, trio.SocketStream)
            setsockopt = stream.socket.setsockopt

            def recorded(level: int, option: int, value: int) -> None:
                if (level, option, value) == (socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1):
                    quickacks.append(len(reads))
                setsockopt(level, option, value)

            stream.socket.setsockopt = recorded  # type: ignore[method-assign,assignment]
            sockets.append(stream.socket.fileno())
            return stream

        base = f"http://127.0.0.1:{port}"
        async with ProbeClient.open(base, timeout_s=5.0, connect=spying) as probe:
            for _ in range(3):
                assert (await probe.report(InferFlavor.LLAMACPP)).health == Up()
    assert reads
    assert reads == list(range(1, len(reads) + 1))  # each read right after its quick ACK


async def test_a_refused_connect_after_our_pacer_waited_is_a_verdict_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Our pacer's wait is ours: it moves the request's deadline, so a dead server's refusal
    after it is judged at once, and a healthy server still has its whole budget. Before, a
    wait longer than the deadline ended the probe as "no complete reply" (a false timeout)
    without a connect, and at 1,000 servers dead ones were found 19 to 28 s late."""
    pacer = connect_pacer()
    pacer.reserve()
    for _ in range(int(RECONNECT_BURST) + 3000):  # 3 s of other probes' connects ahead
        pacer.reserve()

    async def refused() -> trio.abc.Stream:
        await trio.lowlevel.checkpoint()
        raise ConnectionRefusedError(111, "Connection refused")

    started = trio.current_time()
    async with ProbeClient.open("http://127.0.0.1:9", timeout_s=2.0, connect=refused) as probe:
        report = await probe.report(InferFlavor.LLAMACPP)
    health = report.health
    assert isinstance(health, Unreachable)
    assert not health.overloaded
    assert "refused" in health.why.lower()
    assert trio.current_time() - started == pytest.approx(3.0, abs=0.01)  # the pacer only


async def test_a_connection_idle_a_moment_is_reused_unlooked_and_a_closed_one_still_retried() -> (
    None
):
    """A probe's second GET follows its first at once: the kept connection is taken without
    a look at whether the server closed it (`UNLOOKED_IDLE_S`); one that sat longer is
    looked at first. Either way a GET that meets a closed connection is sent once more on
    a fresh one, so the server's answer is what the caller gets."""
    left, right = trio.socket.socketpair()
    conn = probe_h11_conn.Connection.of(trio.SocketStream(left))
    right.close()  # the server closed it while it sat idle: readable (EOF)
    now = trio.current_time()
    conn.idle_since = now - probe_h11_conn.UNLOOKED_IDLE_S / 2
    assert conn.fresh_for_reuse(now)  # not looked at
    conn.idle_since = now - probe_h11_conn.UNLOOKED_IDLE_S * 2
    assert not conn.fresh_for_reuse(now)  # looked at: closed
    await conn.stream.aclose()

    async with (
        keepalive_server(close_after=1) as server,  # closes after each answer
        ProbeClient.open(server.base_url, timeout_s=2.0) as probe,
    ):
        report = await probe.report(InferFlavor.LLAMACPP)  # /v1/models meets it closed
        assert (report.health, report.models) == (Up(), ("tiny.gguf",))
    assert [path for _, _, path, answered in server.requests if answered] == [
        "/health",
        "/v1/models",
    ]
    assert server.connections == 2


async def test_two_gets_at_once_keep_one_connection_and_close_the_other() -> None:
    """The wire keeps one connection: a second one, opened while the first was busy, is
    closed when its reply is in, never dropped open for the collector to find."""
    opened: list[trio.SocketStream] = []
    async with keepalive_server() as server:
        connect = tcp_connect("127.0.0.1", server.port)

        async def recording() -> trio.abc.Stream:
            stream = await connect()
            assert isinstance(stream, trio.SocketStream)
            opened.append(stream)
            return stream

        async with ProbeClient.open(server.base_url, timeout_s=2.0, connect=recording) as probe:
            async with trio.open_nursery() as nursery:
                for path in ("/health", "/v1/models"):
                    nursery.start_soon(probe.get, path)
            assert len(opened) == 2
            assert sorted(stream.socket.fileno() == -1 for stream in opened) == [False, True]
        assert all(stream.socket.fileno() == -1 for stream in opened)  # aclose: the kept one
