"""One cgroup (v2) per managed server, under the supervisor's delegated subtree, so that a
stop ends everything the server started, even what left its process group or daemonized
itself, and a later life finds what an earlier one left: `CgroupTree`, `ServerCgroup`.

Where the host allows it: cgroup v2 mounted, and the supervisor's own cgroup delegated to
it (writable, and not the root of the hierarchy: systemd's ``Delegate=yes`` in
``contrib/systemd/inferactors.service`` gives the service its own). `CgroupTree.delegated`
answers None otherwise, and the process-group and pid tracking (``escapees.py``,
``orphans.py``) remain the only means. Layout: ``<our cgroup>/inferactors/<instance id>/``.

- A server enters its cgroup between fork and exec: the spawn opens `ServerCgroup.procs_fd`
  in the parent and the child writes ``0`` to it (`enter_self`) before it changes user
  (a ``run_as`` user may not write root's ``cgroup.procs``). Whatever it forks after that
  stays in the cgroup, whatever session or process group it makes.
- `ServerCgroup.kill` writes ``1`` to ``cgroup.kill`` (Linux 5.14: the kernel SIGKILLs
  every member and any that forks meanwhile), else SIGKILLs each member until none is left,
  and waits (bounded) until it is empty. `ServerCgroup.signal` sends another signal (a
  SIGTERM for the grace) to every member.
- `CgroupTree.left_behind` lists the server cgroups that still have members: at start-up,
  what a SIGKILLed supervisor left; they are ours by place, whatever their pids became.

All of it is blocking file I/O on cgroupfs (a few system calls): call it in a worker thread.
Our own cgroup is read from ``/proc/self/cgroup`` (psutil has no cgroup call; the v2 line is
``0::<path>``) and the v2 mount from psutil's mount table.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from pathlib import Path

import attrs
import psutil

SUBTREE = "inferactors"
"""The directory under our cgroup that holds one cgroup per server."""
KILL_WAIT_S = 2.0
"""How long `ServerCgroup.kill` waits for the cgroup to empty, seconds."""
_POLL_S = 0.01


def cgroup2_mount() -> Path | None:
    """Where cgroup v2 is mounted (the unified hierarchy), or None."""
    for partition in psutil.disk_partitions(all=True):
        if partition.fstype == "cgroup2":
            return Path(partition.mountpoint)
    return None


def own_cgroup(proc_cgroup: Path = Path("/proc/self/cgroup")) -> str | None:
    """This process's cgroup v2 path (``/system.slice/inferactors.service``), or None."""
    try:
        text = proc_cgroup.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("0::"):
            return line[3:] or "/"
    return None


@attrs.frozen
class ServerCgroup:
    """The cgroup of one server: ``path`` is its directory."""

    path: Path

    @property
    def name(self) -> str:
        """Its instance id."""
        return self.path.name

    def procs_fd(self) -> int:
        """A descriptor on its ``cgroup.procs`` for the spawn's child (`enter_self`); the
        parent closes it after the spawn. Close-on-exec: the server never holds it."""
        return os.open(self.path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)

    def enter(self, pid: int) -> None:
        """Move ``pid`` (and nothing it forks before) into the cgroup."""
        (self.path / "cgroup.procs").write_text(f"{pid}\n")

    def members(self) -> list[int]:
        """The pids in it now (none when it is gone)."""
        try:
            text = (self.path / "cgroup.procs").read_text()
        except FileNotFoundError:
            return []
        return [int(word) for word in text.split()]

    def signal(self, signum: int) -> list[int]:
        """Send ``signum`` to every member; the pids it reached."""
        reached = []
        for pid in self.members():
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                continue
            reached.append(pid)
        return reached

    def kill(self, wait_s: float = KILL_WAIT_S) -> bool:
        """SIGKILL every member (and whatever they fork meanwhile); whether it is empty
        within ``wait_s`` seconds."""
        killer = self.path / "cgroup.kill"
        deadline = time.monotonic() + wait_s
        while True:
            if not self.members():
                return True
            if killer.exists():
                killer.write_text("1\n")
            else:
                self.signal(signal.SIGKILL)
            if time.monotonic() >= deadline:
                return not self.members()
            time.sleep(_POLL_S)

    def remove(self) -> bool:
        """Remove the cgroup once it is empty; whether it is gone."""
        try:
            self.path.rmdir()
        except FileNotFoundError:
            return True
        except OSError as error:
            if error.errno == errno.EBUSY:
                return False
            raise
        return True


def enter_self(fd: int) -> None:
    """In a spawned child, between fork and exec: move this process into the cgroup whose
    ``cgroup.procs`` ``fd`` is (`ServerCgroup.procs_fd`). Only system calls: safe after
    a fork."""
    os.write(fd, b"0")


@attrs.frozen
class CgroupTree:
    """The directory holding one cgroup per server (module docstring)."""

    root: Path

    @classmethod
    def at(cls, base: Path) -> CgroupTree:
        """The tree under ``base`` (a cgroup directory we may write), made if missing.

        Raises:
            OSError: it cannot be made.
        """
        root = base / SUBTREE
        root.mkdir(exist_ok=True)
        return cls(root)

    @classmethod
    def delegated(cls) -> CgroupTree | None:
        """The tree under our own cgroup when it is delegated to us (cgroup v2, writable,
        not the hierarchy's root), else None."""
        mount, own = cgroup2_mount(), own_cgroup()
        if mount is None or own is None or own == "/":
            return None  # the root of the hierarchy is no one's to hand out
        base = mount / own.lstrip("/")
        if not (os.access(base, os.W_OK) and os.access(base / "cgroup.procs", os.W_OK)):
            return None
        try:
            return cls.at(base)
        except OSError:
            return None

    def server(self, instance_id: str) -> ServerCgroup:
        """The cgroup of ``instance_id``, made if missing.

        Raises:
            OSError: it cannot be made.
        """
        path = self.root / instance_id
        path.mkdir(exist_ok=True)
        return ServerCgroup(path)

    def left_behind(self) -> list[ServerCgroup]:
        """Every server cgroup that still has members, sorted by name."""
        found = []
        for path in sorted(self.root.iterdir()):
            if path.is_dir() and ServerCgroup(path).members():
                found.append(ServerCgroup(path))
        return found
