"""The fakes as real processes on free loopback ports, for any test that speaks HTTP.

`start_fake_server` runs the fake llama-server or mlx_lm.server, `start_fake_ollama` the
fake Ollama, each in its own session, playing a `Timeline`; neither needs a runtime, trio
or pytest. Each returns a handle with ``base_url``, ``port`` and ``pid``; ``stop()`` kills
the process group (idempotent), ``restart(timeline)`` plays another timeline on the same
port. Deadlines are float seconds; a fake that does not listen within ``STARTUP_S`` raises
`FakeStartError` with its stderr. The fakes run as the calling user: as root too, since
they are not servers inferactors manages. Each exits on its own when the process that
started it dies (a test runner killed by SIGTERM, a script that never calls ``stop()``).
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import attrs
import httpx

from .._config.config import check_keep_alive
from .._policy.ollama_parse import keep_alive_json
from ._fake_faults import FakeServerFaults, Flavor
from ._fake_launch import LoggedRequest, fake_server_argv, read_request_log
from ._timeline import ForeignKeepAlive, Timeline, check_pulled
from ._workspace import importable_paths

STARTUP_S = 30.0
"""How long a fake may take to listen (it takes about 0.1 s; the margin is for busy CI)."""


class FakeStartError(RuntimeError):
    """A fake did not start listening (its stderr is in the message)."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port of ``host`` that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # the whole group is already gone
    process.wait(timeout=STARTUP_S)
    if process.stdout is not None:
        process.stdout.close()


@attrs.define(eq=False)
class FakeServer:
    """A running fake llama-server (flavor ``llamacpp``) or mlx_lm.server (``mlx``).

    Attributes:
        flavor: which server it imitates.
        port: its 127.0.0.1 port.
        directory: where its pid file, request log and output go.
        timeline: the faults it plays.
        model: the model path it serves (``--model``).
        process: the process (its own session and group).
    """

    flavor: Flavor
    port: int
    directory: Path
    timeline: Timeline
    model: str
    process: subprocess.Popen[bytes]

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The server's pid."""
        return self.process.pid

    def requests(self) -> tuple[LoggedRequest, ...]:
        """Every request it received so far (health probes too), oldest first."""
        return read_request_log(self.directory / "requests.jsonl")

    def returncode(self) -> int | None:
        """Its exit status (negative: killed by that signal), or None while it runs."""
        return self.process.poll()

    def stop(self) -> None:
        """Kill its process group with SIGKILL and reap it (nothing happens if it is gone)."""
        _kill_group(self.process)

    def restart(self, timeline: Timeline | None = None) -> None:
        """Stop it and start it again on the same port, playing ``timeline`` (default: the
        same one).

        Raises:
            InvalidConfig: a step this fake cannot play; raised before anything is stopped,
                so the running fake keeps serving.
            FakeStartError: it did not listen within `STARTUP_S`.
        """
        chosen = timeline or self.timeline
        faults = chosen.server_faults(self.flavor)
        self.stop()
        fresh = _launch_server(self.directory, self.flavor, chosen, faults, self.model, self.port)
        self.process, self.timeline = fresh.process, fresh.timeline


def start_fake_server(
    directory: Path,
    *,
    flavor: Flavor = "llamacpp",
    timeline: Timeline | None = None,
    model: str = "tiny.gguf",
    port: int | None = None,
) -> FakeServer:
    """Start a fake server playing ``timeline`` on ``port`` (None: a free one) of
    127.0.0.1; its files go in ``directory`` (created). Returns once it listens (about
    0.1 s), or at once when the timeline delays listening (`ListenLate`).

    Raises:
        InvalidConfig: a step the fake of ``flavor`` cannot play.
        FakeStartError: it exited or did not listen within `STARTUP_S`.
    """
    chosen = timeline or Timeline()
    return _launch_server(directory, flavor, chosen, chosen.server_faults(flavor), model, port)


def _launch_server(
    directory: Path,
    flavor: Flavor,
    chosen: Timeline,
    faults: FakeServerFaults,
    model: str,
    port: int | None,
) -> FakeServer:
    directory.mkdir(parents=True, exist_ok=True)
    pid_file = directory / "pid"
    pid_file.unlink(missing_ok=True)
    port = port or free_port()
    argv = fake_server_argv(
        port,
        flavor=flavor,
        model=model,
        faults=faults,
        python=sys.executable,
        request_log=directory / "requests.jsonl",
        pid_file=pid_file,
        sys_path=importable_paths(),
    )
    with (directory / "stderr").open("ab") as err:
        process = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True
        )
    fake = FakeServer(flavor, port, directory, chosen, model, process)
    if faults.bind_delay_s == 0:
        _await(lambda: pid_file.exists(), process, directory / "stderr")
    return fake


def _await(ready: Callable[[], bool], process: subprocess.Popen[bytes], stderr: Path) -> None:
    deadline = time.monotonic() + STARTUP_S
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            _kill_group(process)
            text = stderr.read_text(errors="replace") if stderr.exists() else ""
            raise FakeStartError(f"the fake did not start listening: {text.strip()[-2000:]}")
        time.sleep(0.01)


@attrs.define(eq=False)
class FakeOllamaServer:
    """A running fake Ollama daemon (see `inferactors.testing.open_fake_ollama` for the API).

    Attributes:
        port: its 127.0.0.1 port.
        timeline: the faults it plays.
        models: the tags it has pulled.
        process: the process (its own session and group).
    """

    port: int
    timeline: Timeline
    models: tuple[str, ...]
    process: subprocess.Popen[bytes]
    _timers: list[threading.Timer] = attrs.Factory(list)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The daemon's pid."""
        return self.process.pid

    def foreign_keep_alive(self, model: str, keep_alive: str | int = "5m") -> None:
        """Act as a foreign client: load or touch ``model`` with ``keep_alive`` (FC-20):
        whole seconds (``300``, ``"300"``; negative: forever) or a duration (``"5m"``).

        Raises:
            InvalidConfig: ``model`` is not pulled in this fake, or ``keep_alive`` is not
                one Ollama accepts (nothing is sent).
            httpx.HTTPError: the fake did not answer 200 within 30 s.
        """
        check_pulled(model, self.models, "foreign_keep_alive")
        check_keep_alive("foreign_keep_alive keep_alive", keep_alive)
        body = {"model": model, "keep_alive": keep_alive_json(keep_alive)}
        with httpx.Client(trust_env=False, timeout=STARTUP_S) as client:
            client.post(self.base_url + "/api/generate", json=body).raise_for_status()

    def stop(self) -> None:
        """Cancel pending foreign clients, kill the process group and reap it."""
        for timer in self._timers:
            timer.cancel()
        _kill_group(self.process)

    def restart(self, timeline: Timeline | None = None) -> None:
        """Stop it and start it again on the same port with ``timeline`` (default: the same).
        Raises InvalidConfig for a step it cannot play before anything is stopped (the
        running fake keeps serving), FakeStartError if it does not listen in time."""
        (timeline or self.timeline).ollama_config(self.models)
        self.stop()
        fresh = start_fake_ollama(
            timeline=timeline or self.timeline, models=self.models, port=self.port
        )
        self.process, self.timeline, self._timers = fresh.process, fresh.timeline, fresh._timers


def start_fake_ollama(
    *,
    timeline: Timeline | None = None,
    models: tuple[str, ...] = ("tiny:latest",),
    port: int = 0,
) -> FakeOllamaServer:
    """Start a fake Ollama with ``models`` pulled, playing ``timeline``, on ``port`` of
    127.0.0.1 (0: a free one). `ForeignKeepAlive` steps are played from this process, by a
    timer, as a foreign client would. Returns once it listens (about 0.5 s).

    Raises:
        InvalidConfig: a step the fake Ollama cannot play.
        FakeStartError: it exited or did not listen within `STARTUP_S`.
    """
    chosen = timeline or Timeline()
    config = chosen.ollama_config(models)
    argv = [sys.executable, "-m", "inferactors.testing.fake_ollama", "--port", str(port)]
    for tag in config.models:
        argv += ["--model", tag]
    for tag in config.preloaded:
        argv += ["--preloaded", tag]
    argv += [
        "--load-delay",
        str(config.load_delay_s),
        "--unload-linger",
        str(config.unload_linger_s),
    ]
    if config.load_error is not None:
        argv += ["--load-error", config.load_error]
    with tempfile.TemporaryFile() as stderr:
        process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=stderr, start_new_session=True, env=_env()
        )
        fake = FakeOllamaServer(_announced_port(process, stderr), chosen, models, process)
    for step in chosen.foreign_keep_alives():
        fake._timers.append(_later(step, fake))
    return fake


def _env() -> dict[str, str]:
    """Our environment, with our ``sys.path`` as ``PYTHONPATH`` (the program imports us)."""
    return os.environ | {"PYTHONPATH": os.pathsep.join(importable_paths())}


def _later(step: ForeignKeepAlive, fake: FakeOllamaServer) -> threading.Timer:
    timer = threading.Timer(step.after_s, fake.foreign_keep_alive, (step.model, step.keep_alive))
    timer.daemon = True
    timer.start()
    return timer


def _announced_port(process: subprocess.Popen[bytes], stderr: IO[bytes]) -> int:
    """Read ``fake ollama listening on http://127.0.0.1:PORT`` from its stdout."""
    assert process.stdout is not None
    deadline = time.monotonic() + STARTUP_S
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if selector.select(timeout=0.05):
                line = process.stdout.readline().decode(errors="replace")
                if line.startswith("fake ollama listening on"):
                    return int(line.rsplit(":", 1)[1])
                if not line:
                    break
    _kill_group(process)
    stderr.seek(0)
    error = stderr.read().decode(errors="replace")
    raise FakeStartError(f"the fake Ollama did not start listening: {error.strip()[-2000:]}")
