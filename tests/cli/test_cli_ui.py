"""``inferactors ui`` as a process, in front of the page served over a fake fleet: a port
out of range is a bad argument (one line, exit 2), a taken port one clear line (exit 1),
never a traceback; and Ctrl-C stops it within a second or two even while its clients have
stopped reading (before, a stalled client kept it running after SIGINT)."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from e2e.web_page_fake import FakePage, fake_page
from service.ui_support import PageFleet


def ui(state_dir: Path, *flags: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "inferactors", "ui", "--state-dir", str(state_dir), *flags]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@contextmanager
def served(tmp_path: Path) -> Iterator[FakePage]:
    fleet = PageFleet()
    for number in range(2000):
        fleet.add_line("chat", f"line {number} " + "x" * 200)
    with fake_page(tmp_path, fleet) as page:
        yield page


@pytest.mark.parametrize("port", ["70000", "-1", "http"])
def test_a_port_out_of_range_is_a_bad_argument_in_one_line(tmp_path: Path, port: str) -> None:
    done = ui(tmp_path, "--port", port)
    out, err = done.communicate(timeout=30)
    assert done.returncode == 2, (out, err)
    assert "Traceback" not in err
    assert "--port" in err
    assert "is not a port" in err


def test_a_taken_port_is_said_in_one_line(tmp_path: Path) -> None:
    with served(tmp_path), socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        done = ui(tmp_path, "--port", str(taken))
        out, err = done.communicate(timeout=30)
    assert done.returncode == 1, (out, err)
    assert (
        err.strip() == f"inferactors ui: cannot listen on 127.0.0.1:{taken}: Address already in use"
    )


def stalled(port: int, token: str, target: str) -> socket.socket:
    """A client that asks for ``target`` and then never reads (a small receive buffer)."""
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(("127.0.0.1", port))
    auth = f"Authorization: Bearer {token}\r\n"
    client.sendall(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}\r\n".encode())
    return client


def test_ctrl_c_stops_it_while_its_clients_do_not_read(tmp_path: Path) -> None:
    with served(tmp_path) as page:
        door = ui(tmp_path)
        try:
            assert door.stdout is not None
            door.stdout.readline()
            found = re.search(r"http://127\.0\.0\.1:(\d+)/ui/#token=(\S+)", door.stdout.readline())
            assert found, door.stdout
            port, token = int(found[1]), found[2]
            with ExitStack() as stack:
                for target in ("/ui/api/stream", "/ui/api/instances/chat/logs"):
                    stack.enter_context(stalled(port, token, target))
                page.flood("chat", 500.0, 4.0)  # the door's writes to them wait now
                began = time.monotonic()
                door.send_signal(signal.SIGINT)
                code = door.wait(timeout=20)
                took = time.monotonic() - began
        finally:
            door.kill()
            door.communicate()
    assert code == 0
    assert took < 3.0, f"{took:.1f} s"
