"""The ``inferactors`` command: the only place that calls ``trio.run``.

Subcommands: ``demo`` (the embedded default, end to end), ``run CONFIG.toml`` (supervise),
``models ...`` (the model registry), ``llama-server`` (find or build the pinned
llama-server), and ``status``, ``start``, ``stop``, ``restart``, ``logs``, ``events``,
``reload``, which talk to a running supervisor (`control`; exit 3: none is running);
``ui``, which serves its web page on a loopback port (`ui`); and ``completion SHELL`` (a
shell completion script made from this parser by shtab).
Exit status: 0 success, 1 failure, 2 bad input.

The client commands (`CLIENT_COMMANDS`) are parsed by a parser that holds only them
(`client_parser`), so that a call imports only the light modules they need; any other
command line is parsed by the full one (`build_parser`), which imports the rest.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .._errors import InferactorsError, one_line
from .completion import add_completion_command
from .control import register_control_commands
from .probe import add_probe_command

CLIENT_COMMANDS = frozenset(
    {"status", "start", "stop", "restart", "logs", "events", "reload", "probe"}
)
"""The commands that only talk to a running supervisor: parsed by `client_parser`."""


def _top_parser() -> tuple[
    argparse.ArgumentParser, argparse._SubParsersAction[argparse.ArgumentParser]
]:
    parser = argparse.ArgumentParser(
        prog="inferactors",
        description="Keep local LLM inference servers registered, healthy and contained.",
    )
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="print the version of inferactors and exit"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    return parser, subparsers


class _Version(argparse.Action):
    """``--version``: ``inferactors 0.1.0``, looked up only when asked."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from .._version import package_version

        print(f"inferactors {package_version()}")
        parser.exit()


def client_parser() -> argparse.ArgumentParser:
    """A parser of the client commands alone (they parse as in `build_parser`)."""
    parser, subparsers = _top_parser()
    register_control_commands(subparsers)
    add_probe_command(subparsers)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with ``--help`` on every subcommand."""
    from .demo import add_demo_command
    from .models import register_models_commands
    from .run import add_run_command
    from .ui import add_ui_command

    parser, subparsers = _top_parser()
    add_demo_command(subparsers)
    add_run_command(subparsers)
    register_control_commands(subparsers)
    register_models_commands(subparsers)
    add_probe_command(subparsers)
    add_ui_command(subparsers)
    build = subparsers.add_parser(
        "llama-server",
        help="print the llama-server inferactors uses, building the pinned one if needed",
        description="Find llama-server ($INFERACTORS_LLAMA_SERVER, then PATH, then the cache), "
        "or build the llama.cpp pinned in llama-cpp-python 0.3.36 into the cache (~5 min).",
    )
    build.set_defaults(func=_llama_server)
    add_completion_command(subparsers, parser)
    return parser


def _llama_server(args: argparse.Namespace, build_command: Sequence[str] | None = None) -> int:
    """Print the llama-server path; a failed build exits 1, Ctrl-C 130 (128 + SIGINT),
    each with one line (the build has removed its partial tree by then). ``build_command``:
    `ensure_llama_server`'s (the tests' fake build)."""
    from .._edges.llama_build import cached_binary, ensure_llama_server

    try:
        print(ensure_llama_server(build_command=build_command))
    except InferactorsError as error:
        print(one_line(f"inferactors llama-server: {error}"), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        where = cached_binary().parent.parent
        end_line = "\n" if sys.stderr.isatty() else ""  # after the progress line
        said = f"interrupted; removed the partial build in {where}"
        print(f"{end_line}inferactors llama-server: {said}", file=sys.stderr)
        return 130
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default: ``sys.argv[1:]``) and return the exit status."""
    words = sys.argv[1:] if argv is None else list(argv)
    light = words[:1] == ["--version"] or (words[:1] and words[0] in CLIENT_COMMANDS)
    try:
        parser = client_parser() if light else build_parser()
        args = parser.parse_args(words)
        code: int = args.func(args)
    except KeyboardInterrupt:  # Ctrl-C that no command caught (while loading): one line
        print("\ninferactors: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
