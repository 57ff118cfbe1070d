"""What the CLI prints: timestamped event lines and the status table (pure formatting).
An event's line itself is `event_words.describe_event` (re-exported here)."""

from __future__ import annotations

import datetime
from collections.abc import Sequence

import attrs

from .._edges.capture import RunEvidence
from .._policy.startup_fault import last_lines
from .._status import InstanceStatus
from .event_words import SHOWN_LAST_LINES as SHOWN_LAST_LINES
from .event_words import describe_event as describe_event


def stamp() -> str:
    """Wall-clock time of day with milliseconds, for a log line."""
    return datetime.datetime.now().strftime("%H:%M:%S.%f")[:-3]


@attrs.frozen
class StatusRow:
    """One row of the status table: the instance's ``name`` (its role)."""

    name: str
    status: InstanceStatus
    endpoint: str
    model: str | None


def status_table(rows: Sequence[StatusRow]) -> str:
    """A plain-text table: name, state, endpoint, model, pid, uptime, detail."""
    header = ("NAME", "STATE", "ENDPOINT", "MODEL", "PID", "UPTIME", "DETAIL")
    lines = [header] + [_cells(row) for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def _cells(row: StatusRow) -> tuple[str, ...]:
    status = row.status
    uptime = f"{status.uptime_s:.1f}s" if status.uptime_s is not None else "-"
    return (
        row.name,
        status.state.value,
        row.endpoint,
        row.model or "-",
        str(status.pid) if status.pid is not None else "-",
        uptime,
        status.detail or "",
    )


def evidence_block(evidence: RunEvidence, tail_lines: int = 3) -> str:
    """The evidence of a run as an indented block: process, exit, output sizes, last lines."""
    audit = evidence.audit()
    lines = [
        f"    pid {evidence.pid}, {evidence.describe()}, ran {evidence.elapsed_s:.2f} s",
        f"    stdout {evidence.stdout_bytes} bytes, stderr {evidence.stderr_bytes} bytes"
        + (" (truncated to the first 1 MiB)" if evidence.truncated else ""),
        f"    stderr blake3 {str(audit.get('stderr_blake3', ''))[:16]}...",
    ]
    tail = last_lines(evidence.stderr_tail.splitlines(), tail_lines)  # escapes stripped
    lines += [f"    | {line}" for line in tail]
    return "\n".join(lines)
