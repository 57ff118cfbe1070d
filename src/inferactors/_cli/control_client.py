"""Talking to a running supervisor's control API from the CLI: find its socket, send a
request, read JSON or NDJSON back (httpx, synchronous, over the Unix socket).

Exit statuses of the commands that use it: 0 done, 1 the supervisor answered with an error
(unknown instance, a command its state refuses, a failure) or did not answer in time (busy,
frozen), 2 bad arguments or an unusable run file (and a reload that found the run file
invalid), 3 no supervisor is running (no socket file, or the connection is refused).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import httpx

from .._config.state_dir import default_state_dir, state_dir_of_file
from .._edges.state_lock import lock_holder
from .._errors import InvalidConfig
from .._service.control_server import READ_ONLY_SOCKET, control_socket_path

EXIT_ERROR = 1
EXIT_BAD_INPUT = 2
EXIT_NO_SUPERVISOR = 3
DEFAULT_TIMEOUT_S = 10.0
"""How long the supervisor has to answer a request (``--timeout``), float seconds."""
COMMAND_WAIT_S = 900.0
"""How long start, stop, restart and reload may take once the supervisor answered
(``--wait``), float seconds: a start waits for its server to be ready (600 s at most by
default, ``readiness_timeout_s``), a stop for its grace."""
FIRST_PAUSE_S = 0.02
MAX_PAUSE_S = 0.25
"""The pauses between connects to a busy socket (doubling), float seconds."""
MIN_WAIT_S = 0.001
SOCKET_POLL_S = 0.05
"""How often a missing socket is looked for again while its supervisor lives, seconds."""


class ControlError(Exception):
    """A control command failed; ``exit_status`` is what the command returns."""

    def __init__(self, message: str, exit_status: int, code: str = "") -> None:
        super().__init__(message)
        self.exit_status = exit_status
        self.code = code


class IntermixedParser(argparse.ArgumentParser):
    """A parser whose options and positionals come in any order (``logs NAME -n 1
    CONFIG.toml``): argparse's own parser gives an optional positional only the words
    before the first option."""

    _parsing = False

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._parsing:  # parse_known_intermixed_args calls back here, twice
            return super().parse_known_args(args, namespace)
        self._parsing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._parsing = False


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


def add_timeout_argument(parser: argparse.ArgumentParser, default_s: float) -> None:
    """``--timeout SECONDS``: how long the supervisor has to answer."""
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=default_s,
        metavar="SECONDS",
        help=f"how long the supervisor has to answer (default {default_s:g})",
    )


def positive_seconds(text: str) -> float:
    """An argument that is a positive, finite number of seconds."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return seconds


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
    """A synchronous client of one supervisor's control socket.

    Every exchange has a deadline: ``timeout_s`` for the supervisor to answer (a frozen
    supervisor is reported, not waited on forever). A connection refused, or no socket
    file, means no supervisor is running (exit 3); a full accept queue (``EAGAIN``) means
    a busy one, retried until the deadline (then exit 1).
    """

    path: Path
    http: httpx.Client
    timeout_s: float = DEFAULT_TIMEOUT_S

    @classmethod
    def open(cls, path: Path, timeout_s: float = DEFAULT_TIMEOUT_S) -> ControlClient:
        """A client of the socket at ``path`` (nothing is sent yet); ``timeout_s`` is how
        long the supervisor has to answer each request, float seconds.

        Raises:
            ControlError: no socket there (exit 3).
        """
        if not path.is_socket():
            _await_socket(path, timeout_s)
        path = _usable(path)
        transport = httpx.HTTPTransport(uds=str(path))
        http = httpx.Client(transport=transport, base_url="http://inferactors")
        return cls(path, http, timeout_s)

    def close(self) -> None:
        self.http.close()

    def get(self, route: str, **params: str | int) -> Any:
        """The JSON answer of ``GET route``, within ``timeout_s``.

        Raises:
            ControlError: as `answer`, or the supervisor answered with an error (exit 1; 2
                for ``invalid-config``).
        """
        return _checked(self.answer("GET", route, params, limit_s=self.timeout_s)).json()

    def post(self, route: str, wait_s: float = COMMAND_WAIT_S) -> Any:
        """The JSON answer of ``POST route``: the supervisor must show it answers within
        ``timeout_s`` (``GET /readyz``), then has ``wait_s`` float seconds to carry the
        command out (a start waits for its server to be ready).

        Raises:
            ControlError: as `get`.
        """
        self.answer("GET", "/readyz", limit_s=self.timeout_s)
        return _checked(self.answer("POST", route, limit_s=wait_s)).json()

    def lines(
        self, route: str, params: dict[str, str | int], *, follow: bool = False
    ) -> Iterator[dict[str, Any]]:
        """The NDJSON items of ``GET route?params`` as they come. Without ``follow`` all of them
        must come within ``timeout_s``; a follow shows first that the supervisor answers
        (``GET /readyz`` within ``timeout_s``), then waits for items without end. The
        iterator ends when the reply ends (for a follow: the supervisor stopped).

        Raises:
            ControlError: as `get`; the reply was cut (exit 1).
        """
        if follow:
            self.answer("GET", "/readyz", limit_s=self.timeout_s)
            params = {**params, "follow": 1}
        limit_s = None if follow else self.timeout_s
        reply = _checked(self.answer("GET", route, params, limit_s=limit_s, stream=True))
        try:
            for line in reply.iter_lines():
                if line:
                    yield json.loads(line)
        except httpx.TimeoutException:
            raise self._silent(self.timeout_s) from None
        except httpx.HTTPError as error:
            raise ControlError(f"the supervisor went away: {error}", EXIT_ERROR) from None
        finally:
            reply.close()

    def answer(
        self,
        method: str,
        route: str,
        params: dict[str, str | int] | None = None,
        *,
        limit_s: float | None,
        stream: bool = False,
    ) -> httpx.Response:
        """The supervisor's reply to ``method route``, whatever its status. A busy socket
        (``EAGAIN``) is tried again until ``timeout_s`` has passed; ``limit_s`` then bounds
        the wait for the reply, float seconds (None: no bound).

        Raises:
            ControlError: no supervisor is running (refused; exit 3), it is busy or did
                not answer in time, or it cannot be reached (exit 1).
        """
        deadline = time.monotonic() + self.timeout_s
        pause = FIRST_PAUSE_S
        while True:
            remaining = max(deadline - time.monotonic(), MIN_WAIT_S)
            timeout = httpx.Timeout(limit_s, connect=remaining, pool=remaining)
            request = self.http.build_request(method, route, params=params, timeout=timeout)
            try:
                return self.http.send(request, stream=stream)
            except httpx.ConnectError as error:
                if not _busy(error):
                    raise self._unreachable(error) from None
                if time.monotonic() + pause > deadline:
                    raise ControlError(
                        f"the supervisor at {self.path} is busy: its control socket took no "
                        f"connection within {float(self.timeout_s)} s",
                        EXIT_ERROR,
                    ) from None
            except httpx.TimeoutException:
                raise self._silent(limit_s) from None
            except httpx.HTTPError as error:
                raise ControlError(f"the supervisor did not answer: {error}", EXIT_ERROR) from None
            time.sleep(pause)
            pause = min(pause * 2, MAX_PAUSE_S)

    def _silent(self, waited_s: float | None) -> ControlError:
        return ControlError(
            f"the supervisor at {self.path} did not answer within {float(waited_s or 0)} s",
            EXIT_ERROR,
        )

    def _unreachable(self, error: httpx.ConnectError) -> ControlError:
        cause = _os_error(error)
        if isinstance(cause, PermissionError) or "Permission denied" in str(error):
            why = "permission denied (the supervisor runs as another user?)"
            return ControlError(f"cannot reach the supervisor at {self.path}: {why}", EXIT_ERROR)
        if cause is None or cause.errno in (errno.ECONNREFUSED, errno.ENOENT):
            return ControlError(
                f"no supervisor is running (nothing answers at {self.path})", EXIT_NO_SUPERVISOR
            )
        why = cause.strerror or str(cause)
        return ControlError(f"cannot reach the supervisor at {self.path}: {why}", EXIT_ERROR)


def _await_socket(path: Path, timeout_s: float) -> None:
    """Wait for a socket at ``path`` when a supervisor holds its state directory (it makes
    a removed socket again within a second).

    Raises:
        ControlError: no supervisor holds it (exit 3), or its socket did not come back
            within ``timeout_s`` (exit 1, naming the supervisor's pid).
    """
    holder = lock_holder(path.parent)
    if holder is None:
        raise ControlError(f"no supervisor is running (no socket at {path})", EXIT_NO_SUPERVISOR)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(SOCKET_POLL_S)
        if path.is_socket():
            return
    raise ControlError(
        f"a supervisor ({holder}) holds the state directory {path.parent}, but its control "
        f"socket {path} is gone and did not come back within {float(timeout_s)} s: it "
        "cannot be reached; stop it (kill -TERM) and start it again",
        EXIT_ERROR,
    )


def _usable(path: Path) -> Path:
    """``path``, or the read-only socket beside it when only that one lets us in (a member
    of the supervisor's read group: reads work, commands are refused)."""
    read_only = path.with_name(READ_ONLY_SOCKET)
    if not os.access(path, os.W_OK) and read_only.is_socket() and os.access(read_only, os.W_OK):
        return read_only
    return path


def _os_error(error: BaseException) -> OSError | None:
    """The `OSError` under an httpx error (httpx wraps httpcore's, which wraps it)."""
    seen: BaseException | None = error
    while seen is not None and not isinstance(seen, OSError):
        seen = seen.__cause__ or seen.__context__
    return seen


def _busy(error: httpx.ConnectError) -> bool:
    """Whether the connect failed because the socket's accept queue is full."""
    cause = _os_error(error)
    return cause is not None and cause.errno in (errno.EAGAIN, errno.EWOULDBLOCK)


def _checked(reply: httpx.Response) -> httpx.Response:
    """``reply`` when it is a success.

    Raises:
        ControlError: the supervisor answered with an error (exit 1; 2 for
            ``invalid-config``).
    """
    if reply.is_success:
        return reply
    reply.read()
    reply.close()
    code, message = _error_of(reply)
    status = EXIT_BAD_INPUT if code == "invalid-config" else EXIT_ERROR
    raise ControlError(message, status, code)


def _error_of(reply: httpx.Response) -> tuple[str, str]:
    """The ``{"error": {"code", "message"}}`` of an error answer, or its status in words."""
    try:
        error = reply.json()["error"]
        return str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        return f"http-{reply.status_code}", f"HTTP {reply.status_code}: {reply.text[:200]}"
