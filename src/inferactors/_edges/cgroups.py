"""One cgroup (v2) per managed server, under the supervisor's delegated subtree, so that a
stop ends everything the server started, even what left its process group or daemonized
itself, and a later life finds what an earlier one left: `CgroupTree`, `ServerCgroup`.

Where the host allows it: cgroup v2 mounted, and the supervisor's own cgroup delegated to
it (writable, and not the root of the hierarchy: systemd's ``Delegate=yes`` in
``contrib/systemd/inferactors.service`` gives the service its own). `CgroupTree.delegated`
answers None otherwise, and the process-group, pidfd and subreaper tracking
(``descendants.py``, ``orphans.py``) remain the only means.

Layout: ``<our cgroup>/inferactors/<data root key>/<life>/<instance>-<8 hex>/``. The key
(`data_root_key`) keeps the servers of one ``data_root`` apart from any other runtime's in
the same cgroup; the *life* (`life_name`: the supervisor's pid and its start in clock ticks
since boot) says which supervisor made them, so a later life kills only the cgroups of a
life that is over (`CgroupTree.left_behind`), never a live runtime's; the suffix makes each
spawn's cgroup its own (a restart never meets its predecessor's).

- A server enters its cgroup between fork and exec: the spawn opens `ServerCgroup.procs_fd`
  in the parent and the exec helper writes ``0`` to it first of all, before it changes user
  (a ``run_as`` user may not write root's ``cgroup.procs``). Whatever it forks after that
  stays in the cgroup, whatever session or process group it makes, and a process of
  another user cannot move itself out (that takes write access to our ``cgroup.procs``).
- `ServerCgroup.signal` reaches each member through a pidfd opened and *then* checked to be
  in the cgroup still (never a reused pid); `ServerCgroup.request_kill` (the stop path:
  ``descendants.py``) writes ``1`` to ``cgroup.kill`` (Linux 5.14: the kernel SIGKILLs
  every member and any that forks meanwhile), else SIGKILLs each member, and does not wait:
  the caller watches `ServerCgroup.members` empty on its own clock.
- `cgroup.procs` lists live processes only: an exited member that waits to be reaped is no
  longer in it.

All of it is blocking file I/O on cgroupfs (a few system calls, microseconds each), none of
it waits: the single reads and writes may run on the event loop. A process's cgroup is read
from ``/proc/<pid>/cgroup`` (psutil has no cgroup call; the v2 line is ``0::<path>``) and
the v2 mount from psutil's mount table.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import logging
import os
import secrets
import signal
from pathlib import Path

import attrs
import psutil

_log = logging.getLogger(__name__)

SUBTREE = "inferactors"
"""The directory under our cgroup that holds the servers' cgroups."""
NO_CGROUP = (
    "no cgroup per server: %s; what a server starts is tracked by its process group, its "
    "tree (the server a child subreaper) and its session, and killed with it"
)
"""The debug line, once per process, where the host delegates no cgroup (``%s``: why)."""
_TICKS = 100
"""Starts are named in hundredths of a second since boot (the kernel's clock ticks)."""
_GONE = (errno.ENOENT, errno.ENODEV)
"""What a cgroup file answers once its cgroup is removed (or being removed)."""


@functools.cache
def cgroup2_mount() -> Path | None:
    """Where cgroup v2 is mounted (the unified hierarchy), or None; read once."""
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


def cgroup_of(pid: int) -> str | None:
    """The cgroup v2 path of process ``pid``, or None (gone, or no cgroup v2)."""
    return own_cgroup(Path(f"/proc/{pid}/cgroup"))


def data_root_key(data_root: Path) -> str:
    """The directory name of ``data_root``'s servers under the tree: 16 hex digits of the
    SHA-256 of its absolute path."""
    return hashlib.sha256(os.fsencode(os.path.abspath(data_root))).hexdigest()[:16]


def life_name(pid: int | None = None) -> str:
    """``<pid>-<start>`` of process ``pid`` (ours by default), its start in clock ticks since
    boot, which neither a clock step nor a reused pid can repeat.

    Raises:
        psutil.NoSuchProcess: there is no such process.
    """
    process = psutil.Process(pid)
    ticks = round((process.create_time() - psutil.boot_time()) * _TICKS)
    return f"{process.pid}-{ticks}"


def life_running(name: str) -> bool:
    """Whether the supervisor that `life_name` named is still running (a zombie is not); an
    unreadable name is not a life, so it counts as running and is never touched."""
    pid_text, _, ticks_text = name.partition("-")
    if not (pid_text.isdigit() and ticks_text.isdigit()):
        return True
    try:
        if psutil.Process(int(pid_text)).status() == psutil.STATUS_ZOMBIE:
            return False
        return life_name(int(pid_text)) == name
    except psutil.NoSuchProcess:
        return False


@attrs.frozen
class ServerCgroup:
    """The cgroup of one spawn: ``path`` is its directory."""

    path: Path

    @property
    def name(self) -> str:
        """``<instance>-<8 hex>``."""
        return self.path.name

    def procs_fd(self) -> int:
        """A descriptor on its ``cgroup.procs`` for the spawn's child (the exec helper,
        ``spawn_child.py``, writes ``0`` to it); the parent closes it after the spawn.
        Close-on-exec: the server never holds it."""
        return os.open(self.path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)

    def members(self) -> list[int]:
        """The live pids in it now (none when it is gone)."""
        try:
            text = (self.path / "cgroup.procs").read_text()
        except OSError as error:
            if error.errno in _GONE:
                return []
            raise
        return [int(word) for word in text.split()]

    def holds(self, pid: int) -> bool:
        """Whether process ``pid`` is in this cgroup now."""
        return cgroup_path(pid) == self.path

    def member_fds(self) -> dict[int, int]:
        """A pidfd for each member, opened and then checked to be in this cgroup still, so
        it names that process for good. The caller closes them."""
        fds: dict[int, int] = {}
        for pid in self.members():
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue
            if self.holds(pid):
                fds[pid] = fd
            else:
                os.close(fd)
        return fds

    def signal(self, signum: int) -> list[int]:
        """Send ``signum`` to every member (through pidfds: `member_fds`); the pids it reached."""
        reached = []
        fds = self.member_fds()
        try:
            for pid, fd in fds.items():
                try:
                    signal.pidfd_send_signal(fd, signum)
                except (ProcessLookupError, PermissionError):
                    continue
                reached.append(pid)
        finally:
            for fd in fds.values():
                os.close(fd)
        return reached

    def request_kill(self) -> None:
        """SIGKILL every member now, without waiting: ``cgroup.kill`` (every member and any
        that forks meanwhile), else one SIGKILL per member. A cgroup already gone is fine."""
        killer = self.path / "cgroup.kill"
        if not self.path.exists():
            return  # the cgroup is gone: nothing to kill
        if not killer.exists():
            self.signal(signal.SIGKILL)  # a kernel before 5.14: no cgroup.kill
            return
        try:
            fd = os.open(killer, os.O_WRONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return  # removed meanwhile
        try:
            os.write(fd, b"1")
        except OSError as error:
            if error.errno not in _GONE:
                raise
        finally:
            os.close(fd)

    def remove(self) -> bool:
        """Remove the cgroup once it is empty; whether it is gone."""
        try:
            self.path.rmdir()
        except FileNotFoundError:
            return True
        except OSError as error:
            if error.errno in (errno.EBUSY, errno.ENOTEMPTY):
                return False
            raise
        return True

    def discard(self) -> None:
        """`remove`, best effort: a cgroup still in use, or one we may not remove, stays
        (a later life finds it if it holds anything). Once it is gone, so are the
        directories of its life and of its data root when they are left empty (inside our
        layout only: never the tree's own directory, nor anything above it)."""
        try:
            if not self.remove():
                return
        except OSError:
            return
        parent = self.path.parent
        while SUBTREE in parent.parts[-3:-1] and parent.name != SUBTREE:
            try:
                parent.rmdir()  # fails while a sibling is in it: then it stays
            except OSError:
                return
            parent = parent.parent


@attrs.frozen
class CgroupTree:
    """The directory holding the servers' cgroups (module docstring)."""

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
        found = cls.delegated_or_why()
        return found if isinstance(found, CgroupTree) else None

    @classmethod
    def delegated_or_why(cls) -> CgroupTree | str:
        """`delegated`, or why there is none, in words (``"cgroup v2 is not mounted"``)."""
        mount, own = cgroup2_mount(), own_cgroup()
        if mount is None:
            return "cgroup v2 is not mounted"
        if own is None or own == "/":  # the root of the hierarchy is no one's to hand out
            return "this process is in the root cgroup v2, which is not delegated to it"
        base = mount / own.lstrip("/")
        if not (os.access(base, os.W_OK) and os.access(base / "cgroup.procs", os.W_OK)):
            return f"its cgroup {base} is not delegated to it (not writable)"
        try:
            return cls.at(base)
        except OSError as error:
            return f"cannot make {base / SUBTREE} ({error.strerror or error})"

    def place(self, instance_dir: Path) -> ServerCgroup:
        """A new, empty cgroup for one spawn of the server in ``instance_dir`` (its data
        root is the directory's parent), in this process's life.

        Raises:
            OSError: it cannot be made.
        """
        life = self.root / data_root_key(instance_dir.parent) / life_name()
        path = life / f"{instance_dir.name or 'process'}-{secrets.token_hex(4)}"
        for _ in range(3):  # an empty life's directory may be removed meanwhile (`discard`)
            life.mkdir(parents=True, exist_ok=True)
            try:
                path.mkdir()
            except FileNotFoundError:
                continue
            return ServerCgroup(path)
        path.mkdir()
        return ServerCgroup(path)

    def left_behind(self, data_root: Path) -> list[ServerCgroup]:
        """The cgroups of ``data_root``'s servers that lives now over made and that still
        hold a process, sorted by path. Empty ones of lives that are over are removed on
        the way (best effort). Blocking."""
        found = []
        for life in _subdirectories(self.root / data_root_key(data_root)):
            if life_running(life.name):
                continue
            for path in _subdirectories(life):
                cgroup = ServerCgroup(path)
                if cgroup.members():
                    found.append(cgroup)
                else:
                    cgroup.discard()
            ServerCgroup(life).discard()
        return found


def recorded_cgroup(text: str, data_root: Path) -> ServerCgroup | None:
    """The cgroup a server record names, if it is one that this supervisor's layout would
    make for ``data_root`` (``<mount>/.../inferactors/<key of data_root>/<life>/<name>``,
    no ``..``), else None: a record is never a way to reach any other cgroup."""
    mount = cgroup2_mount()
    path = Path(text)
    if mount is None or not path.is_absolute() or ".." in path.parts:
        return None
    if not path.is_relative_to(mount) or len(path.relative_to(mount).parts) < 4:
        return None
    if path.parts[-4] != SUBTREE or path.parts[-3] != data_root_key(data_root):
        return None
    return ServerCgroup(path)


def cgroup_path(pid: int) -> Path | None:
    """Where process ``pid``'s cgroup is in the file system, or None."""
    mount, own = cgroup2_mount(), cgroup_of(pid)
    if mount is None or own is None:
        return None
    return mount / own.lstrip("/")


@functools.cache
def server_tree() -> CgroupTree | None:
    """This process's tree (`CgroupTree.delegated`), found once; None where the host
    delegates none, said once in the log at debug level (naming why, and the fallback: a
    container's usual case, and the fallback still ends what a server starts, so it is no
    warning; ``inferactors run --log-level debug`` shows it)."""
    found = CgroupTree.delegated_or_why()
    if isinstance(found, CgroupTree):
        return found
    _log.debug(NO_CGROUP, found)
    return None


def _subdirectories(path: Path) -> list[Path]:
    try:
        return sorted(entry for entry in path.iterdir() if entry.is_dir())
    except (FileNotFoundError, NotADirectoryError):
        return []
