"""Serving the control API: hypercorn's trio worker on a Unix socket, and optionally on a
loopback TCP port with a bearer token.

The Unix socket is ``<state_dir>/control.sock``, mode 0600, set between ``bind`` and
``listen`` so no one connects before it (a state directory we create is mode 0700). Only
our own user and root can connect to it, the same set a check of the peer's credentials
(``SO_PEERCRED``) would admit; that check itself is not made: hypercorn gives an ASGI app no
handle on the connection's socket, and trio accepts only a plain ``socket.socket`` as a
listener, so the accept cannot be wrapped without copying hypercorn's private worker.

A socket file left by a supervisor that died is removed (nothing answers on it); one where
a supervisor answers makes `serve_control` refuse to start. The TCP listener binds only a
loopback address, and its requests must carry the token of ``token_file``
(`control_token.read_token`, `control_app.BearerOnTcp`).
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import cast

import trio
from hypercorn.config import Config, Sockets
from hypercorn.trio.run import worker_serve
from hypercorn.typing import ASGIFramework
from hypercorn.utils import wrap_app

from .._config.state_dir import CONTROL_SOCKET as CONTROL_SOCKET
from .._config.state_dir import control_socket_path as control_socket_path
from .._errors import InvalidConfig, InvalidState
from .control_app import ControlledFleet, control_app
from .control_token import read_token

BACKLOG = socket.SOMAXCONN
"""The listen backlog: connections the kernel holds while the server is busy (the kernel
caps it at ``net.core.somaxconn``). A full queue makes a client's connect fail with
``EAGAIN``, which the CLI reports as busy, not as no supervisor."""

GRACE_S = 1.0
"""How long requests under way may take once the server was told to stop, float seconds."""

log = logging.getLogger("inferactors.control")


class _NoBanner(logging.Filter):
    """Drops hypercorn's start-up banner ("Running on ... (CTRL + C to quit)"): Ctrl-C is
    not how a supervisor is stopped, and `inferactors run` says where it listens itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Running on ")


log.addFilter(_NoBanner())


def _answers(path: Path) -> bool:
    """Whether something accepts connections on the Unix socket at ``path`` (blocking,
    bounded by a 1 s timeout)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except OSError as error:
            return error.errno not in (errno.ECONNREFUSED, errno.ENOENT)
    return True


def _clear_stale(path: Path) -> None:
    """Remove a control socket nothing answers on.

    Raises:
        InvalidState: a supervisor answers there, or the path is not a socket.
    """
    if not path.exists() and not path.is_symlink():
        return
    if not path.is_socket() or path.is_symlink():
        raise InvalidState(f"{path} exists and is not a socket; not touching it")
    if _answers(path):
        raise InvalidState(f"another supervisor is already serving at {path}")
    path.unlink()
    log.info("removed a stale control socket at %s", path)


def _unix_socket(path: Path) -> socket.socket:
    """The listening control socket at ``path``, mode 0600 before it listens.

    Raises:
        InvalidState: as `_clear_stale`.
        InvalidConfig: the path is too long for a Unix socket, or cannot be bound.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _clear_stale(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        os.chmod(path, 0o600)
        sock.listen(BACKLOG)
    except OSError as error:
        sock.close()
        raise InvalidConfig(f"cannot listen on {path}: {error.strerror or error}") from None
    return sock


def _tcp_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on the loopback ``host``.

    Raises:
        InvalidConfig: ``host`` is not a loopback address, or the port cannot be bound.
    """
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise InvalidConfig(f"control host {host!r} is not an IP address") from None
    if not address.is_loopback:
        raise InvalidConfig(f"control host {host} is not loopback; the control API stays local")
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError as error:
        sock.close()
        raise InvalidConfig(f"cannot listen on {host}:{port}: {error.strerror}") from None
    return sock


def _config() -> Config:
    config = Config()
    config.errorlog = log
    config.accesslog = None
    config.graceful_timeout = GRACE_S
    return config


def _remove_if_ours(path: Path, inode: int) -> None:
    try:
        if path.lstat().st_ino == inode:
            path.unlink()
    except FileNotFoundError:
        pass


async def serve_control(
    fleet: ControlledFleet,
    *,
    state_dir: Path,
    tcp_port: int | None = None,
    tcp_host: str = "127.0.0.1",
    token_file: Path | None = None,
    until: Callable[[], Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the control API over ``fleet`` until cancelled, or until ``until`` returns
    (module docstring).

    Args:
        fleet: The supervisor's fleet.
        state_dir: Where ``control.sock`` is made (created, mode 0700, when missing).
        tcp_port: Also listen on ``tcp_host:tcp_port`` (0: any free port); needs
            ``token_file``.
        tcp_host: The TCP listener's address; only loopback is accepted.
        token_file: The bearer token's file (`control_token.read_token`).
        until: When it returns, the server stops taking connections, gives the requests
            under way `GRACE_S` to finish, and returns. ``inferactors run`` passes the
            fleet's closing: follow streams end cleanly with the fleet's last events.
        task_status: Started with the bound addresses (``["http://unix:/...",
            "http://127.0.0.1:8765"]``) once both listen.

    Raises:
        InvalidConfig: a TCP port without a token file, a bad token file, a non-loopback
            host, or an address that cannot be bound.
        InvalidState: another supervisor answers on the socket, or its path is not a socket.

    Cancellation stops the server at once (open follow streams are cut) and removes the
    socket file, if it is still ours.
    """
    token = _token(tcp_port, token_file)
    path = control_socket_path(state_dir)
    listeners = [await trio.to_thread.run_sync(_unix_socket, path)]
    inode = path.lstat().st_ino
    try:
        if tcp_port is not None:
            listeners.append(_tcp_socket(tcp_host, tcp_port))
        config = _config()
        # starlette's ASGI types and hypercorn's describe the same protocol differently
        asgi = cast(ASGIFramework, control_app(fleet, token=token))
        app = wrap_app(asgi, config.wsgi_max_body_size, "asgi")
        sockets = Sockets(secure_sockets=[], insecure_sockets=listeners, quic_sockets=[])
        await worker_serve(
            app, config, sockets=sockets, shutdown_trigger=until, task_status=task_status
        )
    finally:
        for listener in listeners:
            listener.close()
        _remove_if_ours(path, inode)


def _token(tcp_port: int | None, token_file: Path | None) -> str | None:
    if tcp_port is None:
        return None
    if token_file is None:
        raise InvalidConfig("a control port needs a token file (--control-token-file)")
    return read_token(token_file)
