"""No orphans: record each managed server on disk, and reap the ones an earlier life left behind.

Issue 3 item 7 and FC-13 (llama-swap #100, #138, #159: a killed supervisor left llama-server
holding the GPU and the port). The parent-death signal (``_spawn.py``) kills the leader when
the supervisor dies; this module covers what it cannot: a platform without it, a grandchild
of a forking wrapper (the signal is not inherited across fork), a server that cleared it.

- When a managed server starts, `write_record` writes ``server.json`` into its instance
  directory: pid, pgid, the process's start (psutil ``create_time``, with the boot it belongs
  to), port, argv, and the supervisor's own pid and start. `remove_record` deletes it once
  the process is reaped.
- At start-up `reap_orphans` reads every ``data_root/*/server.json`` and takes down (SIGTERM
  to the group, ``grace_s``, SIGKILL to the group) each recorded server that is still the
  same process and whose supervisor is gone, then removes the stale records.

Identity (``_proctable.py``): a process is "the same" only when the boot and its start are
the same as recorded; a recycled pid is never signalled. When the leader is gone but members
of its group live on, they are reported and left alone: the group cannot be proven ours.

Trust: the instance directory belongs to the server's user (``run_as``), so a record is
written through a fresh exclusive temporary file and a rename (a planted link is replaced,
never followed), and a record is believed only if it is a regular file owned by our own
effective uid and writable by nobody else: a server cannot forge a record to have some
other process killed.

All functions are synchronous (the runtime runs them in a thread at start-up); the process
table and the clock sit behind `ProcessTable`, so tests can swap them.
"""

from __future__ import annotations

import enum
import json
import os
import signal
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from ._errors import BackendError
from ._proctable import ProcessStart, ProcessTable, SystemProcessTable

RECORD_NAME = "server.json"
"""The record's file name inside an instance directory."""

RECORD_SCHEMA = "inferactors.server-record.v1"

KILL_BOUND_S = 2.0
"""How long a SIGKILLed group gets to disappear before it is reported as surviving."""

POLL_S = 0.02
"""How often the process table is read while waiting for a group to go (seconds)."""

_MAX_RECORD_BYTES = 1 << 16


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

    def to_json(self) -> dict[str, Any]:
        """The record as written to disk (every field but ``path``, plus a schema tag)."""
        fields = attrs.asdict(self, filter=lambda field, _: field.name != "path")
        return {"schema": RECORD_SCHEMA, **fields, "argv": list(self.argv)}

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
        )


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


def _str(data: dict[str, Any], name: str) -> str:
    value = data.get(name)
    if isinstance(value, str):
        return value
    raise ValueError(f"{name} must be a string")


class OrphanOutcome(enum.Enum):
    """What `reap_orphans` found for one record."""

    ALIVE = "alive"
    """Still running and left alone (its supervisor lives, or it survived SIGKILL, or its
    leader is gone and the rest of its group cannot be proven ours); the record is kept."""
    KILLED = "killed"
    """It was ours and orphaned: its group was stopped; the record is removed."""
    STALE = "stale"
    """The process is gone, or its pid now belongs to another process; the record is removed
    and nothing is signalled."""
    IGNORED = "ignored"
    """The record cannot be trusted or read; it is left in place and nothing is signalled."""


@attrs.frozen
class ReapedOrphan:
    """One line of `reap_orphans`'s report.

    Attributes:
        record_path: The ``server.json`` concerned.
        pid: The recorded server pid (None when the record could not be read).
        port: The recorded port (None when the record could not be read).
        outcome: What was found and done.
        detail: One phrase for logs: why, and which signal ended the group.
    """

    record_path: Path
    pid: int | None
    port: int | None
    outcome: OrphanOutcome
    detail: str


def write_record(
    instance_dir: Path, process_pid: int, port: int, argv: Sequence[str]
) -> OrphanRecord | None:
    """Record a just-spawned managed server in ``instance_dir/server.json`` (atomically).

    Does blocking file I/O (an fsync): call it from a thread in async code.

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
    )
    _write_atomically(record.path, json.dumps(record.to_json(), indent=2).encode())
    return record


def _write_atomically(path: Path, data: bytes) -> None:
    """Write through a new exclusive temporary file, fsync, rename over ``path``, fsync dir."""
    try:
        fd, staging = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as error:
        raise BackendError(f"cannot write the server record {path}: {error}") from error
    try:
        with os.fdopen(fd, "wb") as staged:
            staged.write(data)
            staged.flush()
            os.fsync(staged.fileno())
        os.replace(staging, path)
        _fsync_directory(path.parent)
    except OSError as error:
        Path(staging).unlink(missing_ok=True)
        raise BackendError(f"cannot write the server record {path}: {error}") from error


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
    return True


def find_orphans(data_root: Path) -> list[OrphanRecord]:
    """Every trusted, readable ``data_root/*/server.json``, sorted by path.

    Records that cannot be trusted or parsed are left out (`reap_orphans` reports them).
    A missing ``data_root`` holds no records.
    """
    return [found for found in _scan(data_root) if isinstance(found, OrphanRecord)]


def _scan(data_root: Path) -> list[OrphanRecord | ReapedOrphan]:
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


def reap_orphans(
    data_root: Path, *, grace_s: float = 3.0, table: ProcessTable | None = None
) -> list[ReapedOrphan]:
    """Take down the servers an earlier life of a supervisor left behind (FC-13).

    For each record under ``data_root``: a server that is gone, or whose pid now belongs to
    another process, is STALE (nothing signalled, record removed). One that is still the
    same process and whose supervisor is alive (another supervisor, or this very one) is
    ALIVE and left alone. Otherwise its supervisor is gone (or is an earlier process with
    our pid): SIGTERM its group, wait up to ``grace_s`` for the group to go, SIGKILL it,
    wait up to `KILL_BOUND_S`; KILLED, and the record is removed. Blocks for up to
    ``grace_s + KILL_BOUND_S`` per orphan: call it from a thread in async code.

    Args:
        data_root: The directory holding the instance directories.
        grace_s: Seconds an orphan gets between SIGTERM and SIGKILL.
        table: The process table and clock (tests pass a fake); the real one by default.

    Returns:
        One `ReapedOrphan` per record found, in path order.
    """
    table = table if table is not None else SystemProcessTable()
    reports = []
    for found in _scan(data_root):
        if isinstance(found, ReapedOrphan):
            reports.append(found)
            continue
        report = _reap_one(found, table, grace_s)
        if report.outcome in (OrphanOutcome.KILLED, OrphanOutcome.STALE):
            found.path.unlink(missing_ok=True)
        reports.append(report)
    return reports


def _reap_one(record: OrphanRecord, table: ProcessTable, grace_s: float) -> ReapedOrphan:
    def report(outcome: OrphanOutcome, detail: str) -> ReapedOrphan:
        return ReapedOrphan(record.path, record.pid, record.port, outcome, detail)

    gone = _why_not_running(record, table)
    if gone is not None:
        return report(*gone)
    owner = _live_supervisor(record, table)
    if owner is not None:
        return report(OrphanOutcome.ALIVE, owner)
    ended_by = _stop_group(table, record.pgid, grace_s)
    if ended_by is None:
        return report(OrphanOutcome.ALIVE, f"group {record.pgid} survived SIGKILL")
    return report(OrphanOutcome.KILLED, f"orphaned; group {record.pgid} ended by {ended_by}")


def _why_not_running(record: OrphanRecord, table: ProcessTable) -> tuple[OrphanOutcome, str] | None:
    """None when the recorded server is verifiably alive; else the outcome and why."""
    if record.boot_id != table.boot_id():
        return OrphanOutcome.STALE, "recorded before the last reboot"
    leader = table.identify(record.pid)
    if leader is not None and not _is_recorded(leader, record):
        return OrphanOutcome.STALE, f"pid {record.pid} now belongs to another process"
    members = table.live_members(record.pgid)
    if not members:
        return OrphanOutcome.STALE, f"server {record.pid} has exited"
    if leader is None:
        listed = ", ".join(map(str, members))
        return OrphanOutcome.ALIVE, (
            f"its leader {record.pid} is gone but process group {record.pgid} still holds "
            f"{listed}; not signalled, since the group cannot be proven to be the server's"
        )
    return None


def _is_recorded(process: ProcessStart, record: OrphanRecord) -> bool:
    started = process.started_as(record.create_time, record.boot_time)
    return started and process.pgid == record.pgid


def _live_supervisor(record: OrphanRecord, table: ProcessTable) -> str | None:
    """Who still supervises the server, or None when its supervisor is gone."""
    supervisor = table.identify(record.supervisor_pid)
    if supervisor is None or supervisor.zombie:
        return None
    if not supervisor.started_as(record.supervisor_create_time, record.boot_time):
        return None  # an earlier supervisor whose pid was reused (ours included)
    if supervisor.pid == os.getpid():
        return "started by this supervisor"
    return f"its supervisor, process {supervisor.pid}, is still running"


def _stop_group(table: ProcessTable, pgid: int, grace_s: float) -> str | None:
    """SIGTERM, grace, SIGKILL, bounded wait; the signal that ended it, or None if it lives."""
    table.signal_group(pgid, signal.SIGTERM)
    if _wait_empty(table, pgid, grace_s):
        return "SIGTERM"
    table.signal_group(pgid, signal.SIGKILL)
    if _wait_empty(table, pgid, KILL_BOUND_S):
        return f"SIGKILL after {grace_s:g} s"
    return None


def _wait_empty(table: ProcessTable, pgid: int, timeout_s: float) -> bool:
    deadline = table.monotonic() + timeout_s
    while table.live_members(pgid):
        remaining = deadline - table.monotonic()
        if remaining <= 0:
            return False
        table.sleep(min(POLL_S, remaining))
    return True
