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
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import cast

import attrs
import trio
from hypercorn.config import Config
from hypercorn.typing import AppWrapper, ASGIFramework
from hypercorn.utils import wrap_app
from starlette.types import ASGIApp

from .._config.state_dir import CONTROL_SOCKET as CONTROL_SOCKET
from .._config.state_dir import READ_ONLY_SOCKET as READ_ONLY_SOCKET
from .._config.state_dir import control_socket_path as control_socket_path
from .._config.state_dir import read_only_socket_path as read_only_socket_path
from .._edges.state_lock import retake_state_lock
from .._errors import BackendError, InvalidConfig, InvalidState
from .asgi_worker import serve_asgi
from .control_app import ControlledFleet, Page, ReadOnly, control_app
from .control_token import read_token

WATCH_S = 1.0
"""How often the socket files are looked at (a vanished one is made again), seconds."""
_UNIX_PATH_MAX = 108
BACKLOG = socket.SOMAXCONN
"""The listen backlog: connections the kernel holds while the server is busy (the kernel
caps it at ``net.core.somaxconn``). A full queue makes a client's connect fail with
``EAGAIN``, which the CLI reports as busy, not as no supervisor."""

GRACE_S = 1.0
"""How long requests under way may take once the server was told to stop, float seconds:
a write still blocked then (a client that does not read) is cut (`asgi_worker`)."""

log = logging.getLogger("inferactors.control")


class NoBanner(logging.Filter):
    """Drops hypercorn's start-up banner ("Running on ... (CTRL + C to quit)"): Ctrl-C is
    not how a supervisor is stopped, and `inferactors run` says where it listens itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Running on ")


log.addFilter(NoBanner())


@attrs.frozen
class SocketAccess:
    """Who may use the Unix sockets besides our own user and root: the members of
    ``group`` (a gid) the full control socket, those of ``read_group`` a read-only one
    (``control-ro.sock``, GET and HEAD only). None: nobody else (mode 0600)."""

    group: int | None = None
    read_group: int | None = None


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


def _unix_socket(path: Path, group: int | None = None) -> socket.socket:
    """The listening socket at ``path``: mode 0600, or 0660 owned by ``group``, set before
    it listens; its directory is made (0700) when missing.

    Raises:
        InvalidState: as `_clear_stale`.
        InvalidConfig: the path is too long for a Unix socket.
        BackendError: the directory or the socket cannot be made (permissions, a full or
            read-only file system).
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        _clear_stale(path)
    except OSError as error:
        raise BackendError(f"cannot make the control socket {path}: {_why(error)}") from None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        if group is not None:
            os.chown(path, -1, group)
        os.chmod(path, 0o600 if group is None else 0o660)
        sock.listen(BACKLOG)
    except OSError as error:
        sock.close()
        if len(os.fsencode(path)) >= _UNIX_PATH_MAX:
            raise InvalidConfig(f"cannot listen on {path}: the path is too long") from None
        raise BackendError(f"cannot listen on {path}: {_why(error)}") from None
    return sock


def _why(error: OSError) -> str:
    return error.strerror or str(error)


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
    except OSError as error:  # a state directory made unwritable under us: say it, go on
        log.warning("cannot remove the control socket %s: %s", path, _why(error))


async def serve_control(
    fleet: ControlledFleet,
    *,
    state_dir: Path,
    tcp_port: int | None = None,
    tcp_host: str = "127.0.0.1",
    token_file: Path | None = None,
    until: Callable[[], Awaitable[None]] | None = None,
    hurry: Callable[[], Awaitable[None]] | None = None,
    access: SocketAccess = SocketAccess(),
    page: Page | None = None,
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
            A client that does not read is cut then (its write waits `GRACE_S` at most),
            and while serving once one write waited `asgi_worker.WRITE_S`.
        hurry: When it returns, every connection is cut at once, with no grace
            (``inferactors run`` passes a second SIGTERM or SIGINT).
        access: Which groups may use the sockets (`SocketAccess`); with one, the state
            directory becomes traversable (0711: nothing in it can be listed).
        page: The web page (``ui_app.WebPage``) to serve beside the API, on every socket
            (the read-only one refuses its commands) and on the TCP listener.
        task_status: Started with the bound addresses (``["http://unix:/...",
            "http://127.0.0.1:8765"]``) once all listen.

    A socket file that vanishes (removed by hand, its directory too) is made again within
    `WATCH_S`, and said in the log; requests under way on the old one go on. A removed
    state directory that this process locks (`state_lock`) is first made again with its
    mode and locked again (`state_lock.retake_state_lock`).

    Raises:
        InvalidConfig: a TCP port without a token file, a bad token file, a non-loopback
            host, an address that cannot be bound, a socket path too long.
        InvalidState: another supervisor answers on the socket, or its path is not a socket.
        BackendError: a socket cannot be made, at start or when made again.

    Cancellation stops the server at once (open follow streams are cut) and removes the
    socket files, if they are still ours.
    """
    token = _token(tcp_port, token_file)
    full = _wrapped(control_app(fleet, token=token, page=page))
    sockets = [_Socket(control_socket_path(state_dir), full, None)]
    if access.group is not None:
        sockets[0] = attrs.evolve(sockets[0], group=access.group)
    if access.read_group is not None:
        read_only = _wrapped(ReadOnly(control_app(fleet, page=page)))
        sockets.append(_Socket(read_only_socket_path(state_dir), read_only, access.read_group))
    if access.group is not None or access.read_group is not None:
        await trio.to_thread.run_sync(_traversable, state_dir)
    made = [await trio.to_thread.run_sync(_unix_socket, p.path, p.group) for p in sockets]
    try:
        tcp = [] if tcp_port is None else [_tcp_socket(tcp_host, tcp_port)]
    except InvalidConfig:
        for place, listener in zip(sockets, made, strict=True):
            _remove_if_ours(place.path, place.path.lstat().st_ino)
            listener.close()
        raise
    ended = trio.Event()
    for place in sockets:
        place.hurry = hurry
    try:
        async with trio.open_nursery() as nursery:
            bound = []
            for number, (place, listener) in enumerate(zip(sockets, made, strict=True)):
                listeners = [listener, *(tcp if number == 0 else [])]
                bound += await nursery.start(place.serve, ended.wait, listeners)
            nursery.start_soon(_watch, sockets, ended)
            task_status.started(bound)
            await (until or trio.sleep_forever)()
            ended.set()
    except BaseExceptionGroup as group:
        raise _single(group) from None


@attrs.define(eq=False)
class _Socket:
    """One Unix socket of the API: its path, its app, its group, and the inode of the
    newest listener made for it (one more each time the file vanished)."""

    path: Path
    app: AppWrapper
    group: int | None
    inode: int | None = None
    hurry: Callable[[], Awaitable[None]] | None = None

    async def serve(
        self,
        ended: Callable[[], Awaitable[None]],
        listeners: list[socket.socket] | None = None,
        *,
        task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve ``listeners`` (its Unix socket first; None: make it now) until ``ended``."""
        if listeners is None:
            listeners = [await trio.to_thread.run_sync(_unix_socket, self.path, self.group)]
        inode = self.inode = self.path.lstat().st_ino
        try:
            await serve_asgi(
                self.app, _config(), listeners, ended, hurry=self.hurry, task_status=task_status
            )
        finally:
            for each in listeners:
                each.close()
            _remove_if_ours(self.path, inode)

    def vanished(self) -> bool:
        """Whether the socket file is gone, or is another file now."""
        try:
            return self.path.lstat().st_ino != self.inode
        except FileNotFoundError:
            return True


async def _watch(sockets: list[_Socket], ended: trio.Event) -> None:
    """Make a vanished socket again, every `WATCH_S`, until ``ended`` (its new servers
    then end as the first ones do).

    Raises:
        BackendError: it cannot be made again (the supervisor cannot be reached: it stops).
    """
    async with trio.open_nursery() as nursery:
        while not ended.is_set():
            with trio.move_on_after(WATCH_S):
                await ended.wait()
            for place in sockets:
                if not ended.is_set() and place.vanished():
                    await _retake_state_dir(place.path.parent)
                    log.warning("the control socket %s vanished; making it again", place.path)
                    try:
                        await nursery.start(place.serve, ended.wait)
                    except InvalidState as error:
                        raise BackendError(f"the control socket vanished: {error}") from None


async def _retake_state_dir(state_dir: Path) -> None:
    """When the state directory itself was removed under a supervisor that locks it, make
    it again with its mode and lock it (`retake_state_lock`), and say so.

    Raises:
        BackendError: it cannot be made or locked again (another process took it).
    """
    try:
        if await trio.to_thread.run_sync(retake_state_lock, state_dir):
            log.warning("the state directory %s vanished; made it again and locked it", state_dir)
    except InvalidState as error:
        raise BackendError(f"the state directory vanished: {error}") from None


def _single(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception inside (nested) single-member groups, else the group itself."""
    inner: BaseException = group
    while isinstance(inner, BaseExceptionGroup) and len(inner.exceptions) == 1:
        inner = inner.exceptions[0]
    return inner


def _traversable(state_dir: Path) -> None:
    """Let other users through ``state_dir`` (add x for group and others: 0711 from 0700),
    so a group's member reaches its socket; nothing in it can be listed or read."""
    try:
        mode = stat.S_IMODE(state_dir.stat().st_mode)
        os.chmod(state_dir, mode | 0o011)
    except OSError as error:
        raise BackendError(f"cannot open {state_dir} to a group: {_why(error)}") from None


def _wrapped(app: ASGIApp) -> AppWrapper:
    # starlette's ASGI types and hypercorn's describe the same protocol differently
    asgi = cast(ASGIFramework, app)
    return wrap_app(asgi, _config().wsgi_max_body_size, "asgi")


def _token(tcp_port: int | None, token_file: Path | None) -> str | None:
    if tcp_port is None:
        return None
    if token_file is None:
        raise InvalidConfig("a control port needs a token file (--control-token-file)")
    return read_token(token_file)
