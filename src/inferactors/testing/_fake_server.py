"""The fake inference server program with injectable faults.

Its flags are `FakeServerOptions` and `FakeServerFaults`, and what it answers is decided by
the pure functions of ``_fake_answers``; this module is the I/O: the process, its signals
and its files, around its HTTP side, ``_fake_http`` (the standard library's
``ThreadingHTTPServer``, one thread per connection, so a hung request hangs only itself).
How to run it (`fake_server_argv`,
`write_fake_server_program`) and how to read what it logged (`read_request_log`) is
``_fake_launch``; those names are re-exported here.

Run it through `fake_server_argv`: a small bootstrap (``python -I -c ...``) imports it
without running the ``inferactors`` package's ``__init__`` (which imports trio and the whole
library, about 0.2 s), so a fake listens about 0.1 s after spawn. ``python -m
inferactors.testing._fake_server --port P [flags]`` runs the same program, slower to start.

- Every duration but ``--bind-delay-s`` counts from the moment it listens. Once every socket
  listens it forks the child (``--fork-child``), writes ``--child-pid-file`` then
  ``--pid-file`` (each atomically, by rename), and prints ``inferactors fake server (<flavor>)
  listening on <url> pid <pid>`` on stdout. Relative paths resolve against its working
  directory.
- On stderr it prints the readiness lines of the server it imitates (``_fake_lines``):
  llama-server's ``model loaded`` once its load is over, mlx_lm.server's ``Starting httpd``.
- SIGTERM: flavor ``llamacpp`` exits with status 0 (the real llama-server exits 0 on
  SIGTERM); flavor ``mlx`` dies of the signal: returncode -15, shell status 143, like the real
  mlx_lm.server. ``--ignore-sigterm`` ignores it (FC-05, FC-11). SIGINT
  kills it.
- A crash prints ``inferactors fake server: crash (<signal or exit status>)`` on stderr, then
  kills itself with the signal or exits with the status. Core dumps are off (RLIMIT_CORE 0).
- It exits (status 0) within 0.05 s of the death of the process that started it (its
  parent, or whoever started the session a wrapper of it leads: see ``_fake_parent``), and
  so does the child of ``--fork-child``, so nothing is left when a test runner is killed or
  a script forgets ``stop()``; ``--outlive-parent`` keeps it serving as an orphan (FC-13).
  A runtime that manages it is that process.
- A port it cannot bind: a message on stderr and exit status 1, like llama-server.
- ``--flood-start-bytes``, ``--flood-bytes-per-s``: log floods on stderr (``_fake_flood``;
  ``--flood-stats FILE`` says how long its writes waited on the pipe).
- ``--request-log FILE``: one JSON line per request, appended before the request is acted on
  (so a request that crashes or hangs the server is logged); `read_request_log` reads it.
"""

from __future__ import annotations

import os
import queue
import resource
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import NoReturn

from ._fake_answers import Die
from ._fake_faults import FakeServerOptions, parse_fake_server_args
from ._fake_flood import flood_at_start, start_flood
from ._fake_http import FakeState, Handler, Server, Server6
from ._fake_launch import LoggedRequest as LoggedRequest
from ._fake_launch import fake_server_argv as fake_server_argv
from ._fake_launch import read_request_log as read_request_log
from ._fake_launch import write_fake_server_program as write_fake_server_program
from ._fake_lines import say_ready
from ._fake_parent import SLICE_S as _SLICE_S
from ._fake_parent import Launcher, exit_if_orphaned, fork_child, sleep_watching


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Run the fake server until a signal or a fault ends it (see the module docstring)."""
    launcher = Launcher.find()  # the process that started it: the fake does not outlive it
    options = parse_fake_server_args(sys.argv[1:] if argv is None else argv)
    watched = None if options.faults.outlive_parent else launcher
    _prepare_process(options)
    flood_at_start(options)
    sleep_watching(options.faults.bind_delay_s, watched)
    servers = _listen(options)
    state = FakeState.now_listening(options)
    _announce(options, watched)  # forks before any thread starts
    for server in servers:
        server.state = state
        threading.Thread(target=server.serve_forever, daemon=True).start()
    ready = (options, state.load_left_s())
    threading.Thread(target=say_ready, args=ready, daemon=True).start()
    if options.faults.extra_port is not None and options.faults.extra_after_s > 0:
        threading.Thread(target=_listen_later, args=(state,), daemon=True).start()
    start_flood(options)
    _await_fate(state, watched)


def _prepare_process(options: FakeServerOptions) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if options.faults.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    elif options.flavor == "llamacpp":
        signal.signal(signal.SIGTERM, _exit_cleanly)


def _exit_cleanly(signum: int, frame: FrameType | None) -> None:
    os._exit(0)  # no flush: a signal during a flush would raise "reentrant call"


def _listen(options: FakeServerOptions) -> list[Server]:
    faults = options.faults
    addresses = [(options.host, options.port)]
    if faults.extra_port is not None and faults.extra_after_s == 0:
        addresses.append((faults.extra_host, faults.extra_port))
    servers = []
    for host, port in addresses:
        kind = Server6 if ":" in host else Server
        try:
            servers.append(kind((host, port), Handler))
        except OSError as exc:
            print(
                f"inferactors fake server: cannot listen on {host}:{port}: {exc}", file=sys.stderr
            )
            sys.exit(1)
    return servers


def _listen_later(state: FakeState) -> None:
    """Open the extra port ``extra_after_s`` after listening, and serve it."""
    faults = state.options.faults
    assert faults.extra_port is not None
    time.sleep(faults.extra_after_s)
    kind = Server6 if ":" in faults.extra_host else Server
    try:
        server = kind((faults.extra_host, faults.extra_port), Handler)
    except OSError as exc:
        print(f"inferactors fake server: cannot listen on {faults.extra_port}: {exc}")
        return
    server.state = state
    print(f"inferactors fake server: listening on {faults.extra_host}:{faults.extra_port} too")
    sys.stdout.flush()
    server.serve_forever()


def _announce(options: FakeServerOptions, watched: Launcher | None) -> None:
    if options.faults.fork_child:
        child = fork_child(watched)
        if options.child_pid_file is not None:
            _write_atomically(options.child_pid_file, str(child))
    if options.pid_file is not None:
        _write_atomically(options.pid_file, str(os.getpid()))
    host = f"[{options.host}]" if ":" in options.host else options.host
    url = f"http://{host}:{options.port}"
    print(f"inferactors fake server ({options.flavor}) listening on {url} pid {os.getpid()}")
    sys.stdout.flush()


def _write_atomically(path: Path, text: str) -> None:
    staging = path.with_name(path.name + ".tmp")
    staging.write_text(text, encoding="utf-8")
    staging.rename(path)


def _await_fate(state: FakeState, watched: Launcher | None) -> NoReturn:
    """Wait in the main thread for a crash: ``crash_after_s`` or one a request asked for;
    exit if the launcher ``watched`` dies (checked every 0.05 s)."""
    faults = state.options.faults
    deadline = None
    if faults.crash_after_s is not None:
        deadline = state.listening_at + faults.crash_after_s
    while True:
        # Wait in short slices: Python runs signal handlers (SIGTERM) only in the main
        # thread between bytecodes, which a lock wait without a timeout never reaches.
        slice_s = _SLICE_S if deadline is None else min(_SLICE_S, deadline - time.monotonic())
        try:
            _die(state.fates.get(timeout=max(0.0, slice_s)))
        except queue.Empty:
            exit_if_orphaned(watched)
            if deadline is not None and time.monotonic() >= deadline:
                _die(Die(faults.crash_signal, faults.exit_code))


def _die(fate: Die) -> NoReturn:
    how = fate.signal or f"exit status {fate.exit_code}"
    print(f"inferactors fake server: crash ({how})", file=sys.stderr, flush=True)
    sys.stdout.flush()
    if fate.signal is not None:
        number = signal.Signals[fate.signal]
        if number not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(number, signal.SIG_DFL)  # only the main thread may do this
        os.kill(os.getpid(), number)
        time.sleep(1.0)  # a signal whose default is to go on (SIGCHLD, ...) leaves us here
    os._exit(fate.exit_code)


if __name__ == "__main__":
    main()
