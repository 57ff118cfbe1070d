"""``inferactors ui``: the supervisor's web page on a loopback port of this command's own,
for the user who runs it (``_service/ui_door.py``); it prints the page's address, with a
token made for this run in its fragment, and serves until Ctrl-C."""

from __future__ import annotations

import argparse
import secrets
import signal
import sys
from functools import partial
from pathlib import Path

import trio

from .._errors import InferactorsError, one_line
from .control_args import IntermixedParser, add_target_arguments, add_timeout_argument, socket_of
from .control_client import (
    DEFAULT_TIMEOUT_S,
    EXIT_ERROR,
    ControlClient,
    ControlError,
)

PAGE_ROUTE = "/ui/api/stream"
"""A route only a supervisor that serves the page has (``GET /v1`` lists its routes)."""


def add_ui_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``inferactors ui``."""
    parser = subparsers.add_parser(
        "ui",
        help="serve the supervisor's web page on a loopback port, for you",
        description="Serve the web page of a running supervisor on 127.0.0.1 (a free port, "
        "or --port) and print its address: open it in a browser. The address carries a "
        "token made for this run; the page talks to the supervisor through its control "
        "socket. Ctrl-C stops it.",
        epilog="exit status:\n  0  stopped by Ctrl-C\n  1  the page could not be served "
        "(the supervisor did not answer, serves no page, or the port is taken)\n"
        "  2  bad arguments\n  3  no supervisor is running",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.__class__ = IntermixedParser
    add_target_arguments(parser)
    add_timeout_argument(parser, DEFAULT_TIMEOUT_S)
    parser.add_argument(
        "--port", type=_port, default=0, metavar="PORT", help="the port (default: a free one)"
    )
    parser.set_defaults(func=serve_ui)


def _port(text: str) -> int:
    """A TCP port number, 0 to 65535 (0: a free one); anything else is a bad argument."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port (0 to 65535)")
    return port


def serve_ui(args: argparse.Namespace) -> int:
    """Entry point of ``inferactors ui``; returns the exit status."""
    try:
        socket_path = _page_socket(socket_of(args), args.timeout)
    except ControlError as error:
        print(one_line(f"inferactors ui: {error}"), file=sys.stderr)
        return error.exit_status
    token = secrets.token_urlsafe(32)
    try:
        trio.run(_serve, socket_path, token, args.port)
    except KeyboardInterrupt:  # before it listened for signals
        return 0
    except InferactorsError as error:  # the port is taken, the supervisor went away
        print(one_line(f"inferactors ui: {error}"), file=sys.stderr)
        return EXIT_ERROR
    return 0


def _page_socket(path: Path, timeout_s: float) -> Path:
    """``path``, once the supervisor there answered and said it serves the page.

    Raises:
        ControlError: no supervisor, no answer, or no page (exit 1).
    """
    client = ControlClient.open(path, timeout_s)
    try:
        routes = client.get("/v1").get("routes", [])
    finally:
        client.close()
    if not any(route.get("path") == PAGE_ROUTE for route in routes):
        raise ControlError(f"the supervisor at {path} serves no web page", EXIT_ERROR)
    return path


async def _serve(socket_path: Path, token: str, port: int) -> None:
    """Serve the door until SIGINT or SIGTERM.

    Raises:
        InferactorsError: the door could not be served (the port is taken): the error
            itself, not a group of one.
    """
    from .._service.ui_door import serve_ui_door

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        try:
            async with trio.open_nursery() as nursery:
                door = partial(serve_ui_door, socket_path, token, port=port)
                address = await nursery.start(door)
                print(f"the web page of the supervisor at {socket_path}:", flush=True)
                print(f"  {address}#token={token}", flush=True)
                print("open it in a browser; Ctrl-C stops serving it", flush=True)
                async for _ in signals:
                    break
                nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            raise _single(group) from None


def _single(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception inside (nested) single-member groups, else the group itself."""
    inner: BaseException = group
    while isinstance(inner, BaseExceptionGroup) and len(inner.exceptions) == 1:
        inner = inner.exceptions[0]
    return inner
