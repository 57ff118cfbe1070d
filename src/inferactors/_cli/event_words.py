"""One line for an event, as ``inferactors run`` logs it and ``inferactors events`` prints
it (pure formatting; only the event classes imported, so ``events`` stays light)."""

from __future__ import annotations

from .._events import (
    DeepHealthFailed,
    DeepHealthPassed,
    Event,
    EventsLost,
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
    SupervisorCaughtUp,
    SupervisorOverloaded,
    WorkProgress,
    instance_of,
)
from .._policy.residency_words import describe_residency_event
from .._policy.sizes import binary_size_text
from .._status import InstanceState
from .._stop_reasons import StopReason


def _state_word(state: InstanceState, adopted: bool) -> str:
    return "gone" if adopted and state is InstanceState.EXITED else state.value


SHOWN_LAST_LINES = 5
"""How many of a failed server's last lines `describe_event` shows under its exit."""


def describe_event(event: Event, name: str | None = None, adopted: bool = False) -> str:
    """One line for ``event``, without the timestamp, beginning with the instance's
    ``name`` (its role; its instance id when None); under the exit of a server that failed
    (a diagnosis, or a crash), its own words and last lines, indented. An ``adopted``
    server that no longer answers reads ``gone``, not ``exited``: nothing of ours exited."""
    who = name or (instance_of(event) or "supervisor")
    match event:
        case StateChanged():
            detail = f" ({event.detail})" if event.detail else ""
            old, new = _state_word(event.old, adopted), _state_word(event.new, adopted)
            return f"{who}  {old} -> {new}{detail}"
        case ProcessStarted():
            return f"{who}  process {event.pid} started: {' '.join(event.args)}"
        case ProcessExited():
            how = _exit_words(event.exit_code, event.signal)
            line = f"{who}  process {event.pid} {how} (reason: {event.reason.value})"
            return line + _server_words(event)
        case RestartScheduled():
            return f"{who}  restart {event.attempt} scheduled in {event.delay_s:.2f} s"
        case RestartFailed():
            return f"{who}  restart {event.attempt} failed: {event.why}"
        case GaveUp():
            return f"{who}  gave up after {event.attempts} restart(s): {event.why}"
        case ExposureDetected():
            return f"{who}  EXPOSED: {event.detail}; stopping it"
        case ImpostorDetected():
            return f"{who}  IMPOSTOR: {event.detail}"
        case DeepHealthFailed():
            count = f"{event.consecutive} in a row"
            return f"{who}  deep health failed ({count}): {event.why}"
        case DeepHealthPassed():
            return f"{who}  deep health passed: first token in {event.ttft_s:.2f} s"
        case InstanceCrashed():
            what = f"{event.error_type}: {event.message}" if event.message else event.error_type
            return f"{who}  CRASHED in {event.where}: {what}"
        case ModelTampered():
            return (
                f"{who}  TAMPERED: model {event.model}, {event.why}; "
                "not started, held until the model is re-registered or the instance reloaded"
            )
        case OnDemandStart() | ResidencyStop() | QueuedRequestRefused() | FootprintDrift():
            return describe_residency_event(event, who)
        case SupervisorOverloaded():
            return f"supervisor  OVERLOADED: {event.why}; no server is judged on a late deadline"
        case EventsLost():
            return (
                f"events  LOST {event.count} event(s): this reader fell behind; "
                "statuses are current, the lines above miss some"
            )
        case SupervisorCaughtUp():
            return (
                f"supervisor  caught up after {event.lasted_s:.1f} s overloaded "
                f"({event.no_verdicts} deadline(s) gave no verdict, "
                f"longest stall {event.worst_stall_s * 1000:.0f} ms)"
            )
        case WorkProgress():
            return f"{who}  {_progress_words(event)}"
    raise AssertionError(f"unknown event {event!r}")


def _progress_words(event: WorkProgress) -> str:
    """``re-hashing big.gguf:  45% 2.7 GiB of 6.0 GiB, 480.0 MiB/s, 7 s left`` or
    ``loading tiny: 15 s since the spawn, not serving yet``."""
    if event.work == "loading":
        return f"loading {event.subject}: {event.elapsed_s:.0f} s since the spawn, not serving yet"
    line = f"{event.work} {event.subject}: "
    if event.total:
        line += f"{100 * event.done // event.total:3d}% "
    line += binary_size_text(event.done)
    line += f" of {binary_size_text(event.total)}" if event.total else ""
    if event.total and event.done >= event.total:
        return line + f", done in {event.elapsed_s:.0f} s"
    line += f", {event.rate / (1 << 20):.1f} MiB/s" if event.rate > 0 else ""
    return line + (f", {event.eta_s:.0f} s left" if event.eta_s is not None else "")


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
