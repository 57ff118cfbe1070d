"""How to run the fake inference server program, and how to read what it logged.

This is the parent's side of ``_fake_server`` (the program itself): `fake_server_argv` builds
the argv that runs it, `write_fake_server_program` writes a ``sh`` script that runs it as a
managed runtime's ``serve_program``, and `read_request_log` reads its ``--request-log``
(one `LoggedRequest` per line). The program imports `LoggedRequest` from here to write that
log, so, like ``_fake_server``, this module imports nothing of the ``inferactors`` package
but its siblings ``_fake_faults`` and this one: the program's bootstrap loads them without
running the package's ``__init__``.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

import attrs

from ._fake_faults import FakeServerFaults, FakeServerOptions, Flavor

_TESTING_DIR = Path(__file__).resolve().parent
_NO_FAULTS = FakeServerFaults()


def fake_server_argv(
    port: int,
    *,
    flavor: Flavor = "llamacpp",
    model: str = "tiny.gguf",
    faults: FakeServerFaults = _NO_FAULTS,
    python: str = sys.executable,
    host: str = "127.0.0.1",
    alias: str | None = None,
    request_log: Path | None = None,
    pid_file: Path | None = None,
    child_pid_file: Path | None = None,
    sys_path: Sequence[str] = (),
    flood_stats: Path | None = None,
) -> list[str]:
    """The argv that runs a fake server: ``[python, "-I", "-c", <bootstrap>, "--host", ...]``.

    ``sys_path`` entries go first on the program's ``sys.path``: for a ``python`` other than
    the one inferactors runs on (e.g. one an unprivileged ``run_as`` user can execute), name
    the directory that holds attrs.

    Example: ``fake_server_argv(port, faults=FakeServerFaults(crash_after_s=0.5, exit_code=3))``.
    ``python`` must have attrs installed. ``-I`` (isolated mode) keeps the caller's
    ``PYTHON*`` variables and working directory out of the program's imports. Raises
    ValueError for invalid options (see `FakeServerOptions`).
    """
    options = FakeServerOptions(
        port=port,
        host=host,
        flavor=flavor,
        model=model,
        alias=alias,
        request_log=request_log,
        pid_file=pid_file,
        child_pid_file=child_pid_file,
        flood_stats=flood_stats,
        faults=faults,
    )
    return [python, "-I", "-c", _bootstrap(tuple(sys_path)), *options.args()]


def write_fake_server_program(
    path: Path,
    *,
    flavor: Flavor = "llamacpp",
    faults: FakeServerFaults = _NO_FAULTS,
    python: str = sys.executable,
    sys_path: Sequence[str] = (),
    request_log: Path | None = None,
    pid_file: Path | None = None,
    child_pid_file: Path | None = None,
    flood_stats: Path | None = None,
) -> Path:
    """Write an executable ``sh`` script at ``path`` that runs the fake server with
    ``faults``, taking the rest of its flags (``-m``/``--model``, ``--host``, ``--port``,
    and llama-server's ``-c``, ``-ctk``, ``-ctv``, ``-md`` and allowlisted flags, which it
    ignores) from its own arguments: a drop-in ``serve_program`` for a managed runtime.
    Mode 0755, so an unprivileged ``run_as`` user can run it. Returns ``path``.
    """
    argv = fake_server_argv(
        1,
        flavor=flavor,
        faults=faults,
        python=python,
        request_log=request_log,
        pid_file=pid_file,
        child_pid_file=child_pid_file,
        sys_path=sys_path,
        flood_stats=flood_stats,
    )
    fixed = [*argv[:4], *_without(argv[4:], ("--host", "--port", "--model"))]
    path.write_text("#!/bin/sh\nexec " + " ".join(shlex.quote(a) for a in fixed) + ' "$@"\n')
    path.chmod(0o755)
    return path


def _without(flags: Sequence[str], dropped: Sequence[str]) -> list[str]:
    """``flags`` minus each ``FLAG VALUE`` pair named in ``dropped`` (the launch passes its own)."""
    rest = list(flags)
    for flag in dropped:
        while flag in rest:
            at = rest.index(flag)
            del rest[at : at + 2]
    return rest


def _bootstrap(sys_path: tuple[str, ...] = ()) -> str:
    """Code that registers bare ``inferactors`` and ``inferactors.testing`` packages (their
    ``__init__`` not run), then runs the program's ``main``."""
    packages = (
        ("inferactors", str(_TESTING_DIR.parent)),
        ("inferactors.testing", str(_TESTING_DIR)),
    )
    return (
        "import sys, types\n"
        f"sys.path[:0] = {list(sys_path)!r}\n"
        f"for name, where in {packages!r}:\n"
        "    sys.modules[name] = package = types.ModuleType(name)\n"
        "    package.__path__ = [where]\n"
        "from inferactors.testing._fake_server import main\n"
        "main()\n"
    )


@attrs.frozen
class LoggedRequest:
    """One line of the request log: seconds since listening, method, path, body text."""

    at_s: float
    method: str
    path: str
    body: str

    def json(self) -> object:
        """The body parsed as JSON, or None when it is empty. Raises ValueError if not JSON."""
        return json.loads(self.body) if self.body else None

    def line(self) -> str:
        """The line in the log: a JSON object with these four fields, and a newline."""
        return json.dumps(attrs.asdict(self)) + "\n"


def read_request_log(path: Path) -> tuple[LoggedRequest, ...]:
    """Every complete line of a ``--request-log`` file, oldest first; () if there is no file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ()
    lines = text.split("\n")[:-1]  # a last line without its newline is still being written
    return tuple(LoggedRequest(**json.loads(line)) for line in lines)
