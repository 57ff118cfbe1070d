"""What a fake server fakes: its options, its faults, the argv that runs it, and its request log.

`FakeServerFaults` and `FakeServerOptions` are the program's flags as values (each field is
its flag with ``-`` for ``_``); `fake_server_argv` builds the command line, and
`parse_fake_server_args` reads it back (the two are inverses). The program and its HTTP
behaviour are in `inferactors.testing._fake_server`; the faults serve issue 3's "Real
processes" tests and the field cases named on each field. Pure: no I/O but
`read_request_log`.

The argv runs the program through a small bootstrap (``python -I -c ...``) that imports it
without running the ``inferactors`` package's ``__init__`` (which imports trio and the whole
library, about 220 ms), so a fake listens about 80 ms after spawn.
``python -m inferactors.testing._fake_server`` runs the same program, only slower to start.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, TypeAlias

import attrs

Flavor: TypeAlias = Literal["llamacpp", "mlx"]

_TESTING_DIR = Path(__file__).resolve().parent


def _non_negative(_: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not value >= 0:  # NaN too
        raise ValueError(f"{attribute.name} must be >= 0, not {value}")


def _signal_name(_: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and value not in signal.Signals.__members__:
        raise ValueError(f"{attribute.name}: unknown signal {value!r} (use a name like SIGABRT)")


def _port(_: object, attribute: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None and not 0 < value < 65536:
        raise ValueError(f"{attribute.name} must be a TCP port (1 to 65535), not {value}")


@attrs.frozen(kw_only=True)
class FakeServerFaults:
    """The faults a fake server injects; each field is the flag with ``-`` for ``_``.

    Durations are float seconds, counted from the moment the server listens (``bind_delay_s``
    from process start). Field defaults inject nothing. Raises ValueError for a negative
    duration or count, an unknown signal name (names are `signal.Signals` names such as
    ``"SIGABRT"``) or a port outside 1 to 65535.

    Attributes:
        load_s: Answer "loading" for this long, then serve (llamacpp: 503; mlx: completions wait).
        load_forever: Load forever (FC-06; with mlx, health 200 and completions hang: FC-07).
        dead_generator: mlx only: the generation thread dies when the load ends (FC-07).
        crash_after_s: Crash this long after listening, with ``exit_code`` or ``crash_signal``.
        exit_code: The exit status of that crash when ``crash_signal`` is None.
        crash_signal: Kill itself with this signal instead (FC-10: ``"SIGABRT"``).
        crash_on_completion: Kill itself with this signal on its first completion (FC-08).
        ignore_sigterm: Ignore SIGTERM; only SIGKILL stops it (FC-05, FC-11).
        hang_completions: Health stays fine, completions never answer (FC-04, FC-07).
        fail_completions_after: The first N completions work, later ones hang.
        extra_port: Also listen (same API) on this port of ``extra_host`` (FC-15 exposure).
        extra_host: The address of ``extra_port``; tests use 127.0.0.1 or 127.0.0.2.
        fork_child: Fork a child that stays alive, in the same process group, holding the
            listening sockets it inherits (FC-12).
        bind_delay_s: Refuse connections (not listening yet) for this long after start.
    """

    load_s: float = attrs.field(default=0.0, validator=_non_negative)
    load_forever: bool = False
    dead_generator: bool = False
    crash_after_s: float | None = attrs.field(default=None, validator=_non_negative)
    exit_code: int = attrs.field(
        default=1, validator=[attrs.validators.ge(0), attrs.validators.le(255)]
    )
    crash_signal: str | None = attrs.field(default=None, validator=_signal_name)
    crash_on_completion: str | None = attrs.field(default=None, validator=_signal_name)
    ignore_sigterm: bool = False
    hang_completions: bool = False
    fail_completions_after: int | None = attrs.field(default=None, validator=_non_negative)
    extra_port: int | None = attrs.field(default=None, validator=_port)
    extra_host: str = "127.0.0.1"
    fork_child: bool = False
    bind_delay_s: float = attrs.field(default=0.0, validator=_non_negative)

    def args(self) -> tuple[str, ...]:
        """Flags for the fields that differ from their defaults, e.g. ``("--load-s", "0.5")``."""
        out: list[str] = []
        for field in attrs.fields(FakeServerFaults):
            value = getattr(self, field.name)
            if value == field.default:
                continue
            flag = "--" + field.name.replace("_", "-")
            out.extend([flag] if value is True else [flag, str(value)])
        return tuple(out)


def _fits_flavor(options: FakeServerOptions, _: object, value: FakeServerFaults) -> None:
    if value.dead_generator and options.flavor != "mlx":
        raise ValueError("dead_generator is an mlx_lm.server fault: use flavor 'mlx'")


@attrs.frozen(kw_only=True)
class FakeServerOptions:
    """Everything the program takes: where it listens, what it serves, where it writes.

    ``alias`` (llamacpp's ``-a``) replaces ``model`` as the id in ``/v1/models``. Raises
    ValueError as `FakeServerFaults` does, and for ``dead_generator`` with flavor llamacpp.
    """

    port: int = attrs.field(validator=_port)
    host: str = "127.0.0.1"
    flavor: Flavor = attrs.field(
        default="llamacpp", validator=attrs.validators.in_(("llamacpp", "mlx"))
    )
    model: str = "tiny.gguf"
    alias: str | None = None
    request_log: Path | None = None
    pid_file: Path | None = None
    child_pid_file: Path | None = None
    faults: FakeServerFaults = attrs.field(factory=FakeServerFaults, validator=_fits_flavor)

    @property
    def model_id(self) -> str:
        """The id ``/v1/models`` lists: ``alias`` if set, else ``model``."""
        return self.alias if self.alias is not None else self.model

    def args(self) -> tuple[str, ...]:
        """The program's command-line arguments (after the program) for these options."""
        out = ["--host", self.host, "--port", str(self.port), "--flavor", self.flavor]
        out += ["--model", self.model]
        named = {"--alias": self.alias, "--request-log": self.request_log}
        named |= {"--pid-file": self.pid_file, "--child-pid-file": self.child_pid_file}
        for flag, value in named.items():
            out += [] if value is None else [flag, str(value)]
        return (*out, *self.faults.args())


def fake_server_argv(
    port: int,
    *,
    flavor: Flavor = "llamacpp",
    model: str = "tiny.gguf",
    faults: FakeServerFaults = FakeServerFaults(),
    python: str = sys.executable,
    host: str = "127.0.0.1",
    alias: str | None = None,
    request_log: Path | None = None,
    pid_file: Path | None = None,
    child_pid_file: Path | None = None,
) -> list[str]:
    """The argv that runs a fake server: ``[python, "-I", "-c", <bootstrap>, "--host", ...]``.

    Example: ``fake_server_argv(port, faults=FakeServerFaults(crash_after_s=0.5, exit_code=3))``.
    ``python`` must have attrs installed. ``-I`` (isolated mode) keeps the caller's
    ``PYTHON*`` variables and working directory out of the program's imports. Raises
    ValueError for invalid options (see `FakeServerOptions`).
    """
    options = FakeServerOptions(
        port=port, host=host, flavor=flavor, model=model, alias=alias, request_log=request_log,
        pid_file=pid_file, child_pid_file=child_pid_file, faults=faults,
    )  # fmt: skip
    return [python, "-I", "-c", _bootstrap(), *options.args()]


def _bootstrap() -> str:
    """Code that registers bare ``inferactors`` and ``inferactors.testing`` packages (their
    ``__init__`` not run), then runs the program's ``main``."""
    packages = (
        ("inferactors", str(_TESTING_DIR.parent)),
        ("inferactors.testing", str(_TESTING_DIR)),
    )
    return (
        "import sys, types\n"
        f"for name, where in {packages!r}:\n"
        "    sys.modules[name] = package = types.ModuleType(name)\n"
        "    package.__path__ = [where]\n"
        "from inferactors.testing._fake_server import main\n"
        "main()\n"
    )


def parse_fake_server_args(argv: Sequence[str]) -> FakeServerOptions:
    """Parse the program's arguments (without the program name) into `FakeServerOptions`.

    The inverse of `FakeServerOptions.args`. Exits with status 2 and a usage message on bad
    arguments (argparse's behaviour).
    """
    parser = _parser()
    namespace = vars(parser.parse_args(list(argv)))
    fault_names = {field.name for field in attrs.fields(FakeServerFaults)}
    try:
        faults = FakeServerFaults(**{k: v for k, v in namespace.items() if k in fault_names})
        return FakeServerOptions(
            **{k: v for k, v in namespace.items() if k not in fault_names}, faults=faults
        )
    except ValueError as exc:
        parser.error(str(exc))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m inferactors.testing._fake_server",
        description="inferactors' fake llama-server / mlx_lm.server with injectable faults.",
    )
    add = parser.add_argument
    add("--host", default="127.0.0.1")
    add("--port", type=int, required=True)
    add("--flavor", choices=("llamacpp", "mlx"), default="llamacpp")
    add("--model", default="tiny.gguf", help="the served model path (mlx: the only one allowed)")
    add("--alias", help="llamacpp: the id /v1/models lists instead of --model")
    for name in ("--request-log", "--pid-file", "--child-pid-file"):
        add(name, type=Path)
    add("--load-s", type=float, default=0.0, help="answer 'loading' for S seconds")
    add("--load-forever", action="store_true", help="load forever (FC-06, FC-07)")
    add("--dead-generator", action="store_true", help="mlx: generator dies when loaded")
    add("--crash-after-s", type=float, help="crash S seconds after listening")
    add("--exit-code", type=int, default=1, help="exit status of that crash")
    add("--crash-signal", help="crash by this signal instead (e.g. SIGABRT)")
    add("--crash-on-completion", metavar="SIGNAL", help="die on the first completion (FC-08)")
    add("--ignore-sigterm", action="store_true", help="ignore SIGTERM (FC-05, FC-11)")
    add("--hang-completions", action="store_true", help="never answer completions (FC-04)")
    add("--fail-completions-after", type=int, metavar="N", help="hang after N completions")
    add("--extra-port", type=int, help="also listen on this port (of --extra-host)")
    add("--extra-host", default="127.0.0.1")
    add("--fork-child", action="store_true", help="fork a child that stays alive (FC-12)")
    add("--bind-delay-s", type=float, default=0.0, help="listen only after S seconds")
    return parser


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


def read_request_log(path: Path) -> tuple[LoggedRequest, ...]:
    """Every complete line of a ``--request-log`` file, oldest first; () if there is no file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ()
    lines = text.split("\n")[:-1]  # a last line without its newline is still being written
    return tuple(LoggedRequest(**json.loads(line)) for line in lines)
