"""``inferactors run CONFIG.toml``: supervise the configured instances until told to stop.

One runtime is opened per (flavor, mode) pair found in the file; every instance is loaded
and started, events are logged (``--log-format text|json``, ``--log-level``; ISO times with
the date), and the control API is served on ``<state dir>/control.sock`` (and on
``--control-port`` with ``--control-token-file``). SIGHUP re-reads the run file and applies
only what changed (as ``inferactors reload``); on Ctrl-C (SIGINT) or SIGTERM every managed
server is stopped cleanly. Signals are heard from the very start (`EARLY`, installed by the
console script before anything heavy is imported): a SIGINT or SIGTERM before trio listens
stops it at once with exit 0, having started nothing; a SIGHUP then is a reload done once
the fleet has settled (none when it came before the run file was read).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import ExitStack, closing
from pathlib import Path

import attrs
import trio

from _inferactors_boot import EARLY

from .._config.convert import load_run_config
from .._config.runfile import Endpoint, RunConfig
from .._edges.sd_notify import open_notifier, watchdog_interval_s
from .._errors import InferactorsError, InvalidConfig, InvalidState, one_line
from .._events import Event
from .._policy.fleet_exit import EXIT_BAD_CONFIG, EXIT_NOTHING_LEFT, EXIT_STOPPED, down_reason
from .._service.control_server import serve_control
from .._service.fleet import Fleet, open_fleet
from .._service.lifecycle import ServiceNotes, serve_notify
from .._service.reload import describe
from .logging_setup import add_logging_arguments, configure_logging, log_event, say

EXIT_CODES = f"""exit status:
  {EXIT_STOPPED}  stopped by SIGINT or SIGTERM (every managed server stopped cleanly)
  {EXIT_NOTHING_LEFT}  nothing left to supervise: every instance was refused, gave up
     (restart budget or intensity spent, a configuration error) or is held down
     (exposure, tampered model); or the supervisor could not start (another one holds
     the state directory). systemd's Restart=on-failure and Kubernetes restart it.
  {EXIT_BAD_CONFIG}  the run file is invalid (unreadable, bad TOML, a bad value, no instances)

SIGHUP reloads the run file: removed instances stop, added ones start, changed ones
restart, the rest keep running; an invalid file, or an instance to load that fails its
checks (an unknown model, a flag the binary lacks, ...), changes nothing (the error is
logged)."""


def add_run_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``inferactors run``."""
    parser = subparsers.add_parser(
        "run",
        help="supervise the instances of a TOML run file",
        description=__doc__,
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
    add_logging_arguments(parser)
    parser.set_defaults(func=run_config)


CONTROL_HOST = "127.0.0.1"
"""Where ``--control-port`` listens."""


@attrs.frozen
class _Control:
    port: int | None = None
    token_file: Path | None = None

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
    control = _Control(
        getattr(args, "control_port", None), getattr(args, "control_token_file", None)
    )
    try:
        EARLY.take_reload()  # a SIGHUP so far is answered by reading the file now
        config = load_run_config(args.config)
        config.require_instances()
        control.check(config)
        return trio.run(_supervise, config, args.config, control)
    except InferactorsError as error:
        return _failed(error)
    except BaseExceptionGroup as group:
        inner = _single(group)
        if not isinstance(inner, InferactorsError):
            raise
        return _failed(inner)


def _failed(error: InferactorsError) -> int:
    print(one_line(f"inferactors run: {error}"), file=sys.stderr)
    return EXIT_BAD_CONFIG if error.code == "invalid-config" else EXIT_NOTHING_LEFT


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
        if (early := EARLY.stop_heard()) is not None:
            say(f"{signal.Signals(early).name} during start-up: stopping; nothing was started")
            return EXIT_STOPPED
        async with (
            trio.open_nursery() as printing,
            open_fleet(config, run_file, say=say, reserved=control.reserved) as fleet,
        ):
            printing.start_soon(_log_events, stack.enter_context(fleet.follow_events()))
            # in the outer nursery: the control API serves until the fleet is closed, so a
            # follow stream gets the last stop events and ends cleanly
            listening = await printing.start(_serve_control, fleet, control)
            if listening:
                say(f"control API listening on {', '.join(listening)}")
            async with trio.open_nursery() as nursery:
                notes = ServiceNotes(stack.enter_context(closing(open_notifier())), fleet)
                fleet.on_lifecycle(notes.on_note)
                await nursery.start(serve_notify, notes, watchdog_interval_s())
                code = await _until_done(fleet, signals)
                nursery.cancel_scope.cancel()
    return code


async def _serve_control(
    fleet: Fleet,
    control: _Control,
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
            task_status=task_status,
        )
    except InvalidState as error:  # raised before it listens
        say(one_line(f"control API not served: {error}"), level=logging.ERROR)
        task_status.started([])


async def _until_done(fleet: Fleet, signals: AsyncIterator[int]) -> int:
    """The exit status: 0 at SIGINT/SIGTERM, 1 once nothing is left; SIGHUP reloads."""
    code = EXIT_STOPPED
    async with trio.open_nursery() as nursery:

        async def nothing_left() -> None:
            nonlocal code
            await fleet.nothing_left.wait()
            code = EXIT_NOTHING_LEFT
            why = "; ".join(f"{v.name}: {down_reason(v.status, v.refused)}" for v in fleet.views())
            say(
                "nothing left to supervise: every instance was refused, gave up or is held "
                f"down ({why}); stopping (exit 1)",
                level=logging.ERROR,
            )
            nursery.cancel_scope.cancel()

        async def reload_when_settled() -> None:
            await fleet.settled.wait()
            await _reload(fleet, "SIGHUP during start-up")

        nursery.start_soon(nothing_left)
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


async def _reload(fleet: Fleet, why: str) -> None:
    say(f"{why}: reloading {fleet.run_file}")
    try:
        result = await fleet.reload()
    except InvalidConfig as error:
        say(one_line(f"reload refused, nothing changed: {error}"), level=logging.ERROR)
        return
    say(one_line(describe(result)), level=logging.ERROR if result.refused else logging.INFO)


async def _log_events(events: trio.MemoryReceiveChannel[Event]) -> None:
    async for event in events:
        log_event(event)
