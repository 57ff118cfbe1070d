"""Shared arrange code for the fake inference server's tests: the chat path, llama-server's
loading reply, a synchronous poll, a free port on a given loopback address, and `Fake` /
`Fakes`, which start the real program in its own session and kill and check every group.

Imported as ``testing.fake_server_support``; the ``fakes`` fixture lives in this folder's
``conftest.py``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import httpx

from inferactors.testing._fake_server import fake_server_argv
from proc_checks import group_members

CHAT = "/v1/chat/completions"
LOADING_BODY = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}


def eventually(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Poll OS or HTTP state until ``predicate`` holds; fail after the (generous) timeout."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"still false after {timeout_s} s: {predicate}"
        time.sleep(0.01)


def free_port_on(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


@attrs.define(eq=False)
class Fake:
    """A running fake server and the files it writes."""

    process: subprocess.Popen[bytes]
    port: int
    dir: Path
    client: httpx.Client

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str) -> httpx.Response:
        return self.client.get(self.url + path)

    def post(self, path: str, body: object, timeout_s: float = 5.0) -> httpx.Response:
        return self.client.post(self.url + path, json=body, timeout=timeout_s)

    def wait_listening(self) -> None:
        """Wait for the pid file, which the fake writes once it listens."""
        eventually(lambda: (self.dir / "pid").exists() or self.process.poll() is not None)
        assert self.process.poll() is None, f"fake exited: {self.stderr()}"
        assert (self.dir / "pid").read_text() == str(self.pid)

    def returncode(self, timeout_s: float = 10.0) -> int:
        return self.process.wait(timeout=timeout_s)

    def stdout(self) -> str:
        return (self.dir / "stdout").read_text()

    def stderr(self) -> str:
        return (self.dir / "stderr").read_text()


@attrs.define(eq=False)
class Fakes:
    """Starts fakes, each in its own session; `close` kills every group and checks it."""

    root: Path
    client: httpx.Client
    started: list[Fake] = attrs.Factory(list)

    def start(self, port: int, *, wait: bool = True, **options: Any) -> Fake:
        where = self.root / f"fake{len(self.started)}"
        where.mkdir()
        argv = fake_server_argv(
            port, request_log=where / "requests.jsonl", pid_file=where / "pid", **options
        )
        return self.spawn(argv, port, where, wait=wait)

    def spawn(self, argv: list[str], port: int, where: Path, *, wait: bool = True) -> Fake:
        with (where / "stdout").open("wb") as out, (where / "stderr").open("wb") as err:
            process = subprocess.Popen(argv, stdout=out, stderr=err, start_new_session=True)
        fake = Fake(process, port, where, self.client)
        self.started.append(fake)
        if wait:
            fake.wait_listening()
        return fake

    def close(self) -> None:
        for fake in self.started:
            try:
                os.killpg(fake.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # the whole group is already gone
            fake.process.wait(timeout=10)
        leaders = [fake.pid for fake in self.started]
        eventually(lambda: not any(group_members(pgid) for pgid in leaders))
