"""The control API served by hypercorn on a real Unix socket (and a loopback TCP port):
the socket's mode and lifetime, a stale socket, a second supervisor, peer credentials,
the bearer token, and follow streams that end when the client leaves."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import h11
import httpx
import pytest
import trio

from inferactors._config.convert_api import event_data
from inferactors._edges.state_lock import acquire_state_lock, lock_holder
from inferactors._errors import InvalidConfig, InvalidState
from inferactors._service.control_server import control_socket_path, serve_control
from service.control_support import FakeFleet, crash, follow
from support import Unprivileged

TOKEN = "a-token-of-some-length-0123456789"


def uds_client(state_dir: Path) -> httpx.AsyncClient:
    transport = httpx.AsyncHTTPTransport(uds=str(control_socket_path(state_dir)))
    return httpx.AsyncClient(transport=transport, base_url="http://control", timeout=5.0)


async def wait_for(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Poll ``predicate`` every 10 ms until it holds; fail after ``timeout_s``."""
    for _ in range(int(timeout_s / 0.01)):
        if predicate():
            return
        await trio.sleep(0.01)
    raise AssertionError(f"still false after {timeout_s} s")


async def test_serves_on_a_0600_socket_that_goes_away_when_cancelled(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    state_dir = tmp_path / "state"
    scope = trio.CancelScope()

    async def serve(task_status: trio.TaskStatus[list[str]]) -> None:
        with scope:
            await serve_control(FakeFleet(), state_dir=state_dir, task_status=task_status)

    binds = await nursery.start(serve)
    path = control_socket_path(state_dir)
    assert binds == [f"http://unix:{path}"]
    assert stat.S_ISSOCK(path.lstat().st_mode)
    assert stat.S_IMODE(path.lstat().st_mode) == 0o600
    assert stat.S_IMODE(state_dir.stat().st_mode) == 0o700
    async with uds_client(state_dir) as http:
        reply = await http.get("/v1/instances")
    assert [view["name"] for view in reply.json()["instances"]] == ["chat", "embed"]
    scope.cancel()
    await wait_for(lambda: not path.exists())


async def test_a_removed_state_dir_is_made_again_with_its_mode_and_locked_again(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    state_dir = tmp_path / "state"
    lock = acquire_state_lock(state_dir, 0o711)  # as a runtime whose servers run as nobody
    try:
        await nursery.start(partial(serve_control, FakeFleet(), state_dir=state_dir))
        path = control_socket_path(state_dir)
        shutil.rmtree(state_dir)
        await wait_for(path.exists, timeout_s=5.0)
        assert stat.S_IMODE(state_dir.stat().st_mode) == 0o711
        assert lock_holder(state_dir) == f"pid {os.getpid()}"  # a second supervisor is refused
        async with uds_client(state_dir) as http:
            assert (await http.get("/v1/instances")).status_code == 200
    finally:
        lock.release()


async def test_a_stale_socket_is_replaced(tmp_path: Path, nursery: trio.Nursery) -> None:
    path = control_socket_path(tmp_path)
    with socket.socket(socket.AF_UNIX) as dead:  # bound, never listening: a dead supervisor
        dead.bind(str(path))
    assert path.is_socket()
    await nursery.start(partial(serve_control, FakeFleet(), state_dir=tmp_path))
    async with uds_client(tmp_path) as http:
        assert (await http.get("/livez")).status_code == 200


async def test_a_second_supervisor_is_refused_and_the_first_keeps_serving(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    await nursery.start(partial(serve_control, FakeFleet(), state_dir=tmp_path))
    with pytest.raises(InvalidState, match="another supervisor is already serving"):
        await serve_control(FakeFleet(), state_dir=tmp_path)
    async with uds_client(tmp_path) as http:
        assert (await http.get("/livez")).status_code == 200


async def test_a_file_in_the_sockets_place_is_left_alone(tmp_path: Path) -> None:
    control_socket_path(tmp_path).write_text("mine")
    with pytest.raises(InvalidState, match="is not a socket"):
        await serve_control(FakeFleet(), state_dir=tmp_path)
    assert control_socket_path(tmp_path).read_text() == "mine"


_CONNECT = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
try:
    s.connect(sys.argv[1])
except OSError as error:
    print(f"{type(error).__name__}: {error}")
    sys.exit(1)
s.sendall(b"GET /v1/instances HTTP/1.1\\r\\nhost: x\\r\\nconnection: close\\r\\n\\r\\n")
data = s.recv(65536)
print(data[:12])
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="connecting as another user (runuser) needs root")
async def test_another_user_cannot_connect_and_we_can(
    unprivileged: Unprivileged, nursery: trio.Nursery
) -> None:
    assert unprivileged.run_as is not None  # root's workspace runs servers as nobody
    state_dir = unprivileged.directory("control-peer")
    os.chmod(state_dir, 0o755)  # even a directory open to all: the socket's mode guards it
    await nursery.start(partial(serve_control, FakeFleet(), state_dir=state_dir))
    path = str(control_socket_path(state_dir))
    run_as = ["runuser", "-u", unprivileged.run_as, "--"]
    other = await trio.run_process(
        [*run_as, unprivileged.python, "-c", _CONNECT, path], capture_stdout=True, check=False
    )
    ours = await trio.run_process([unprivileged.python, "-c", _CONNECT, path], capture_stdout=True)
    assert other.stdout.startswith(b"PermissionError"), other
    assert b"HTTP/1.1 200" in ours.stdout, ours.stdout


async def test_tcp_needs_the_bearer_token_and_the_socket_does_not(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    binds = await nursery.start(
        partial(serve_control, FakeFleet(), state_dir=tmp_path, tcp_port=0, token_file=token_file)
    )
    url = binds[1]
    assert url.startswith("http://127.0.0.1:")
    async with httpx.AsyncClient(base_url=url) as http:
        without = await http.get("/v1/instances")
        wrong = await http.get("/v1/instances", headers={"Authorization": "Bearer nope"})
        right = await http.get("/v1/instances", headers={"Authorization": f"Bearer {TOKEN}"})
    async with uds_client(tmp_path) as http:
        local = await http.get("/v1/instances")
    assert (without.status_code, wrong.status_code, right.status_code) == (401, 401, 200)
    assert local.status_code == 200


@pytest.mark.parametrize(
    ("mode", "text", "host", "message"),
    [
        (0o644, TOKEN, "127.0.0.1", "mode 0644 lets group or others use it"),
        (0o600, "short", "127.0.0.1", "at least 16 printable"),
        (0o600, "has a space in it, sadly", "127.0.0.1", "without spaces"),
        (0o600, TOKEN, "0.0.0.0", "is not loopback"),
        (0o600, TOKEN, "localhost", "is not an IP address"),
    ],
)
async def test_tcp_settings_that_are_refused(
    tmp_path: Path, mode: int, text: str, host: str, message: str
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(text)
    token_file.chmod(mode)
    with pytest.raises(InvalidConfig, match=message):
        await serve_control(
            FakeFleet(), state_dir=tmp_path, tcp_port=0, tcp_host=host, token_file=token_file
        )
    assert not control_socket_path(tmp_path).exists()


async def test_a_port_without_a_token_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfig, match="needs a token file"):
        await serve_control(FakeFleet(), state_dir=tmp_path, tcp_port=0)


async def test_log_follow_streams_new_lines_and_ends_when_the_client_leaves(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    fleet = FakeFleet()
    fleet.add_line("chat", "before")
    await nursery.start(partial(serve_control, fleet, state_dir=tmp_path))
    path = control_socket_path(tmp_path)
    async with follow(path, "/v1/instances/chat/logs?follow=1&lines=5") as stream:
        assert stream.status == 200
        assert await stream.next_json() == {
            "at": 1_700_000_000.5,
            "stream": "stderr",
            "pid": 101,
            "text": "before",
            "continued": False,
        }
        assert fleet.open_follows == 1
        fleet.add_line("chat", "after")
        assert (await stream.next_json() or {})["text"] == "after"
    await wait_for(lambda: fleet.open_follows == 0)


async def test_event_follow_streams_and_ends_when_the_client_leaves(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    fleet = FakeFleet()
    await nursery.start(partial(serve_control, fleet, state_dir=tmp_path))
    async with follow(control_socket_path(tmp_path), "/v1/events?follow=1") as stream:
        await wait_for(lambda: fleet.open_follows == 1)
        fleet.add_event(crash())
        event = await stream.next_json() or {}
    assert (event["type"], event["reason"], event["last_lines"]) == (
        "ProcessExited",
        "crash",
        ["boom", "bye"],
    )
    await wait_for(lambda: fleet.open_follows == 0)


async def test_a_follow_ends_when_the_server_is_cancelled(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    fleet = FakeFleet()
    scope = trio.CancelScope()

    async def serve(task_status: trio.TaskStatus[list[str]]) -> None:
        with scope:
            await serve_control(fleet, state_dir=tmp_path, task_status=task_status)

    await nursery.start(serve)
    async with follow(control_socket_path(tmp_path), "/v1/events?follow=1") as stream:
        await wait_for(lambda: fleet.open_follows == 1)
        scope.cancel()
        with trio.fail_after(5), pytest.raises(h11.RemoteProtocolError, match="incomplete"):
            await stream.next_json()  # the connection closes: the stream is cut, not ended
    assert fleet.open_follows == 0


@pytest.mark.parametrize("value", ["1", "true", "YES", "On"])
async def test_follow_on_in_any_usual_word_streams(
    tmp_path: Path, nursery: trio.Nursery, value: str
) -> None:
    fleet = FakeFleet()
    await nursery.start(partial(serve_control, fleet, state_dir=tmp_path))
    async with follow(control_socket_path(tmp_path), f"/v1/events?since=0&follow={value}") as s:
        assert s.status == 200
        await wait_for(lambda: fleet.open_follows == 1)
        fleet.add_event(crash())
        assert (await s.next_json() or {})["type"] == "ProcessExited"


async def test_until_ends_follows_cleanly_with_what_was_queued(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """As ``inferactors run`` stops: the fleet ends its channels after its last events,
    then the server is told to stop; each stream ends as a complete reply."""
    fleet = FakeFleet()
    closed = trio.Event()
    done = trio.Event()

    async def serve(task_status: trio.TaskStatus[list[str]]) -> None:
        await serve_control(fleet, state_dir=tmp_path, until=closed.wait, task_status=task_status)
        done.set()

    await nursery.start(serve)
    path = control_socket_path(tmp_path)
    async with (
        follow(path, "/v1/events?since=0&follow=1") as events,
        follow(path, "/v1/instances/chat/logs?lines=0&follow=1") as logs,
    ):
        await wait_for(lambda: fleet.open_follows == 2)
        crashed = crash()
        fleet.add_event(crashed)
        fleet.add_line("chat", "bye")
        fleet.end_follows()
        closed.set()
        with trio.fail_after(5):
            assert [await events.next_json(), await events.next_json()] == [
                {**event_data(crashed), "name": "chat"},
                None,
            ]
            assert [(await logs.next_json() or {}).get("text"), await logs.next_json()] == [
                "bye",
                None,
            ]
            await done.wait()
    assert not path.exists()


_FLOOD = """
import socket, sys
clients = []
for _ in range(int(sys.argv[2])):  # every connect at once, before any is answered
    s = socket.socket(socket.AF_UNIX)
    s.setblocking(False)
    try:
        s.connect(sys.argv[1])
    except BlockingIOError as error:
        print("refused", error.errno)
        continue
    clients.append(s)
answers = []
for s in clients:
    s.setblocking(True)
    s.settimeout(20)
    s.sendall(b"GET /livez HTTP/1.1\\r\\nhost: x\\r\\nconnection: close\\r\\n\\r\\n")
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    answers.append(data.split(b"\\r\\n", 1)[0].decode())
print(len(answers), sorted(set(answers)))
"""


async def test_200_concurrent_connects_are_all_answered(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    await nursery.start(partial(serve_control, FakeFleet(), state_dir=tmp_path))
    path = str(control_socket_path(tmp_path))
    done = await trio.run_process(
        [sys.executable, "-c", _FLOOD, path, "200"], capture_stdout=True, check=False
    )
    assert done.stdout.decode().splitlines() == ["200 ['HTTP/1.1 200 ']"], done.stdout
