"""One state directory, one supervisor: an exclusive lock on the ``data_root`` directory.

Two supervisors on one ``data_root`` would each reap the other's servers
as orphans and write over each other's instance directories. The lock is ``flock(2)`` on
the directory's own descriptor: the kernel drops it when its holder's descriptor closes,
however the holder ends (SIGKILL included), so nothing stale ever blocks. It is the
directory, not a file in it, that is locked: a lock file could be unlinked and a second
supervisor would lock a new file of the same name (found by a hostile
tester). ``data_root/supervisor.lock`` holds the holder's pid, for the refusal's message
only; deleting it loses the pid, not the lock.

Within one process the lock is shared: the CLI opens one runtime per flavor and mode, all
on the same ``data_root``, and they are one supervisor (one process, one orphan reaper that
knows its own servers). Each `acquire_state_lock` adds a holder and each `StateLock.release`
removes one; the lock is let go with the last.

A ``data_root`` that already exists is used only when it is private to our user: one
owned by another user is refused; one of ours that others may write to (a Kubernetes
``emptyDir`` is 0777) is made private first (the mode we would create it with), then
refused if anything in it belongs to another user (a planted ``control.sock``): a local
user must never be able to swap what we serve or read there.

Blocking (opens, locks, writes a few bytes): async code calls it in a thread.
"""

from __future__ import annotations

import fcntl
import os
import stat
import threading
import time
from pathlib import Path

import attrs

from .._errors import BackendError, InvalidState

LOCK_NAME = "supervisor.lock"
"""The lock file's name inside ``data_root``."""

_MAX_PID_BYTES = 32
_PID_WAIT_S = 0.1

_mutex = threading.Lock()
_held: dict[Path, _Held] = {}  # this process's locks, by resolved data_root


@attrs.define(eq=False)
class _Held:
    fd: int
    holders: int = 0


@attrs.define(eq=False)
class StateLock:
    """One holder of this process's lock on a ``data_root``; `release` it exactly once."""

    data_root: Path
    _released: bool = False

    def release(self) -> None:
        """Drop this holder; the last one closes the file, which lets the lock go."""
        if self._released:
            return
        self._released = True
        with _mutex:
            held = _held[self.data_root]
            held.holders -= 1
            if held.holders == 0:
                del _held[self.data_root]
                os.close(held.fd)


def acquire_state_lock(data_root: Path, mode: int = 0o700) -> StateLock:
    """Take ``data_root``'s supervisor lock at once (never waits), creating the directory
    with ``mode`` when it is missing (0700: private to our user; 0711 when servers run as
    another user and must reach their own directories in it, which nothing lets them
    list). An existing directory of ours keeps its mode unless others may write to it: it
    is then given ``mode`` (see the module docstring).

    Returns:
        A holder; the lock is held until every holder in this process has released it.

    Raises:
        InvalidState: another process holds it: ``"data_root /x is in use by another
            supervisor (pid 1234); one state directory has one supervisor"``.
        BackendError: the directory cannot be made, opened or locked, or the pid file
            cannot be written; it is owned by another user, or holds something of another
            user's while others could write to it (`_make_private`).
    """
    try:
        if not data_root.exists():
            data_root.parent.mkdir(parents=True, exist_ok=True)
            data_root.mkdir(mode=mode)
            os.chmod(data_root, mode)  # whatever the umask
        key = data_root.resolve(strict=True)
    except OSError as error:
        raise BackendError(
            f"cannot use data_root {data_root}: {error.strerror or error}"
        ) from error
    with _mutex:
        held = _held.get(key)
        if held is None:
            held = _held[key] = _Held(_lock(key, mode))
        held.holders += 1
    return StateLock(key)


def retake_state_lock(data_root: Path) -> bool:
    """Make ``data_root`` again and lock it when it was removed (or replaced) while this
    process holds its lock: a lock on a removed directory guards nothing, and a directory
    made by whatever writes there next would get that writer's mode. The new directory
    gets the removed one's mode (0711 stays 0711); the old descriptor is closed.

    Returns:
        True when it was made and locked again; False when it is still the locked one, or
        this process holds no lock on it.

    Raises:
        InvalidState: another process took the new directory's lock first.
        BackendError: it cannot be made, opened, locked or checked.
    """
    key = data_root.resolve()
    with _mutex:
        held = _held.get(key)
        if held is None:
            return False
        was = os.fstat(held.fd)
        try:
            now = os.stat(key)
            if (now.st_dev, now.st_ino) == (was.st_dev, was.st_ino):
                return False
        except FileNotFoundError:
            pass
        mode = stat.S_IMODE(was.st_mode)
        try:
            key.mkdir(mode=mode, parents=True, exist_ok=True)
            os.chmod(key, mode)  # whatever the umask
        except OSError as error:
            raise BackendError(f"cannot make data_root {key} again: {error}") from error
        fd = _lock(key, mode)
        os.close(held.fd)
        held.fd = fd
        return True


def _lock(data_root: Path, mode: int) -> int:
    """Lock the directory itself (its own descriptor: a path cannot be swapped under it),
    make sure it is private (`_make_private`), then write our pid into `LOCK_NAME` for the
    messages of those refused."""
    try:
        fd = os.open(data_root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        raise BackendError(f"cannot open data_root {data_root}: {error}") from error
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise InvalidState(
            f"data_root {data_root} is in use by another supervisor ({_holder(data_root)}); "
            "one state directory has one supervisor"
        ) from None
    except OSError as error:
        os.close(fd)
        raise BackendError(f"cannot lock {data_root}: {error}") from error
    try:
        _make_private(fd, data_root, mode)
    except BaseException:
        os.close(fd)
        raise
    path = data_root / LOCK_NAME
    try:
        pid_fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(pid_fd, 0)
            os.pwrite(pid_fd, f"{os.getpid()}\n".encode(), 0)
        finally:
            os.close(pid_fd)
    except OSError as error:
        os.close(fd)
        raise BackendError(f"cannot write our pid into {path}: {error}") from error
    return fd


_SHARED_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _make_private(fd: int, data_root: Path, mode: int) -> None:
    """Refuse a ``data_root`` (open as ``fd``) of another user; give one of ours that others
    may write to ``mode``, then refuse it if an entry in it is another user's.

    Raises:
        BackendError: ``"data_root /x is owned by uid 65534 (mode 0777), not by this
            supervisor's user (uid 0); ..."`` or ``"data_root /x was writable by others
            (mode 0777) and holds /x/control.sock of uid 65534; ..."``.
    """
    try:
        info = os.fstat(fd)
        uid, was = os.geteuid(), stat.S_IMODE(info.st_mode)
        if info.st_uid != uid:
            raise BackendError(
                f"data_root {data_root} is owned by uid {info.st_uid} (mode {was:04o}), not "
                f"by this supervisor's user (uid {uid}); another user could change what "
                "we serve: use a directory of ours (a new one under it is made private)"
            )
        if not was & _SHARED_WRITE:
            return
        os.fchmod(fd, mode)  # from now on nobody else adds to it
        with os.scandir(fd) as entries:
            foreign = [
                (e.name, o) for e in entries if (o := e.stat(follow_symlinks=False).st_uid) != uid
            ]
    except OSError as error:
        raise BackendError(f"cannot check data_root {data_root}: {error}") from error
    if foreign:
        name, owner = foreign[0]
        raise BackendError(
            f"data_root {data_root} was writable by others (mode {was:04o}) and holds "
            f"{data_root / name} of uid {owner}; not using it: remove it or use a new directory"
        )


def lock_holder(data_root: Path) -> str | None:
    """Who holds ``data_root``'s lock, without taking it: ``"pid 1234"`` (or why its pid is
    unknown) while a supervisor holds it, None when none does or the directory cannot be
    opened. Blocking (a few system calls): the CLI's, to tell a supervisor whose control
    socket is gone from none at all."""
    try:
        fd = os.open(data_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder(data_root)
    except OSError:
        return None
    finally:
        os.close(fd)  # a shared lock we took goes with the descriptor
    return None


def _holder(data_root: Path) -> str:
    """``"pid 1234"`` from `LOCK_NAME`, or why not. The holder writes its pid right after it
    locks, so an empty or missing file is read again for up to `_PID_WAIT_S` (blocking)."""
    path = data_root / LOCK_NAME
    deadline = time.monotonic() + _PID_WAIT_S
    while True:
        text = _read_pid_file(path)
        if text.isdigit():
            return f"pid {text}"
        if time.monotonic() >= deadline:
            return "its pid is not written yet" if text == "" else "its pid is unknown"
        time.sleep(0.005)


def _read_pid_file(path: Path) -> str:
    """The stripped text of the pid file ("" when empty), "?" when it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return "?"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "?"
        return os.pread(fd, _MAX_PID_BYTES, 0).decode(errors="replace").strip()
    except OSError:
        return "?"
    finally:
        os.close(fd)
