"""One state directory, one supervisor: an exclusive lock on ``data_root/supervisor.lock``.

Issue 8 item 9. Two supervisors on one ``data_root`` would each reap the other's servers
as orphans and write over each other's instance directories. The lock is ``flock(2)``: the
kernel drops it when its holder's descriptor closes, however the holder ends (SIGKILL
included), so a stale lock file from a dead process never blocks, and no pid is guessed.
The file holds the holder's pid, for the refusal's message only.

Within one process the lock is shared: the CLI opens one runtime per flavor and mode, all
on the same ``data_root``, and they are one supervisor (one process, one orphan reaper that
knows its own servers). Each `acquire_state_lock` adds a holder and each `StateLock.release`
removes one; the lock is let go with the last.

Blocking (opens, locks, writes a few bytes): async code calls it in a thread.
"""

from __future__ import annotations

import fcntl
import os
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


def acquire_state_lock(data_root: Path) -> StateLock:
    """Take ``data_root``'s supervisor lock at once (never waits), creating the directory.

    Returns:
        A holder; the lock is held until every holder in this process has released it.

    Raises:
        InvalidState: another process holds it: ``"data_root /x is in use by another
            supervisor (pid 1234); one state directory has one supervisor"``.
        BackendError: the directory or the lock file cannot be made or opened.
    """
    try:
        data_root.mkdir(parents=True, exist_ok=True)
        key = data_root.resolve(strict=True)
    except OSError as error:
        raise BackendError(f"cannot use data_root {data_root}: {error}") from error
    with _mutex:
        held = _held.get(key)
        if held is None:
            held = _held[key] = _Held(_lock(key))
        held.holders += 1
    return StateLock(key)


def _lock(data_root: Path) -> int:
    path = data_root / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise BackendError(f"cannot open the lock file {path}: {error}") from error
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise InvalidState(
            f"data_root {data_root} is in use by another supervisor ({holder}); "
            "one state directory has one supervisor"
        ) from None
    except OSError as error:
        os.close(fd)
        raise BackendError(f"cannot lock {path}: {error}") from error
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as error:
        os.close(fd)
        raise BackendError(f"cannot write our pid into {path}: {error}") from error
    return fd


def _holder(fd: int) -> str:
    """``"pid 1234"`` from the lock file, or why not. The holder writes its pid right
    after it locks, so an empty file is read again for up to `_PID_WAIT_S` (blocking)."""
    deadline = time.monotonic() + _PID_WAIT_S
    while True:
        text = os.pread(fd, _MAX_PID_BYTES, 0).decode(errors="replace").strip()
        if text.isdigit():
            return f"pid {text}"
        if time.monotonic() >= deadline:
            return "its pid is not written yet"
        time.sleep(0.005)
