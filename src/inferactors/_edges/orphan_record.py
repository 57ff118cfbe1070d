"""The server record: ``server.json`` in a managed server's instance directory, written and trusted.

The record I/O of the orphan reaper (``orphans.py``). When a managed
server starts, `write_record` writes ``server.json`` into its instance directory: pid, pgid,
the process's start (psutil ``create_time``, with the boot it belongs to), port, argv, and
the supervisor's own pid and start, the group's members with their starts, which
`refresh_record` keeps up to date while the server runs (a forking wrapper's server joins
the group after the spawn), and, where the host delegates cgroups, the server's cgroup
(``cgroups.py``), which holds whatever it started, however it left the group.
`remove_record` deletes it once the process is reaped; `find_orphans` and `scan_records`
read every ``data_root/*/server.json``; a record that cannot be believed is reported as
IGNORED as soon as it is read (the report's values are ``orphan_report.py``).

Trust: the instance directory belongs to the server's user (``run_as``), so a record is
written through a fresh exclusive temporary file and a rename (a planted link is replaced,
never followed), and a record is believed only if it is a regular file owned by our own
effective uid and writable by nobody else: a server cannot forge a record to have some
other process killed.

All functions are synchronous and do blocking file I/O: async code calls them in a thread.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from .._atomic_file import write_atomically
from .._errors import BackendError
from .cgroups import cgroup_path, recorded_cgroup
from .escapees import scan_escaped
from .orphan_report import OrphanOutcome, ReapedOrphan
from .proctable import SystemProcessTable, tree_pids

RECORD_NAME = "server.json"
"""The record's file name inside an instance directory."""

RECORD_SCHEMA = "inferactors.server-record.v1"

_MAX_RECORD_BYTES = 1 << 16

_log = logging.getLogger(__name__)


@attrs.frozen
class OrphanRecord:
    """One ``server.json``: a managed server as its supervisor recorded it.

    Attributes:
        path: The record file.
        pid: The server's pid; ``pgid`` its process group (equal: it leads its session).
        create_time: The server's psutil ``create_time`` (epoch seconds).
        boot_time: psutil's ``boot_time`` when recorded (epoch seconds).
        boot_id: The boot the record belongs to ("" where the platform has no boot id).
        port: The port the server was started on.
        argv: The program and its arguments.
        supervisor_pid: The pid of the supervisor that started the server.
        supervisor_create_time: That supervisor's psutil ``create_time`` (epoch seconds).
        members: ``(pid, create_time)`` of every live process of the group when last
            refreshed (`refresh_record`): what proves a group whose leader is gone (a
            forking wrapper's server) to be this server's.
        escaped: ``(pid, create_time)`` of the descendants that left the group (a
            ``setsid`` wrapper's server, a daemonized grandchild), refreshed alongside: the
            reaper stops each one that is still the recorded process.
        cgroup: The server's cgroup directory (``/sys/fs/cgroup/.../inferactors/<key>/
            <life>/<name>``), or None without one: the reaper stops whatever it holds.
    """

    path: Path
    pid: int
    pgid: int
    create_time: float
    boot_time: float
    boot_id: str
    port: int
    argv: tuple[str, ...]
    supervisor_pid: int
    supervisor_create_time: float
    members: tuple[tuple[int, float], ...] = ()
    escaped: tuple[tuple[int, float], ...] = ()
    cgroup: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as written to disk (every field but ``path``, plus a schema tag)."""
        fields = attrs.asdict(self, filter=lambda field, _: field.name != "path")
        members = [[pid, created] for pid, created in self.members]
        escaped = [[pid, created] for pid, created in self.escaped]
        listed = {"members": members, "escaped": escaped}
        return {"schema": RECORD_SCHEMA, **fields, "argv": list(self.argv), **listed}

    @classmethod
    def from_json(cls, path: Path, data: object) -> OrphanRecord:
        """Parse a record read from ``path``.

        Raises:
            ValueError: not a record of this schema, or a field missing or of the wrong type.
        """
        if not isinstance(data, dict) or data.get("schema") != RECORD_SCHEMA:
            raise ValueError(f"not a record of schema {RECORD_SCHEMA}")
        argv = data.get("argv")
        if not isinstance(argv, list) or not all(isinstance(arg, str) for arg in argv):
            raise ValueError("argv must be a list of strings")
        return cls(
            path=path,
            pid=_int(data, "pid"),
            pgid=_int(data, "pgid"),
            create_time=_float(data, "create_time"),
            boot_time=_float(data, "boot_time"),
            boot_id=_str(data, "boot_id"),
            port=_int(data, "port"),
            argv=tuple(argv),
            supervisor_pid=_int(data, "supervisor_pid"),
            supervisor_create_time=_float(data, "supervisor_create_time"),
            members=_members(data.get("members", [])),
            escaped=_members(data.get("escaped", [])),
            cgroup=_optional_str(data, "cgroup"),
        )


def _members(raw: object) -> tuple[tuple[int, float], ...]:
    """``[[pid, create_time], ...]`` as pairs (an older record has none)."""
    if not isinstance(raw, list):
        raise ValueError("members must be a list of [pid, create_time] pairs")
    return tuple(_member(item) for item in raw)


def _member(item: object) -> tuple[int, float]:
    if isinstance(item, list) and len(item) == 2:
        pid, created = item
        if _is_number(pid) and isinstance(pid, int) and _is_number(created):
            return pid, float(created)
    raise ValueError("members must be a list of [pid, create_time] pairs")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _int(data: dict[str, Any], name: str) -> int:
    value = data.get(name)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(f"{name} must be an integer")


def _float(data: dict[str, Any], name: str) -> float:
    value = data.get(name)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise ValueError(f"{name} must be a number")


def _optional_str(data: dict[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"{name} must be a string or null")


def _str(data: dict[str, Any], name: str) -> str:
    value = data.get(name)
    if isinstance(value, str):
        return value
    raise ValueError(f"{name} must be a string")


def write_record(
    instance_dir: Path, process_pid: int, port: int, argv: Sequence[str]
) -> OrphanRecord | None:
    """Record a just-spawned managed server in ``instance_dir/server.json`` (atomically).

    Does blocking file I/O (about 1.5 ms here, reading ``/proc`` and renaming): call it
    from a thread in async code.

    Returns:
        The record written, or None when the process is already gone (nothing to record).

    Raises:
        BackendError: the record could not be written.
    """
    table = SystemProcessTable()
    server = table.identify(process_pid)
    me = table.identify(os.getpid())
    if server is None or me is None:
        return None
    record = OrphanRecord(
        path=instance_dir / RECORD_NAME,
        pid=server.pid,
        pgid=server.pgid,
        create_time=server.create_time,
        boot_time=server.boot_time,
        boot_id=table.boot_id(),
        port=port,
        argv=tuple(argv),
        supervisor_pid=me.pid,
        supervisor_create_time=me.create_time,
        cgroup=_our_cgroup(process_pid, instance_dir.parent),
    )
    record = attrs.evolve(record, members=_group_members(table, server.pgid, server.boot_time))
    _write_atomically(record.path, json.dumps(record.to_json(), indent=2).encode())
    return record


def _our_cgroup(pid: int, data_root: Path) -> str | None:
    """The cgroup of ``pid`` when it is one we made for ``data_root``'s servers."""
    path = cgroup_path(pid)
    if path is None or recorded_cgroup(str(path), data_root) is None:
        return None
    return str(path)


def refresh_record(instance_dir: Path, process_pid: int) -> OrphanRecord | None:
    """Bring the group members of ``instance_dir/server.json`` up to date.

    Only a trusted record that names ``process_pid`` is touched, and only while that pid is
    still the recorded process (same start, not a zombie): a record is never created here,
    nor pointed at a process that reused the pid. An unchanged record is not rewritten, so
    calling this every second costs a read of the server's tree. The
    descendants outside the group are looked for only for a server without a cgroup (a
    recorded cgroup holds them all, and a later life stops what it holds). Blocking.

    Returns:
        The record as it now stands, or None when there is nothing to refresh.

    Raises:
        BackendError: the record could not be rewritten.
    """
    found = _read_trusted(instance_dir / RECORD_NAME)
    if not isinstance(found, OrphanRecord) or found.pid != process_pid:
        return None
    table = SystemProcessTable()
    server = table.identify(process_pid)
    if server is None or server.zombie:
        return None
    if not server.started_as(found.create_time, found.boot_time):
        return None
    leader = process_pid if server.pgid == process_pid else None
    members = _group_members(table, found.pgid, found.boot_time, leader=leader)
    escaped = found.escaped  # a server in a cgroup: the cgroup holds them, no walk
    if found.cgroup is None:
        escaped = scan_escaped(table, found.pid, found.pgid, found.escaped, found.boot_time)
    if members == found.members and escaped == found.escaped:
        return found
    refreshed = attrs.evolve(found, members=members, escaped=escaped)
    _write_atomically(refreshed.path, json.dumps(refreshed.to_json(), indent=2).encode())
    return refreshed


def _group_members(
    table: SystemProcessTable, pgid: int, boot_time: float, *, leader: int | None = None
) -> tuple[tuple[int, float], ...]:
    """``(pid, create_time)`` of the group's live processes, each start expressed against
    ``boot_time`` (the record's), so `ProcessStart.started_as` holds across a clock step.

    With ``leader`` (the group's leader, alive: a session leader and child subreaper, as
    the exec helper makes every server) the candidates are its tree, where everything of
    its group is while it lives (``group_members.py``): a read of the tree, not of every
    process on the host. Without, every process on the host is a candidate."""
    candidates = tree_pids(leader) if leader is not None else table.live_members(pgid)
    members = []
    for pid in candidates:
        process = table.identify(pid)
        if process is not None and process.pgid == pgid and not process.zombie:
            members.append((pid, process.create_time - process.boot_time + boot_time))
    return tuple(sorted(members))


def _write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` (``_atomic_file.write_atomically``, mode 0600).

    No fsync (it cost 10 ms of the 12 ms a record took): a record only serves a later life
    of the supervisor *in the same boot* (a reboot ends every server, and a record of an
    earlier boot is stale by its boot id). A supervisor's death, even by SIGKILL, loses
    nothing the kernel was given; only a crash of the kernel could, and it leaves no server.

    Raises:
        BackendError: naming the record.
    """
    try:
        write_atomically(path, data, mode=0o600, fsync=False)
    except OSError as error:
        raise BackendError(f"cannot write the server record {path}: {error}") from error


def remove_record(instance_dir: Path, *, pid: int | None = None) -> bool:
    """Delete ``instance_dir/server.json`` once the server has been reaped.

    Args:
        instance_dir: The server's instance directory.
        pid: When given, delete the record only if it names this pid (a later spawn may
            already have replaced it).

    Returns:
        True when a record was deleted; a missing record is not an error.
    """
    path = instance_dir / RECORD_NAME
    if pid is not None:
        found = _read_trusted(path)
        if not isinstance(found, OrphanRecord) or found.pid != pid:
            return False
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    except OSError as error:  # a state directory made unwritable under us: say it, go on
        _log.warning("cannot remove the server record %s: %s", path, error.strerror or error)
        return False
    return True


def find_orphans(data_root: Path) -> list[OrphanRecord]:
    """Every trusted, readable ``data_root/*/server.json``, sorted by path.

    Records that cannot be trusted or parsed are left out (`reap_orphans` reports them).
    A missing ``data_root`` holds no records.
    """
    return [found for found in scan_records(data_root) if isinstance(found, OrphanRecord)]


def scan_records(data_root: Path) -> list[OrphanRecord | ReapedOrphan]:
    """Every ``data_root/*/server.json``, sorted by path: the trusted record, or an IGNORED
    report saying why it is not believed. A missing ``data_root`` holds no records."""
    return [_read_trusted(path) for path in sorted(data_root.glob(f"*/{RECORD_NAME}"))]


def _read_trusted(path: Path) -> OrphanRecord | ReapedOrphan:
    """The record at ``path``, or an IGNORED report saying why it is not believed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return _ignored(path, "the record has disappeared")
    except OSError as error:
        return _ignored(path, f"cannot open the record: {error.strerror}")
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        distrust = _distrust(info)
        if distrust is not None:
            return _ignored(path, distrust)
        raw = file.read(_MAX_RECORD_BYTES)
    try:
        return OrphanRecord.from_json(path, json.loads(raw))
    except ValueError as error:
        return _ignored(path, f"unreadable record: {error}")


def _distrust(info: os.stat_result) -> str | None:
    if not stat.S_ISREG(info.st_mode):
        return "the record is not a regular file"
    if info.st_uid != os.geteuid():
        return f"the record is owned by uid {info.st_uid}, not by this supervisor's user"
    if info.st_mode & 0o022:
        return f"the record is writable by others (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def _ignored(path: Path, detail: str) -> ReapedOrphan:
    return ReapedOrphan(path, None, None, OrphanOutcome.IGNORED, detail)
