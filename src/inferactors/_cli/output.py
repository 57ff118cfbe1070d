"""What the CLI prints: timestamped event lines and the status table (pure formatting)."""

from __future__ import annotations

import datetime
from collections.abc import Sequence

import attrs

from .._edges.capture import RunEvidence
from .._events import (
    DeepHealthFailed,
    DeepHealthPassed,
    Event,
    ExposureDetected,
    FootprintDrift,
    GaveUp,
    ImpostorDetected,
    InstanceCrashed,
    ModelTampered,
    OnDemandStart,
    ProcessExited,
    ProcessStarted,
    QueuedRequestRefused,
    ResidencyStop,
    RestartFailed,
    RestartScheduled,
    StateChanged,
    StopReason,
    SupervisorCaughtUp,
    SupervisorOverloaded,
)
from .._policy.residency_words import describe_residency_event
from .._policy.startup_fault import last_lines
from .._status import InstanceStatus


def stamp() -> str:
    """Wall-clock time of day with milliseconds, for a log line."""
    return datetime.datetime.now().strftime("%H:%M:%S.%f")[:-3]


SHOWN_LAST_LINES = 5
"""How many of a failed server's last lines `describe_event` shows under its exit."""


def describe_event(event: Event) -> str:
    """One line for ``event``, without the timestamp; under the exit of a server that
    failed (a diagnosis, or a crash), its own words and last lines, indented."""
    match event:
        case StateChanged():
            detail = f" ({event.detail})" if event.detail else ""
            return f"{event.instance_id}  {event.old.value} -> {event.new.value}{detail}"
        case ProcessStarted():
            return f"{event.instance_id}  process {event.pid} started: {' '.join(event.args)}"
        case ProcessExited():
            how = _exit_words(event.exit_code, event.signal)
            line = f"{event.instance_id}  process {event.pid} {how} (reason: {event.reason.value})"
            return line + _server_words(event)
        case RestartScheduled():
            return (
                f"{event.instance_id}  restart {event.attempt} scheduled in {event.delay_s:.2f} s"
            )
        case RestartFailed():
            return f"{event.instance_id}  restart {event.attempt} failed: {event.why}"
        case GaveUp():
            return f"{event.instance_id}  gave up after {event.attempts} restart(s): {event.why}"
        case ExposureDetected():
            return f"{event.instance_id}  EXPOSED: {event.detail}; stopping it"
        case ImpostorDetected():
            return f"{event.instance_id}  IMPOSTOR: {event.detail}"
        case DeepHealthFailed():
            count = f"{event.consecutive} in a row"
            return f"{event.instance_id}  deep health failed ({count}): {event.why}"
        case DeepHealthPassed():
            return f"{event.instance_id}  deep health passed: first token in {event.ttft_s:.2f} s"
        case InstanceCrashed():
            what = f"{event.error_type}: {event.message}" if event.message else event.error_type
            return f"{event.instance_id}  CRASHED in {event.where}: {what}"
        case ModelTampered():
            return (
                f"{event.instance_id}  TAMPERED: model {event.model}, {event.why}; "
                "not started, held until the model is re-registered or the instance reloaded"
            )
        case OnDemandStart() | ResidencyStop() | QueuedRequestRefused() | FootprintDrift():
            return describe_residency_event(event)
        case SupervisorOverloaded():
            return f"supervisor  OVERLOADED: {event.why}; no server is judged on a late deadline"
        case SupervisorCaughtUp():
            return (
                f"supervisor  caught up after {event.lasted_s:.1f} s overloaded "
                f"({event.no_verdicts} deadline(s) gave no verdict, "
                f"longest stall {event.worst_stall_s * 1000:.0f} ms)"
            )
    raise AssertionError(f"unknown event {event!r}")


def _server_words(event: ProcessExited) -> str:
    """``why: <kind>: <line>`` and the last lines, indented, for an exit that failed."""
    failed = event.diagnosis is not None or event.reason is StopReason.CRASH
    if not failed:
        return ""
    lines = [f"    why: {event.diagnosis.describe()}"] if event.diagnosis is not None else []
    lines += [f"    | {line}" for line in event.last_lines[-SHOWN_LAST_LINES:]]
    return "".join(f"\n{line}" for line in lines)


def _exit_words(exit_code: int | None, signal: int | None) -> str:
    if signal is not None:
        import signal as signals

        try:
            return f"killed by {signals.Signals(signal).name}"
        except ValueError:
            return f"killed by signal {signal}"
    if exit_code is not None:
        return f"exited with status {exit_code}"
    return "ended"


@attrs.frozen
class StatusRow:
    """One row of the status table."""

    instance_id: str
    status: InstanceStatus
    endpoint: str
    model: str | None


def status_table(rows: Sequence[StatusRow]) -> str:
    """A plain-text table: instance, state, endpoint, model, pid, uptime, detail."""
    header = ("INSTANCE", "STATE", "ENDPOINT", "MODEL", "PID", "UPTIME", "DETAIL")
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
        row.instance_id,
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
