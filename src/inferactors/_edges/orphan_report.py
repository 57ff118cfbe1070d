"""The orphan reaper's report (``orphans.py`` `reap_orphans`): for each server record it
found, what it was (`OrphanOutcome`: alive, killed, stale, ignored) and one line of it
(`ReapedOrphan`), which the runtime keeps and the operator is told. Split from
``orphan_record.py``, which reports a record it cannot believe as IGNORED as it reads it.
"""

from __future__ import annotations

import enum
from pathlib import Path

import attrs


class OrphanOutcome(enum.StrEnum):
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
        pgid: The recorded process group (None when the record could not be read).
        program: The recorded program, ``argv[0]`` (None when the record could not be
            read). Neither takes part in equality.
    """

    record_path: Path
    pid: int | None
    port: int | None
    outcome: OrphanOutcome
    detail: str
    pgid: int | None = attrs.field(default=None, eq=False)
    program: str | None = attrs.field(default=None, eq=False)
