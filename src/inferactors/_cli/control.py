"""The commands that talk to a running ``inferactors run``: ``status``, ``start``, ``stop``,
``restart``, ``logs``, ``events`` and ``reload``, over its control socket
(``docs/control-api.md``). Each finds the supervisor from the run file or ``--state-dir``.
A stop is an operator's stop: the server ends with reason ``requested`` and is not
restarted until started again.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import typing
from collections.abc import Callable, Iterable
from typing import Any, TypeAlias

from .._edges.line_marks import CONTINUED
from .._errors import one_line
from .._policy.sizes import size_text
from .control_client import (
    COMMAND_WAIT_S,
    DEFAULT_TIMEOUT_S,
    EXIT_BAD_INPUT,
    EXIT_ERROR,
    START_WAIT_S,
    ControlClient,
    ControlError,
    IntermixedParser,
    add_target_arguments,
    add_timeout_argument,
    positive_seconds,
    socket_of,
)
from .terminal import STATE_COLOURS, colour_wanted, table, width_of

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
    words = _state_words(after)
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


# ---- formatting ------------------------------------------------------------------------


def status_table(
    views: Iterable[dict[str, Any]], *, width: int | None = None, colour: bool = False
) -> str:
    """The instances as a table: NAME, MODE, STATE (the display state), ENDPOINT, MODEL,
    PID, UPTIME, RESTARTS, DETAIL; when the scheduler runs, also RESIDENCY, MEMORY
    (declared/estimated/measured), REQS (in flight+queued) and TTL (idle time left) before
    DETAIL. ``width``: cut DETAIL to it (a terminal's); ``colour``: colour the states."""
    views = list(views)
    scheduled = any(view.get("residency") for view in views)
    header: tuple[str, ...] = (
        "NAME", "MODE", "STATE", "ENDPOINT", "MODEL", "PID", "UPTIME", "RESTARTS", "DETAIL"
    )  # fmt: skip
    if scheduled:
        header = (*header[:-1], "RESIDENCY", "MEMORY", "REQS", "TTL", "DETAIL")
    rows = [header] + [_cells(view, scheduled) for view in views]
    return table(rows, width=width, paint=_state_colour if colour else None)


def _state_colour(column: int, cell: str) -> str | None:
    return STATE_COLOURS.get(cell) if column == 2 else None


def shown_state(view: dict[str, Any]) -> str:
    """The view's display state (a supervisor before them: its status's state)."""
    return str(view.get("display_state") or view["status"]["state"])


def _cells(view: dict[str, Any], scheduled: bool = False) -> tuple[str, ...]:
    status = view["status"]
    pid = status.get("pid")
    cells: tuple[str, ...] = (
        view["name"],
        view["mode"],
        shown_state(view),
        _address(view.get("endpoint")),
        view.get("model") or "-",
        "-" if pid is None else str(pid),
        duration(status.get("uptime_s")),
        str(status.get("restarts", 0)),
    )
    if scheduled:
        cells += residency_cells(view.get("residency"))
    return (*cells, _detail(view))


def _address(endpoint: str | None) -> str:
    """``127.0.0.1:8090`` of ``http://127.0.0.1:8090``; ``-`` for none."""
    if not endpoint:
        return "-"
    return endpoint.split("://", 1)[-1]


def residency_cells(residency: dict[str, Any] | None) -> tuple[str, str, str, str]:
    """RESIDENCY, MEMORY, REQS, TTL of a view's ``residency`` (dashes when None):
    ``resident``, ``0.5 MB/17.3 MB/18.1 MB``, ``1+2``, ``4m59s``."""
    if not residency:
        return ("-", "-", "-", "-")
    measured = residency.get("measured_bytes")
    memory = "/".join(
        "-" if value is None else size_text(int(value))
        for value in (residency["declared_bytes"], residency["estimated_bytes"], measured)
    )
    ttl = residency.get("ttl_left_s")
    return (
        str(residency["residency"]),
        memory,
        f"{residency['in_flight']}+{residency['queued']}",
        "-" if ttl is None else duration(float(ttl)),
    )


def _detail(view: dict[str, Any]) -> str:
    if view.get("refused"):
        return f"refused: {view['refused']}"
    status = view["status"]
    words = [status.get("detail")]
    if status["state"] == "exited" and status.get("stop_reason"):
        words.append(f"reason: {status['stop_reason']}")
    words.append(status.get("supervision"))
    deadline = view.get("stop_deadline_at")
    if deadline is not None:
        words.append(f"stopping: killed at {_local_time(deadline)} if still running")
    return one_line("; ".join(word for word in words if word), 200)


def duration(seconds: float | None) -> str:
    """``-``, ``42s``, ``3m05s`` or ``2h07m``."""
    if seconds is None:
        return "-"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def _state_words(view: dict[str, Any]) -> str:
    status = view["status"]
    words = shown_state(view)
    if status.get("pid") is not None:
        words += f", pid {status['pid']}"
    detail = _detail(view)
    return f"{words} ({detail})" if detail else words


_HARMLESS = {code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0)) if code != 0x09}
"""Control characters (C0 but tab, DEL, C1) as visible ``\\xNN`` escapes."""


def harmless(text: str, keep: str = "") -> str:
    """``text`` with every control character but those in ``keep`` (an event's own line
    breaks) shown as ``\\x1b`` instead of sent to the terminal: a server's output must not
    set the window title, clear the screen, move the cursor over earlier lines or forge a
    line of its own (``\\r``)."""
    return (
        keep.join(part.translate(_HARMLESS) for part in text.split(keep))
        if keep
        else text.translate(_HARMLESS)
    )


def log_line(line: dict[str, Any]) -> str:
    """``2025-06-01T12:00:00.123 stderr 4242  <text>``: local time, stream, pid, text (its
    control characters made harmless: `harmless`), and ``[continues]`` after a piece of a
    line longer than the line cap."""
    at = _local_time(line["at"])
    mark = CONTINUED if line.get("continued") else ""
    return f"{at} {line['stream']} {line['pid']}  {harmless(str(line['text']))}{mark}"


def event_line(item: dict[str, Any]) -> str:
    """An event as the supervisor prints it, after its wall-clock time (local, ISO 8601
    with milliseconds) and naming its instance by name (its role); or its JSON when this
    CLI does not know it. (Only ``events`` needs the event classes and the converter:
    imported here.)"""
    from .._config.convert_hooks import converter
    from .._events import Event
    from .event_words import describe_event

    types = {cl.__name__: cl for cl in typing.get_args(Event)}
    fields = {key: value for key, value in item.items() if key not in ("type", "name")}
    cl = types.get(str(item.get("type")))
    event: Event | None = None
    try:
        event = converter.structure(fields, cl) if cl is not None else None
    except Exception:  # a newer supervisor's fields: show what came
        pass
    if event is None:
        return json.dumps(item)
    wall = item.get("wall_time")
    return f"{_local_time(wall)} {describe_event(event, item.get('name'))}"


def _local_time(unix_s: object) -> str:
    """``2025-06-01T12:00:00.123`` (local time), ``-`` for none (an older supervisor)."""
    if not isinstance(unix_s, int | float):
        return "-"
    return datetime.datetime.fromtimestamp(float(unix_s)).isoformat(timespec="milliseconds")


def reload_words(result: dict[str, Any]) -> str:
    """What a reload did, one line per kind of change (``nothing changed`` when none),
    then one ``refused NAME: reason`` line per instance refused at its load or start, and
    one ``held down as tampered NAME: reason`` line per unchanged instance whose model the
    re-read trust anchors no longer verify; an ``applied [TABLE] live`` line per table
    whose new values were applied (``[residency]``), so a changed budget never reads as
    ``nothing changed``."""
    kinds = ("added", "removed", "changed", "revived")
    lines = [f"{kind}: {', '.join(result[kind])}" for kind in kinds if result.get(kind)]
    refused = [one_line(f"refused {name}: {why}", 300) for name, why in refused_of(result)]
    refused += [
        one_line(f"held down as tampered {name}: {why}", 300)
        for name, why in refused_of({"refused": result.get("tampered")})
    ]
    applied = [f"applied [{table}] live" for table in result.get("applied") or ()]
    if not lines:
        count = len(result.get("unchanged", []))
        done = f"nothing changed ({count} instance(s) unchanged)"
        if applied:
            done = f"no instance changed ({count} unchanged)"
        return "\n".join([done, *applied, *refused])
    unchanged = result.get("unchanged", [])
    return "\n".join([*lines, f"unchanged: {', '.join(unchanged) or 'none'}", *applied, *refused])


def refused_of(result: dict[str, Any]) -> list[tuple[str, str]]:
    """The ``(name, reason)`` of each instance a reload's ``refused`` names: an object by
    name, or a list of pairs."""
    refused = result.get("refused") or {}
    pairs = refused.items() if isinstance(refused, dict) else refused
    return sorted((str(name), str(why)) for name, why in pairs)
