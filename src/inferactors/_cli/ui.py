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
from .control_client import (
    DEFAULT_TIMEOUT_S,
    EXIT_ERROR,
    ControlClient,
    ControlError,
    IntermixedParser,
    add_target_arguments,
    add_timeout_argument,
    socket_of,
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
        "--port", type=int, default=0, metavar="PORT", help="the port (default: a free one)"
    )
    parser.set_defaults(func=serve_ui)


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
    except InferactorsError as error:
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
    """Serve the door until SIGINT or SIGTERM."""
    from .._service.ui_door import serve_ui_door

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            address = await nursery.start(partial(serve_ui_door, socket_path, token, port=port))
            print(f"the web page of the supervisor at {socket_path}:", flush=True)
            print(f"  {address}#token={token}", flush=True)
            print("open it in a browser; Ctrl-C stops serving it", flush=True)
            async for _ in signals:
                break
            nursery.cancel_scope.cancel()
