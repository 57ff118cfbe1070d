"""The commands that talk to a running ``inferactors run``: ``status``, ``start``, ``stop``,
``restart``, ``logs``, ``events`` and ``reload``, over its control socket
(``docs/control-api.md``). Each finds the supervisor from the run file or ``--state-dir``.
A stop is an operator's stop: the server ends with reason ``requested`` and is not
restarted until started again.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any, TypeAlias

from .._errors import one_line
from .control_args import (
    IntermixedParser,
    add_target_arguments,
    add_timeout_argument,
    positive_seconds,
    socket_of,
)
from .control_client import (
    COMMAND_WAIT_S,
    DEFAULT_TIMEOUT_S,
    EXIT_BAD_INPUT,
    EXIT_ERROR,
    START_WAIT_S,
    ControlClient,
    ControlError,
)
from .control_format import (
    event_line,
    harmless,
    log_line,
    refused_of,
    reload_words,
    shown_state,
    state_words,
    status_table,
)
from .terminal import colour_wanted, width_of

EXIT_STATUSES = """exit status:
  0  done (-f: the supervisor stopped; logs of an adopted server: its output is not ours,
     said on stderr)
  1  the supervisor answered with an error (unknown instance, refused, failed; reload:
     an instance was refused), or did not answer within --timeout (busy or frozen)
  2  bad arguments or run file (reload: the run file is invalid; nothing changed)
  3  no supervisor is running (no control socket, or the connection is refused)
  4  start/restart: --wait ran out while the instance was still starting or waiting to
     restart (it may still get there; said on stderr)"""

EXIT_WAIT_RAN_OUT = 4
"""``start``/``restart``: the wait ran out before the instance settled (still starting or in
backoff): not a failure yet, not a success."""

Command = Callable[[ControlClient, argparse.Namespace], int]
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def register_control_commands(subparsers: Subparsers) -> None:
    """Register ``status``, ``start``, ``stop``, ``restart``, ``logs``, ``events``, ``reload``."""
    status = _add(subparsers, "status", "show every instance of a running supervisor", _status)
    status.add_argument("--json", action="store_true", help="print the instances as JSON")
    for verb, what in [
        ("start", "start one instance and wait until it runs or fails for good"),
        ("stop", "stop one instance; it is not restarted until started again"),
        ("restart", "stop one instance, start it again and wait until it runs or fails"),
    ]:
        command = _add(subparsers, verb, what, _instance_command(verb), named=True)
        command.set_defaults(verb=verb)
        if verb == "stop":
            _add_wait(command)
        else:
            _add_start_wait(command)
        _add_json(command, "print the instance after the command as JSON")
    logs = _add(subparsers, "logs", "print one instance's server output", _logs, named=True)
    logs.add_argument("-n", "--lines", type=int, default=100, help="lines of the tail (100)")
    logs.add_argument("-f", "--follow", action="store_true", help="then print new lines")
    _add_json(logs, "print NDJSON log lines as received")
    events = _add(subparsers, "events", "print the supervisor's recent events", _events)
    events.add_argument("-n", "--count", type=int, default=20, help="recent events (20)")
    events.add_argument("-f", "--follow", action="store_true", help="then print new ones")
    events.add_argument("--json", action="store_true", help="print NDJSON as received")
    reload = _add(subparsers, "reload", "re-read the run file; restart only what changed", _reload)
    _add_wait(reload)
    _add_json(reload, "print what the reload did as JSON")


def _add_json(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--json", action="store_true", help=what)


def _add_wait(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wait",
        type=positive_seconds,
        default=COMMAND_WAIT_S,
        metavar="SECONDS",
        help=f"how long the command may take once the supervisor answered (default "
        f"{COMMAND_WAIT_S:g})",
    )


def _add_start_wait(parser: argparse.ArgumentParser) -> None:
    waits = parser.add_mutually_exclusive_group()
    waits.add_argument(
        "--wait",
        type=positive_seconds,
        default=START_WAIT_S,
        metavar="SECONDS",
        help="how long to wait for the instance to be running, or to fail for good "
        f"(given up, held down, not answering); exit 1 if it is not running then "
        f"(default {START_WAIT_S:g})",
    )
    waits.add_argument(
        "--no-wait",
        action="store_true",
        help="return once the server is spawned (state starting), without waiting",
    )


def _add(
    subparsers: Subparsers, name: str, summary: str, command: Command, named: bool = False
) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        name,
        help=summary,
        description=f"{summary[0].upper()}{summary[1:]}.",
        epilog=EXIT_STATUSES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.__class__ = IntermixedParser  # subparsers are made of the main parser's class
    if named:
        parser.add_argument("name", help="the instance's name (its role in the run file)")
    add_target_arguments(parser)
    add_timeout_argument(parser, DEFAULT_TIMEOUT_S)
    parser.set_defaults(func=lambda args: _run(name, command, args))
    return parser


def _run(name: str, command: Command, args: argparse.Namespace) -> int:
    """Run ``command`` against the supervisor; errors become one line and an exit status.
    Ctrl-C (while following) ends it quietly with 0."""
    try:
        client = ControlClient.open(socket_of(args), args.timeout)
        try:
            return command(client, args)
        finally:
            client.close()
    except ControlError as error:
        print(one_line(f"inferactors {name}: {error}"), file=sys.stderr)
        return error.exit_status
    except (KeyboardInterrupt, BrokenPipeError):
        return 0


def _status(client: ControlClient, args: argparse.Namespace) -> int:
    views = client.get("/v1/instances")["instances"]
    if args.json:
        print(json.dumps(views, indent=2))
    else:
        print(status_table(views, width=width_of(sys.stdout), colour=colour_wanted(sys.stdout)))
    return 0


def _instance_command(verb: str) -> Command:
    def command(client: ControlClient, args: argparse.Namespace) -> int:
        route = f"/v1/instances/{args.name}"
        before = client.get(route)  # it answers, within --timeout; an unknown name: exit 1
        params: dict[str, str | int | float] = {}
        if verb != "stop":
            params["wait"] = 0 if args.no_wait else args.wait
        limit_s = args.wait + client.timeout_s  # a start: the supervisor answers at its wait
        view = client.post(f"{route}/{verb}", limit_s, params, check_first=False)
        if args.json:
            print(json.dumps(view, indent=2))
        else:
            print(f"{view['name']}: {_outcome_words(verb, before, view)}")
        return _outcome(verb, view, args)

    return command


def _outcome_words(verb: str, before: dict[str, Any], after: dict[str, Any]) -> str:
    """The instance's state words after ``verb``; ``already stopped`` for a stop of an
    instance that had no process to stop."""
    words = state_words(after)
    was = shown_state(before)
    if verb == "stop" and before["status"].get("pid") is None and was in _NOT_RUNNING:
        return f"already {words}" if shown_state(after) == was else words
    return words


_NOT_RUNNING = frozenset({"stopped", "fatal", "idle", "gone"})
"""Display states with no process of ours to stop."""


def _outcome(verb: str, view: dict[str, Any], args: argparse.Namespace) -> int:
    """0, but 1 for a start or restart that did not end running (or degraded but serving),
    unless it was not waited for (``--no-wait``: 1 only for a failure already known)."""
    if verb == "stop":
        return 0
    shown = shown_state(view)
    serving = shown == "running" or (shown == "degraded" and view["status"].get("serving"))
    if serving or (args.no_wait and shown in ("starting", "backoff")):
        return 0
    if shown in ("starting", "backoff"):
        print(
            f"inferactors {verb}: timed out: {view['name']} is still {shown} after --wait "
            f"{args.wait:g} s",
            file=sys.stderr,
        )
        return EXIT_WAIT_RAN_OUT
    return EXIT_ERROR


def _logs(client: ControlClient, args: argparse.Namespace) -> int:
    """The tail (and with ``-f`` what follows); an adopted server's output is not ours:
    that is said on stderr, nothing is printed, and the exit status is 0."""
    params: dict[str, str | int | float] = {"lines": max(args.lines, 0)}
    try:
        for line in client.lines(f"/v1/instances/{args.name}/logs", params, follow=args.follow):
            print(json.dumps(line) if args.json else log_line(line), flush=True)
    except ControlError as error:
        if error.code != "unsupported":
            raise
        print(one_line(f"inferactors logs: {error}"), file=sys.stderr)
        return 0
    return _ended(args)


def _events(client: ControlClient, args: argparse.Namespace) -> int:
    params: dict[str, str | int | float] = {"since": max(args.count, 0)}
    for item in client.lines("/v1/events", params, follow=args.follow):
        print(json.dumps(item) if args.json else harmless(event_line(item), "\n"), flush=True)
    return _ended(args)


def _ended(args: argparse.Namespace) -> int:
    """0; a follow the supervisor ended (it stops) says so on stderr."""
    if args.follow:
        print(f"inferactors {args.command}: the supervisor stopped", file=sys.stderr)
    return 0


def _reload(client: ControlClient, args: argparse.Namespace) -> int:
    try:
        result = client.post("/v1/reload", args.wait)
    except ControlError as error:
        if error.exit_status == EXIT_BAD_INPUT:
            raise ControlError(f"the run file is invalid; nothing changed: {error}", 2) from None
        raise
    print(json.dumps(result, indent=2) if args.json else reload_words(result))
    return EXIT_ERROR if refused_of(result) else 0
