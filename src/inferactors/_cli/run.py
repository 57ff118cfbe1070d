"""``inferactors run CONFIG.toml``: supervise the configured instances until told to stop.

One runtime is opened per (flavor, mode) pair found in the file; every instance is loaded
and started, events are logged (``--log-format text|json``, ``--log-level``; ISO times with
the date), the control API is served on ``<state dir>/control.sock`` (and on
``--control-port`` with ``--control-token-file``), and the run file's ``[front_door]``, if
any, on its address: one HTTP address for every model. SIGHUP re-reads the run file and
applies only what changed (as ``inferactors reload``); on Ctrl-C (SIGINT) or SIGTERM every managed
server is stopped cleanly. Signals are heard from the very start (`EARLY`, installed by the
console script before anything heavy is imported): a SIGINT or SIGTERM before trio listens
stops it at once with exit 0, having started nothing; a SIGHUP then is a reload done once
the fleet has settled (none when it came before the run file was read).
"""

from __future__ import annotations

import argparse
import grp
import logging
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import ExitStack, closing
from pathlib import Path

import attrs
import trio

from _inferactors_boot import EARLY

from .._config.runfile import Endpoint, RunConfig
from .._edges.descendants import claim_orphans
from .._edges.sd_notify import open_notifier, watchdog_interval_s
from .._edges.subreaper import Reaper, become_subreaper
from .._errors import BackendError, InferactorsError, InvalidConfig, InvalidState, one_line
from .._policy.fleet_exit import (
    EXIT_BAD_CONFIG,
    EXIT_CONFIG,
    EXIT_NOTHING_LEFT,
    EXIT_STOPPED,
    down_reason,
)
from .._service.control_server import SocketAccess, serve_control
from .._service.fleet import Fleet
from .._service.fleet_open import open_fleet
from .._service.lifecycle import ServiceNotes, serve_notify, watchdog_problem
from .._service.reload import describe
from .._service.run_defaults import load_run_file
from .._service.ui_app import WebPage
from .logging_setup import add_logging_arguments, configure_logging, say
from .run_printer import EventPrinter
from .ui_words import CliWords

RUN_HELP = """Supervise the instances of a run file until told to stop.

Every instance in CONFIG.toml is loaded and started, events are logged (--log-format
text|json, --log-level; ISO times with the date), the control API is served on
<state dir>/control.sock (and on --control-port with --control-token-file), and the run
file's [front_door], if any, on its address: one HTTP address for every model.

SIGHUP re-reads the run file and applies only what changed (as inferactors reload); Ctrl-C
(SIGINT) or SIGTERM stops every managed server cleanly, even one sent before the run file
was read. The run file's keys: docs/run-file.md.
"""

EXIT_CODES = f"""exit status:
  {EXIT_STOPPED}  stopped by SIGINT or SIGTERM (every managed server stopped cleanly)
  {EXIT_NOTHING_LEFT}  a required instance (every one but those marked required = false) gave up
     after crashes, or every instance is down; or the supervisor could not start (another
     one holds the state directory). A restart may help: systemd's Restart=on-failure
     and Kubernetes restart it.
  {EXIT_BAD_CONFIG}  the run file is invalid (unreadable, bad TOML, a bad value, no instances, an
     instance on the control API's port)
  {EXIT_CONFIG} (EX_CONFIG) a restart cannot fix it: a required instance was refused or held down
     for its configuration (an unknown or tampered model, a port another process holds, a
     bad flag, the same start-up fault twice, listening beyond loopback), or the state
     directory cannot be used. The shipped unit does not restart on 2 or 78
     (RestartPreventExitStatus=2 78).

SIGHUP reloads the run file: removed instances stop, added ones start, instances whose own
settings changed restart, the rest keep their process; an invalid file, a state directory
that moved (that needs a restart), or an instance to load that fails its checks (an
unknown model, a flag the binary lacks, ...), changes nothing (the error is logged)."""


def add_run_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``inferactors run``."""
    parser = subparsers.add_parser(
        "run",
        help="supervise the instances of a TOML run file",
        description=RUN_HELP,
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config", type=Path, help="the run file (TOML)")
    parser.add_argument(
        "--control-port",
        type=int,
        metavar="PORT",
        help="also serve the control API on 127.0.0.1:PORT (needs --control-token-file)",
    )
    parser.add_argument(
        "--control-token-file",
        type=Path,
        metavar="FILE",
        help="the bearer token the TCP control API requires",
    )
    parser.add_argument(
        "--control-group",
        type=group_id,
        metavar="GROUP",
        help="members of GROUP may use the control socket too (mode 0660)",
    )
    parser.add_argument(
        "--control-read-group",
        type=group_id,
        metavar="GROUP",
        help="members of GROUP may read status, logs, events and metrics through a "
        "read-only socket, control-ro.sock (mode 0660)",
    )
    add_logging_arguments(parser)
    parser.set_defaults(func=run_config)


CONTROL_HOST = "127.0.0.1"
"""Where ``--control-port`` listens."""


def group_id(name: str) -> int:
    """A group's id from its name or number (an argument type).

    Raises:
        argparse.ArgumentTypeError: no such group.
    """
    try:
        return int(name) if name.isdigit() else grp.getgrnam(name).gr_gid
    except KeyError:
        raise argparse.ArgumentTypeError(f"no group named {name!r}") from None


@attrs.frozen
class _Control:
    port: int | None = None
    token_file: Path | None = None
    access: SocketAccess = SocketAccess()  # noqa: RUF009  (frozen value)

    @property
    def reserved(self) -> tuple[Endpoint, ...]:
        """The address no instance may use: the control API's (a port 0 is chosen by the
        kernel, so none is known beforehand)."""
        if not self.port:
            return ()
        return (Endpoint(CONTROL_HOST, self.port, "the control API's port (--control-port)"),)

    def check(self, config: RunConfig) -> None:
        """Raise `InvalidConfig` (exit 2) for an instance on a reserved address."""
        for endpoint in self.reserved:
            endpoint.check(config)


def run_config(args: argparse.Namespace) -> int:
    """Entry point of ``inferactors run``; returns the exit status (`EXIT_CODES`)."""
    EARLY.install()  # already, from the console script; not yet under python -m inferactors
    configure_logging(getattr(args, "log_format", "text"), getattr(args, "log_level", "info"))
    access = SocketAccess(
        getattr(args, "control_group", None), getattr(args, "control_read_group", None)
    )
    control = _Control(
        getattr(args, "control_port", None), getattr(args, "control_token_file", None), access
    )
    try:
        EARLY.take_reload()  # a SIGHUP so far is answered by reading the file now
        config, defaults_said = load_run_file(args.config)
        config.require_instances()
        control.check(config)
        for line in defaults_said:
            say(line)
        watchdog = watchdog_problem(watchdog_interval_s())
        if watchdog is not None and watchdog[0]:
            print(one_line(f"inferactors run: {watchdog[1]}"), file=sys.stderr)
            return EXIT_CONFIG
        return trio.run(_supervise, config, args.config, control)
    except (InferactorsError, OSError) as error:
        return _failed(error)
    except BaseExceptionGroup as group:
        inner = _single(group)
        if not isinstance(inner, InferactorsError | OSError):
            raise
        return _failed(inner)


def _failed(error: InferactorsError | OSError) -> int:
    """The one line and the exit status of a supervisor that could not go on: 2 for an
    invalid run file, 1 when another supervisor holds the state directory (it may go
    away), 78 for what a restart cannot fix (a state directory or a file it cannot use)."""
    if isinstance(error, OSError):
        where = f" {error.filename}" if error.filename else ""
        print(one_line(f"inferactors run: cannot use{where}: {error.strerror}"), file=sys.stderr)
        return EXIT_CONFIG
    print(one_line(f"inferactors run: {error}"), file=sys.stderr)
    if error.code == "invalid-config":
        return EXIT_BAD_CONFIG
    return EXIT_NOTHING_LEFT if isinstance(error, InvalidState) else EXIT_CONFIG


def _single(group: BaseExceptionGroup[BaseException]) -> BaseException:
    inner: BaseException = group
    while isinstance(inner, BaseExceptionGroup) and len(inner.exceptions) == 1:
        inner = inner.exceptions[0]
    return inner


async def _supervise(config: RunConfig, run_file: Path, control: _Control) -> int:
    """Supervise until a signal stops it (0) or nothing is left to supervise (1), while
    Ctrl-C/SIGTERM is heard at once, even in the middle of start-up."""
    heard = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    with trio.open_signal_receiver(*heard) as signals, ExitStack() as stack:
        watchdog = watchdog_problem(watchdog_interval_s())
        if watchdog is not None:
            say(watchdog[1], level=logging.WARNING)
        if (early := EARLY.stop_heard()) is not None:
            say(f"{signal.Signals(early).name} during start-up: stopping; nothing was started")
            return EXIT_STOPPED
        hurry = trio.Event()
        async with trio.open_nursery() as hurrying:
            async with (
                trio.open_nursery() as printing,
                open_fleet(config, run_file, say=say, reserved=control.reserved) as fleet,
            ):
                printer = EventPrinter(stack.enter_context(fleet.follow_events()), fleet)
                printing.start_soon(printer.run)
                if become_subreaper():
                    claim_orphans()  # nothing else we start leaves our session
                    printing.start_soon(_reap_orphans, fleet)
                # in the outer nursery: the control API serves until the fleet is closed, so
                # a follow stream gets the last stop events and ends cleanly
                listening = await printing.start(_serve_control, fleet, control, hurry.wait)
                if listening:
                    say(f"control API listening on {', '.join(listening)}")
                async with trio.open_nursery() as nursery:
                    notes = ServiceNotes(stack.enter_context(closing(open_notifier())), fleet)
                    fleet.on_lifecycle(notes.on_note)
                    await nursery.start(serve_notify, notes, watchdog_interval_s())
                    code = await _until_done(fleet, signals, printer)
                    nursery.cancel_scope.cancel()
                hurrying.start_soon(_hurry_on_signal, signals, hurry)
            hurrying.cancel_scope.cancel()
    return code


async def _hurry_on_signal(signals: AsyncIterator[int], hurry: trio.Event) -> None:
    """During shutdown, a SIGINT or SIGTERM (a second one) cuts the control API's clients at
    once instead of giving them their grace (SIGHUP is not heard then)."""
    async for signum in signals:
        if signum in (signal.SIGINT, signal.SIGTERM):
            name = signal.Signals(signum).name
            say(
                f"{name} during shutdown: cutting the control API's clients now; "
                "managed servers still get their stop grace"
            )
            hurry.set()
            return


async def _serve_control(
    fleet: Fleet,
    control: _Control,
    hurry: Callable[[], Awaitable[None]],
    *,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the control API; another supervisor already answering on the socket is said
    (an error) and supervision goes on without it. A bad ``--control-*`` flag raises."""
    try:
        await serve_control(
            fleet,
            state_dir=fleet.state_dir,
            tcp_port=control.port,
            token_file=control.token_file,
            until=fleet.closed.wait,
            hurry=hurry,
            access=control.access,
            page=WebPage.of_fleet(fleet, CliWords()),
            task_status=task_status,
        )
    except InvalidState as error:  # raised before it listens
        say(one_line(f"control API not served: {error}"), level=logging.ERROR)
        task_status.started([])
    except BackendError as error:  # no socket: nobody could reach us; stop, loudly
        say(one_line(f"control API lost, stopping: {error}"), level=logging.ERROR)
        raise


async def _until_done(fleet: Fleet, signals: AsyncIterator[int], printer: EventPrinter) -> int:
    """The exit status: 0 at SIGINT/SIGTERM, the fleet's own once it gave up (1, or 78
    when a restart cannot help); SIGHUP reloads. The fleet gives up only after the events
    that explain it were published (each member's view follows its own events), so once
    ``printer`` caught up, the last state changes come before the line that says why it
    stops."""
    code = EXIT_STOPPED
    async with trio.open_nursery() as nursery:

        async def given_up() -> None:
            nonlocal code
            await fleet.given_up.wait()
            code = fleet.exit_status if fleet.exit_status is not None else EXIT_NOTHING_LEFT
            await printer.catch_up()
            say(stop_words(fleet, code), level=logging.ERROR)
            nursery.cancel_scope.cancel()

        async def reload_when_settled() -> None:
            await fleet.settled.wait()
            await _reload(fleet, "SIGHUP during start-up")

        nursery.start_soon(given_up)
        if EARLY.take_reload():
            nursery.start_soon(reload_when_settled)
        async for signum in signals:
            if signum == signal.SIGHUP:
                nursery.start_soon(_reload, fleet, "SIGHUP")
                continue
            say(f"{signal.Signals(signum).name}: stopping managed servers")
            break
        nursery.cancel_scope.cancel()
    return code


def stop_words(fleet: Fleet, code: int) -> str:
    """Why the supervisor stops by itself, naming each instance that is down and why."""
    required = {name for name, m in fleet.members.items() if m.placement.entry.required}
    down = [
        f"{view.name}: {down_reason(view.status, view.refused)}"
        for view in fleet.views()
        if fleet.members[view.name].held_down()
    ]
    everyone = len(down) == len(fleet.members)
    named = "; ".join(down)
    if everyone:
        head = "nothing left to supervise: every instance was refused, gave up or is held down"
    else:
        names = ", ".join(sorted(required & {d.split(":", 1)[0] for d in down}))
        head = f"a required instance is down for good ({names})"
    tail = "a restart cannot fix it" if code == EXIT_CONFIG else "a restart may fix it"
    return f"{head} ({named}); stopping (exit {code}: {tail})"


async def _reload(fleet: Fleet, why: str) -> None:
    say(f"{why}: reloading {fleet.run_file}")
    try:
        result = await fleet.reload()
    except InvalidConfig as error:
        say(one_line(f"reload refused, nothing changed: {error}"), level=logging.ERROR)
        return
    say(one_line(describe(result)), level=logging.ERROR if result.refused else logging.INFO)


REAP_EVERY_S = 5.0
"""How often the zombies of adopted orphans are collected (`Reaper`), seconds: a zombie is
collected after two sweeps, so a child trio is about to wait for is never taken from it."""


async def _reap_orphans(fleet: Fleet) -> None:
    """As the subreaper of our servers' descendants, collect those that exited, until the
    fleet is closed."""
    reaper = Reaper()
    while not fleet.closed.is_set():
        with trio.move_on_after(REAP_EVERY_S):
            await fleet.closed.wait()
        known = {view.status.pid for view in fleet.views() if view.status.pid is not None}
        for pid in await trio.to_thread.run_sync(reaper.sweep, known):
            say(f"collected the exit of pid {pid}, a server's orphan that was adopted")
