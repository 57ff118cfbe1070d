"""Talking to a running supervisor's control API from the CLI: find its socket, send a
request, read JSON or NDJSON back (httpx, synchronous, over the Unix socket).

Exit statuses of the commands that use it: 0 done, 1 the supervisor answered with an error
(unknown instance, a command its state refuses, a failure), 2 bad arguments or an unusable
run file (and a reload that found the run file invalid), 3 no supervisor is running.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx

from .._config.state_dir import default_state_dir, state_dir_of_file
from .._errors import InvalidConfig
from .._service.control_server import control_socket_path

EXIT_ERROR = 1
EXIT_BAD_INPUT = 2
EXIT_NO_SUPERVISOR = 3
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0
"""How long a status or a tail may take to come back, float seconds; commands (start,
restart, reload) wait as long as the supervisor takes."""


class ControlError(Exception):
    """A control command failed; ``exit_status`` is what the command returns."""

    def __init__(self, message: str, exit_status: int, code: str = "") -> None:
        super().__init__(message)
        self.exit_status = exit_status
        self.code = code


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """``[CONFIG.toml]`` and ``--state-dir DIR``: where to find the supervisor."""
    parser.add_argument(
        "config",
        nargs="?",
        type=Path,
        metavar="CONFIG.toml",
        help="the run file the supervisor runs (its state directory is found from it)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        metavar="DIR",
        help="the supervisor's state directory (default: from CONFIG, else "
        "~/.local/state/inferactors)",
    )


def socket_of(args: argparse.Namespace) -> Path:
    """The control socket named by ``--state-dir`` or the run file, else the default's.

    Raises:
        ControlError: both given (exit 2), or the run file is unusable (exit 2).
    """
    if args.state_dir is not None and args.config is not None:
        raise ControlError("give a run file or --state-dir, not both", EXIT_BAD_INPUT)
    if args.state_dir is not None:
        return control_socket_path(args.state_dir)
    if args.config is None:
        return control_socket_path(default_state_dir())
    try:
        return control_socket_path(state_dir_of_file(args.config))
    except InvalidConfig as error:
        raise ControlError(str(error), EXIT_BAD_INPUT, error.code) from None


@attrs.define(eq=False)
class ControlClient:
    """A synchronous client of one supervisor's control socket."""

    path: Path
    http: httpx.Client

    @classmethod
    def open(cls, path: Path) -> ControlClient:
        """A client of the socket at ``path`` (nothing is sent yet).

        Raises:
            ControlError: no socket there (exit 3).
        """
        if not path.is_socket():
            raise ControlError(
                f"no supervisor is running (no socket at {path})", EXIT_NO_SUPERVISOR
            )
        transport = httpx.HTTPTransport(uds=str(path))
        timeout = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
        http = httpx.Client(transport=transport, base_url="http://inferactors", timeout=timeout)
        return cls(path, http)

    def close(self) -> None:
        self.http.close()

    def get(self, route: str, **params: str | int) -> Any:
        """The JSON answer of ``GET route``.

        Raises:
            ControlError: as `_checked`.
        """
        return self._checked(lambda: self.http.get(route, params=params)).json()

    def post(self, route: str) -> Any:
        """The JSON answer of ``POST route`` (no read timeout: a start waits for the server).

        Raises:
            ControlError: as `_checked`.
        """
        timeout = httpx.Timeout(None, connect=CONNECT_TIMEOUT_S)
        return self._checked(lambda: self.http.post(route, timeout=timeout)).json()

    def lines(self, route: str, **params: str | int) -> Iterator[dict[str, Any]]:
        """The NDJSON items of ``GET route`` as they come (a follow waits without end).

        Raises:
            ControlError: as `_checked`.
        """
        timeout = httpx.Timeout(None, connect=CONNECT_TIMEOUT_S)
        request = self.http.build_request("GET", route, params=params, timeout=timeout)
        reply = self._checked(lambda: self.http.send(request, stream=True))
        try:
            for line in reply.iter_lines():
                if line:
                    yield json.loads(line)
        except httpx.HTTPError as error:
            raise ControlError(f"the supervisor went away: {error}", EXIT_ERROR) from None
        finally:
            reply.close()

    def _checked(self, send: Any) -> httpx.Response:
        """Send, and turn what can go wrong into a `ControlError`.

        Raises:
            ControlError: nothing answers on the socket (exit 3), it cannot be reached
                (exit 1), or the supervisor answered with an error (exit 1; 2 for
                ``invalid-config``).
        """
        try:
            reply: httpx.Response = send()
        except httpx.ConnectError as error:
            raise self._unreachable(error) from None
        except httpx.HTTPError as error:
            raise ControlError(f"the supervisor did not answer: {error}", EXIT_ERROR) from None
        if reply.is_success:
            return reply
        reply.read()
        code, message = _error_of(reply)
        status = EXIT_BAD_INPUT if code == "invalid-config" else EXIT_ERROR
        raise ControlError(message, status, code)

    def _unreachable(self, error: httpx.ConnectError) -> ControlError:
        cause = error.__cause__ or error.__context__
        if isinstance(cause, PermissionError) or "Permission denied" in str(error):
            why = "permission denied (the supervisor runs as another user?)"
            return ControlError(f"cannot reach the supervisor at {self.path}: {why}", EXIT_ERROR)
        return ControlError(
            f"no supervisor is running (nothing answers at {self.path})", EXIT_NO_SUPERVISOR
        )


def _error_of(reply: httpx.Response) -> tuple[str, str]:
    """The ``{"error": {"code", "message"}}`` of an error answer, or its status in words."""
    try:
        error = reply.json()["error"]
        return str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        return f"http-{reply.status_code}", f"HTTP {reply.status_code}: {reply.text[:200]}"
