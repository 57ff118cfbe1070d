"""Talking to a running supervisor's control API from the CLI: find its socket, send a
request, read JSON or NDJSON back (synchronous, over the Unix socket: `control_http`).

The client commands import only this, `control_http` and the light modules they need (no
trio, httpx, hypercorn or starlette: ``tests/cli/test_cli_imports.py``), so a call costs
about what ``curl --unix-socket`` costs (``bench/bench_cli_latency.py``).

Exit statuses of the commands that use it: 0 done, 1 the supervisor answered with an error
(unknown instance, a command its state refuses, a failure) or did not answer in time (busy,
frozen), 2 bad arguments or an unusable run file (and a reload that found the run file
invalid), 3 no supervisor is running (no socket file, or the connection is refused).
"""

from __future__ import annotations

import errno
import http.client
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .._config.state_dir import (
    READ_ONLY_SOCKET,
)
from .control_http import Reply, exchange

EXIT_ERROR = 1
EXIT_BAD_INPUT = 2
EXIT_NO_SUPERVISOR = 3
DEFAULT_TIMEOUT_S = 10.0
"""How long the supervisor has to answer a request (``--timeout``), float seconds."""
COMMAND_WAIT_S = 900.0
"""How long stop and reload may take once the supervisor answered (``--wait``), float
seconds: a stop waits for its grace, a reload for what it restarts."""
START_WAIT_S = 600.0
"""How long start and restart wait for the instance to settle (``--wait``): running, or a
failure no waiting changes; float seconds (the default readiness deadline)."""
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


class ControlClient:
    """A synchronous client of one supervisor's control socket.

    Every exchange has a deadline: ``timeout_s`` for the supervisor to answer (a frozen
    supervisor is reported, not waited on forever). A connection refused, or no socket
    file, means no supervisor is running (exit 3), unless one holds the state directory:
    then its socket is being made again (bound and not yet listening, or not yet bound)
    and the connect is retried until the deadline; a full accept queue (``EAGAIN``) means
    a busy one, retried until the deadline (then exit 1). (A plain class: the client
    commands do not import attrs, see `control_http`.)
    """

    def __init__(self, path: Path, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.path = path
        self.timeout_s = timeout_s

    @classmethod
    def open(cls, path: Path, timeout_s: float = DEFAULT_TIMEOUT_S) -> ControlClient:
        """A client of the socket at ``path`` (nothing is sent yet); ``timeout_s`` is how
        long the supervisor has to answer each request, float seconds.

        Raises:
            ControlError: no socket there (exit 3).
        """
        if not path.is_socket():
            _await_socket(path, timeout_s)
        return cls(_usable(path), timeout_s)

    def close(self) -> None:
        """Nothing to release: each exchange has its own connection, closed with it."""

    def get(self, route: str, **params: str | int | float) -> Any:
        """The JSON answer of ``GET route``, within ``timeout_s``.

        Raises:
            ControlError: as `answer`, or the supervisor answered with an error (exit 1; 2
                for ``invalid-config``).
        """
        return self._json(self.answer("GET", route, params, limit_s=self.timeout_s))

    def post(
        self,
        route: str,
        wait_s: float = COMMAND_WAIT_S,
        params: dict[str, str | int | float] | None = None,
        *,
        check_first: bool = True,
    ) -> Any:
        """The JSON answer of ``POST route?params``: the supervisor must show it answers
        within ``timeout_s`` (``GET /readyz``; ``check_first=False``: the caller did), then
        has ``wait_s`` float seconds to carry the command out.

        Raises:
            ControlError: as `get`.
        """
        if check_first:
            self.answer("GET", "/readyz", limit_s=self.timeout_s).close()
        return self._json(self.answer("POST", route, params, limit_s=wait_s))

    def lines(
        self, route: str, params: dict[str, str | int | float], *, follow: bool = False
    ) -> Iterator[dict[str, Any]]:
        """The NDJSON items of ``GET route?params`` as they come. Without ``follow`` all of them
        must come within ``timeout_s``; a follow shows first that the supervisor answers
        (``GET /readyz`` within ``timeout_s``), then waits for items without end. The
        iterator ends when the reply ends (for a follow: the supervisor stopped).

        Raises:
            ControlError: as `get`; the reply was cut (exit 1).
        """
        if follow:
            self.answer("GET", "/readyz", limit_s=self.timeout_s).close()
            params = {**params, "follow": 1}
        limit_s = None if follow else self.timeout_s
        reply = _checked(self.answer("GET", route, params, limit_s=limit_s, stream=True))
        try:
            for line in reply.iter_lines():
                if line:
                    yield json.loads(line)
        except TimeoutError:
            raise self._silent(self.timeout_s) from None
        except (OSError, http.client.HTTPException) as error:
            raise ControlError(f"the supervisor went away: {_why(error)}", EXIT_ERROR) from None
        finally:
            reply.close()

    def answer(
        self,
        method: str,
        route: str,
        params: dict[str, str | int | float] | None = None,
        *,
        limit_s: float | None,
        stream: bool = False,
    ) -> Reply:
        """The supervisor's reply to ``method route``, whatever its status (its body read
        unless ``stream``). A busy socket (``EAGAIN``) is tried again until ``timeout_s``
        has passed; ``limit_s`` then bounds each wait for the reply, float seconds (None:
        no bound).

        Raises:
            ControlError: no supervisor is running (refused; exit 3), it is busy or did
                not answer in time, or it cannot be reached (exit 1).
        """
        deadline = time.monotonic() + self.timeout_s
        pause = FIRST_PAUSE_S
        while True:
            remaining = max(deadline - time.monotonic(), MIN_WAIT_S)
            try:
                reply = exchange(
                    str(self.path),
                    method,
                    route,
                    params,
                    connect_timeout_s=remaining,
                    read_timeout_s=limit_s,
                )
                if not stream:
                    _read_whole(reply)
                return reply
            except BlockingIOError as error:
                if error.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                    raise self._unreachable(error) from None
                if time.monotonic() >= deadline:
                    raise ControlError(
                        f"the supervisor at {self.path} is busy: its control socket took no "
                        f"connection within {float(self.timeout_s)} s",
                        EXIT_ERROR,
                    ) from None
            except TimeoutError:
                raise self._silent(limit_s) from None
            except (ConnectionRefusedError, FileNotFoundError) as error:
                if time.monotonic() >= deadline or not _held(self.path):
                    raise self._unreachable(error) from None
                # a supervisor holds the state directory: its socket is being made again
                # (bound, not yet listening, or not yet bound): wait within the deadline
            except PermissionError as error:
                raise self._unreachable(error) from None
            except (OSError, http.client.HTTPException) as error:
                why = _why(error)
                raise ControlError(f"the supervisor did not answer: {why}", EXIT_ERROR) from None
            time.sleep(min(pause, max(deadline - time.monotonic(), 0.0)))
            pause = min(pause * 2, MAX_PAUSE_S)

    def _json(self, reply: Reply) -> Any:
        try:
            return _checked(reply).json()
        except ValueError as error:
            raise ControlError(
                f"the supervisor's answer is not JSON: {error}", EXIT_ERROR
            ) from None
        finally:
            reply.close()

    def _silent(self, waited_s: float | None) -> ControlError:
        return ControlError(
            f"the supervisor at {self.path} did not answer within {float(waited_s or 0)} s",
            EXIT_ERROR,
        )

    def _unreachable(self, error: OSError) -> ControlError:
        if isinstance(error, PermissionError):
            why = "permission denied (the supervisor runs as another user?)"
            return ControlError(f"cannot reach the supervisor at {self.path}: {why}", EXIT_ERROR)
        if isinstance(error, ConnectionRefusedError | FileNotFoundError):
            return ControlError(
                f"no supervisor is running (nothing answers at {self.path})", EXIT_NO_SUPERVISOR
            )
        why = error.strerror or str(error)
        return ControlError(f"cannot reach the supervisor at {self.path}: {why}", EXIT_ERROR)


def _held(path: Path) -> bool:
    """Whether a supervisor holds the state directory of the control socket ``path``."""
    from .._edges.state_lock import lock_holder  # only when a connect failed: attrs

    return lock_holder(path.parent) is not None


def _await_socket(path: Path, timeout_s: float) -> None:
    """Wait for a socket at ``path`` when a supervisor holds its state directory (it makes
    a removed socket again within a second).

    Raises:
        ControlError: no supervisor holds it (exit 3), or its socket did not come back
            within ``timeout_s`` (exit 1, naming the supervisor's pid).
    """
    from .._edges.state_lock import lock_holder  # only when the socket is missing: attrs

    holder = lock_holder(path.parent)
    if holder is None:
        said = f"no supervisor is running (no socket at {path})"
        if not path.parent.exists():  # most often a data_root edited under a running one
            said += (
                f"; {path.parent} does not exist (yet): a supervisor just started makes it "
                "within seconds (try again); one whose run file's data_root "
                "was changed while it runs still uses the old one (pass it as --state-dir, "
                "or restart the supervisor to move)"
            )
        raise ControlError(said, EXIT_NO_SUPERVISOR)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(SOCKET_POLL_S)
        if path.is_socket():
            return
    raise ControlError(
        f"a supervisor ({holder}) holds the state directory {path.parent}, but its control "
        f"socket {path} did not appear within {float(timeout_s)} s: it is still starting "
        "(try again in a moment), or its socket is gone and it cannot be reached (if it "
        "stays so: stop it with kill -TERM and start it again)",
        EXIT_ERROR,
    )


def _usable(path: Path) -> Path:
    """``path``, or the read-only socket beside it when only that one lets us in (a member
    of the supervisor's read group: reads work, commands are refused)."""
    read_only = path.with_name(READ_ONLY_SOCKET)
    if not os.access(path, os.W_OK) and read_only.is_socket() and os.access(read_only, os.W_OK):
        return read_only
    return path


def _read_whole(reply: Reply) -> None:
    """Read the body now (the exchange's read timeout applies); a cut one is closed."""
    try:
        reply.read()
    except BaseException:
        reply.close()
        raise


def _why(error: BaseException) -> str:
    return (
        (error.strerror if isinstance(error, OSError) else None)
        or str(error)
        or type(error).__name__
    )


def _checked(reply: Reply) -> Reply:
    """``reply`` when it is a success.

    Raises:
        ControlError: the supervisor answered with an error (exit 1; 2 for
            ``invalid-config``).
    """
    if reply.is_success:
        return reply
    try:
        code, message = _error_of(reply)
    finally:
        reply.close()
    status = EXIT_BAD_INPUT if code == "invalid-config" else EXIT_ERROR
    raise ControlError(message, status, code)


def _error_of(reply: Reply) -> tuple[str, str]:
    """The ``{"error": {"code", "message"}}`` of an error answer, or its status in words."""
    try:
        body = reply.read()
    except (OSError, http.client.HTTPException):
        body = b""
    try:
        error = json.loads(body)["error"]
        return str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        text = body[:200].decode("utf-8", errors="replace")
        return f"http-{reply.status_code}", f"HTTP {reply.status_code}: {text}"
