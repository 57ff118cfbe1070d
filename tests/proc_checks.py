"""Process checks shared by the tests: is a process gone, who is left in a process group.

PID 1 here does not reap orphans, so a zombie counts as gone everywhere.
"""

from __future__ import annotations

import os

import psutil


def is_gone(pid: int) -> bool:
    """True when ``pid`` no longer runs: absent, or a zombie."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) pids in process group ``pgid``."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process.pid)
        except (OSError, psutil.Error):
            continue  # gone while we looked
    return members


def group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` still has a member (a zombie leader counts)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
