"""Tests of the network edge against real processes and sockets, on loopback only.

Every test here runs with ``INFERACTORS_LAN_ADDRESSES=127.0.0.2`` (autouse fixture), so the
connect check never leaves loopback: a socket bound to ``0.0.0.0`` answers on 127.0.0.2, one
bound to 127.0.0.1 does not. Helper processes (``helpers/net_listen.py``) run in their own
sessions and are stopped, with their whole group, at the end of each test; the fixture fails
the test if any process of the group is left (zombies included).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import psutil
import pytest
import trio
import trio.testing

from inferactors._edges.netscan import (
    LAN_ADDRESSES_ENV,
    NetScanner,
    SystemNetScanner,
    local_addresses,
    owned_by,
    port_owner,
    reachable_on,
    scan,
    tree_listeners,
)
from inferactors._edges.process import ManagedProcess
from inferactors._errors import InvalidConfig
from inferactors._policy.exposure import Exposure, Listener, lan_addresses
from inferactors._policy.lateness import Reach

HELPER = Path(__file__).parents[1] / "helpers" / "net_listen.py"
READY_WAIT_S = 20.0
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def _ipv6_loopback_works() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


def _dual_stack_by_default() -> bool:
    """Whether a socket bound to ``::`` also takes IPv4 (Linux: bindv6only is 0)."""
    flag = Path("/proc/sys/net/ipv6/bindv6only")
    return not flag.exists() or flag.read_text().strip() == "0"


needs_ipv6 = pytest.mark.skipif(not _ipv6_loopback_works(), reason="no IPv6 loopback here")


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The connect check targets 127.0.0.2 only: no test connection leaves loopback."""
    monkeypatch.setenv(LAN_ADDRESSES_ENV, "127.0.0.2")


@attrs.frozen
class Helper:
    """What ``net_listen.py`` reported: its pid and port, and its forked child's."""

    pid: int
    port: int
    child_pid: int | None
    child_port: int | None


def _wait_ready(ready: Path, process: subprocess.Popen[bytes]) -> Helper:
    deadline = time.monotonic() + READY_WAIT_S
    while not ready.exists():
        assert process.poll() is None, f"net_listen.py exited early ({process.returncode})"
        assert time.monotonic() < deadline, "net_listen.py did not get ready in time"
        time.sleep(0.01)
    return Helper(**json.loads(ready.read_text()))


def _group_members(pgid: int) -> list[int]:
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid:
                members.append(process.pid)
        except OSError:
            pass  # gone while we looked
    return members


def _stop_helper(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    deadline = time.monotonic() + 5.0
    while _group_members(process.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _group_members(process.pid) == [], "a helper process was left behind"


StartHelper = Callable[..., Helper]


@pytest.fixture
def start_helper(tmp_path: Path) -> Iterator[StartHelper]:
    """Starts ``net_listen.py HOST [CHILD_HOST]`` in a new session; stops them all afterwards."""
    started: list[subprocess.Popen[bytes]] = []

    def start(host: str, child_host: str | None = None) -> Helper:
        ready = tmp_path / f"ready-{len(started)}.json"
        extra = [] if child_host is None else [child_host]
        args = [sys.executable, str(HELPER), str(ready), host, *extra]
        process = subprocess.Popen(args, start_new_session=True)
        started.append(process)
        return _wait_ready(ready, process)

    try:
        yield start
    finally:
        for process in started:
            _stop_helper(process)


# --- the exposure scan -------------------------------------------------------------------


@pytest.mark.parametrize("wildcard", ["0.0.0.0", pytest.param("::", marks=needs_ipv6)])
async def test_a_wildcard_listener_is_exposed_by_its_socket_and_by_a_connect(
    start_helper: StartHelper, wildcard: str
) -> None:
    if wildcard == "::" and not _dual_stack_by_default():
        pytest.skip("a socket on :: does not take IPv4 on this host")
    helper = start_helper(wildcard)
    exposure = await scan(helper.pid, helper.port)
    expected = Exposure(("127.0.0.2",), (Listener(wildcard, helper.port, helper.pid),), helper.port)
    assert exposure == expected
    assert f"{helper.port} (pid {helper.pid}); reachable on 127.0.0.2:" in exposure.describe()


@pytest.mark.parametrize("loopback", ["127.0.0.1", pytest.param("::1", marks=needs_ipv6)])
async def test_a_loopback_listener_is_not_exposed(start_helper: StartHelper, loopback: str) -> None:
    helper = start_helper(loopback)
    assert tree_listeners(helper.pid) == (Listener(loopback, helper.port, helper.pid),)
    assert await reachable_on(helper.port, ["127.0.0.2"]) == ()
    assert await scan(helper.pid, helper.port) is None


async def test_a_second_port_on_0_0_0_0_from_a_forked_child_is_found_through_the_tree(
    start_helper: StartHelper,
) -> None:
    helper = start_helper("127.0.0.1", "0.0.0.0")
    assert helper.child_pid is not None
    assert helper.child_port is not None
    exposure = await scan(helper.pid, helper.port)
    assert exposure is not None
    assert exposure.reachable_on == ()
    assert Listener("0.0.0.0", helper.child_port, helper.child_pid) in exposure.listeners
    assert all(item.address != "127.0.0.1" for item in exposure.listeners)
    assert f"0.0.0.0:{helper.child_port} (pid {helper.child_pid})" in exposure.describe()


async def test_the_system_scanner_is_a_netscanner_and_scans(start_helper: StartHelper) -> None:
    scanner: NetScanner = SystemNetScanner()
    helper = start_helper("0.0.0.0")
    exposure = await scanner.scan(helper.pid, helper.port)
    assert exposure is not None
    assert exposure.reachable_on == ("127.0.0.2",)
    quiet = start_helper("127.0.0.1")
    assert await scanner.scan(quiet.pid, quiet.port) is None


async def test_another_programs_listener_on_a_lan_address_at_our_port_is_not_our_exposure(
    start_helper: StartHelper,
) -> None:
    scanner = SystemNetScanner()
    ours = start_helper("127.0.0.1")
    with socket.socket() as foreign:  # anyone may listen on 192.0.2.2:P beside 127.0.0.1:P
        foreign.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        foreign.bind(("127.0.0.2", ours.port))
        foreign.listen(8)
        assert await reachable_on(ours.port, ["127.0.0.2"]) == ("127.0.0.2",)  # it answers
        assert await scanner.scan(ours.pid, ours.port) is None  # but it is not ours
    exposed = start_helper("127.0.0.2")  # ours on that address (the tests' LAN): exposed
    exposure = await scanner.scan(exposed.pid, exposed.port)
    assert exposure is not None
    assert exposure.reachable_on == ("127.0.0.2",)


async def test_a_listener_held_by_no_process_at_our_port_is_not_our_exposure(
    start_helper: StartHelper,
) -> None:
    scanner = SystemNetScanner()
    ours = start_helper("127.0.0.1")
    left, right = socket.socketpair()
    with left, right:
        with socket.socket() as listener:  # in flight in a unix message, never received
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.2", ours.port))
            listener.listen(8)
            socket.send_fds(left, [b"x"], [listener.fileno()])
        assert await reachable_on(ours.port, ["127.0.0.2"]) == ("127.0.0.2",)  # it answers
        assert await scanner.scan(ours.pid, ours.port) is None  # but no process of ours has it


def test_tree_listeners_of_a_vanished_process_is_empty() -> None:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    assert tree_listeners(process.pid) == ()


# --- the connect check -------------------------------------------------------------------


def _full_backlog_listener(host: str, port: int) -> list[socket.socket]:
    """A listener on ``host:port`` that never accepts, its queue filled: new SYNs get no answer."""
    server = socket.socket()
    server.bind((host, port))
    server.listen(0)
    filler = socket.create_connection((host, port), timeout=5)
    return [server, filler]


async def test_reachable_on_counts_answering_and_silent_loopback_listeners() -> None:
    with socket.socket() as answering:
        answering.bind(("127.0.0.2", 0))
        answering.listen(8)
        port = answering.getsockname()[1]
        held = _full_backlog_listener("127.0.0.3", port)
        try:
            started = trio.current_time()
            targets = ["127.0.0.3", "127.0.0.4", "127.0.0.2"]
            found = await reachable_on(port, targets)
            elapsed_s = trio.current_time() - started
        finally:
            for sock in held:
                sock.close()
    # A loopback listener whose accept queue is full does not answer: silence is never
    # "reachable" (netcheck.connect_reach: no verdict on loopback); the refused address is
    # not either. The silent one took about 300 ms.
    assert found == ("127.0.0.2",)
    assert 0.25 <= elapsed_s < 5.0


async def test_reachable_on_connects_to_every_address_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    delays_s = {"10.0.0.1": 0.1, "10.0.0.2": 10.0, "10.0.0.3": 0.25, "10.0.0.4": 0.29}
    calls: list[tuple[str, int, float]] = []

    async def fake_connect(host: str, port: int, *, timeout_s: float) -> Reach:
        calls.append((host, port, timeout_s))
        with trio.move_on_after(timeout_s):
            await trio.sleep(delays_s[host])
            return Reach.REACHABLE
        return Reach.NOT_REACHABLE

    started = trio.current_time()
    found = await reachable_on(8090, list(delays_s), connect=fake_connect)
    assert trio.current_time() - started == pytest.approx(0.3)
    assert found == ("10.0.0.1", "10.0.0.3", "10.0.0.4")
    assert sorted(calls) == [(host, 8090, 0.3) for host in sorted(delays_s)]


async def test_reachable_on_tries_each_address_once() -> None:
    calls: list[str] = []

    async def counting_connect(host: str, port: int, *, timeout_s: float) -> Reach:
        calls.append(host)
        return Reach.REACHABLE if host == "10.0.0.2" else Reach.NOT_REACHABLE

    found = await reachable_on(1, ["10.0.0.2", "10.0.0.1", "10.0.0.2"], connect=counting_connect)
    assert found == ("10.0.0.2",)
    assert sorted(calls) == ["10.0.0.1", "10.0.0.2"]


# --- the addresses tried -----------------------------------------------------------------


def test_the_environment_override_is_taken_exactly() -> None:
    environ = {LAN_ADDRESSES_ENV: " 127.0.0.2, ::1,,127.0.0.2 ,10.0.0.1"}
    assert local_addresses(environ) == ("127.0.0.2", "::1", "10.0.0.1")
    assert local_addresses({LAN_ADDRESSES_ENV: ""}) == ()
    assert local_addresses() == ("127.0.0.2",)  # os.environ, set by the autouse fixture


def test_an_override_that_is_not_an_address_is_refused() -> None:
    with pytest.raises(InvalidConfig, match=r"INFERACTORS_LAN_ADDRESSES: 'example.com' is not"):
        local_addresses({LAN_ADDRESSES_ENV: "127.0.0.2,example.com"})


def test_without_the_override_the_interface_addresses_are_used() -> None:
    # Reads the interface table only; no connection is made.
    on_interfaces = [
        item.address
        for items in psutil.net_if_addrs().values()
        for item in items
        if item.family in (socket.AF_INET, socket.AF_INET6)
    ]
    found = local_addresses({})
    assert found == lan_addresses(on_interfaces)
    assert "127.0.0.1" not in found
    assert "::1" not in found
    assert all(not address.startswith("fe80") for address in found)


# --- identity: who listens on our port ---------------------------------------------------


@attrs.frozen
class _Launch:
    program: Path
    args: tuple[str, ...]
    cwd: Path
    env: tuple[tuple[str, str], ...] = (("PATH", "/usr/bin:/bin"),)


async def _wait_ready_async(ready: Path) -> Helper:
    path = trio.Path(ready)
    with trio.fail_after(READY_WAIT_S):
        while not await path.exists():  # noqa: ASYNC110  no trio event can tell us about a file
            await trio.sleep(0.01)
    return Helper(**json.loads(await path.read_text()))


def test_port_owner_finds_the_listening_pid(start_helper: StartHelper) -> None:
    helper = start_helper("127.0.0.1", "0.0.0.0")
    assert helper.child_port is not None
    assert port_owner("127.0.0.1", helper.port) == helper.pid
    assert port_owner("localhost", helper.port) == helper.pid
    assert port_owner("127.0.0.2", helper.port) is None
    assert port_owner("127.0.0.1", helper.child_port) == helper.child_pid
    assert port_owner("127.0.0.5", helper.child_port) == helper.child_pid


def test_port_owner_is_none_for_a_free_port(free_port: int) -> None:
    assert port_owner("127.0.0.1", free_port) is None


@linux_only
async def test_owned_by_tells_our_group_from_an_impostor(
    tmp_path: Path, nursery: trio.Nursery, start_helper: StartHelper
) -> None:
    ready = tmp_path / "ours.json"
    launch = _Launch(
        Path(sys.executable), (str(HELPER), str(ready), "127.0.0.1", "127.0.0.1"), tmp_path
    )
    ours = await ManagedProcess.spawn(nursery, launch)
    try:
        helper = await _wait_ready_async(ready)
        impostor = start_helper("127.0.0.1")
        owner = port_owner("127.0.0.1", helper.port)
        assert owner == ours.pid
        assert owned_by(owner, ours.pgid)
        assert owned_by(port_owner("127.0.0.1", helper.child_port or 0), ours.pgid)
        assert owned_by(helper.child_pid, ours.pgid)
        impostor_pid = port_owner("127.0.0.1", impostor.port)
        assert impostor_pid == impostor.pid
        assert not owned_by(impostor_pid, ours.pgid)
        assert SystemNetScanner().owned_by(owner, ours.pgid)
    finally:
        await ours.terminate(5.0)
    assert _group_members(ours.pgid) == []


def test_owned_by_is_false_for_no_pid_and_for_a_vanished_pid() -> None:
    process = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    process.wait()
    assert not owned_by(None, os.getpgid(0))
    assert not owned_by(process.pid, process.pid)
    assert owned_by(os.getpid(), os.getpgid(0))
