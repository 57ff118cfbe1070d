"""The front door's events in words, one line each, for the CLI's event lines, and a stop
that cut a request in flight, in the words its client is told (pure)."""

from __future__ import annotations

from .._events import FootprintDrift, OnDemandStart, QueuedRequestRefused, ResidencyStop
from .._stop_reasons import StopReason
from .residency import size_text

_CUT_BY = {
    StopReason.REQUESTED: "stopped by an operator",
    StopReason.RELOAD: "stopped by a reload that changed or removed it",
    StopReason.SHUTDOWN: "stopped for a shutdown",
    StopReason.TTL: "stopped after idling for its TTL",
    StopReason.EVICTED: "evicted to make room for another model",
}
"""How each stop of the front door's one stop path is told to a client it cut."""


def cut_words(reason: StopReason, detail: str) -> str:
    """What a client whose request a stop cut is told (its drain ran out first):
    ``the instance was stopped by an operator before this answer ended (drain timed
    out)``; ``detail`` (why the stop came now) in brackets, when there is one."""
    how = _CUT_BY.get(reason, f"stopped ({reason.value})")
    why = f" ({detail})" if detail else ""
    return f"the instance was {how} before this answer ended{why}"


def describe_residency_event(
    event: OnDemandStart | ResidencyStop | QueuedRequestRefused | FootprintDrift,
    who: str | None = None,
) -> str:
    """``chat  on-demand start (request)``, ``... stopping (evicted): to make room for
    'code'``, ``... request refused after 12.0 s (wait-timeout): ...``, ``... memory drift:
    measured 1.2 GB, expected 0.8 GB``; ``who`` names the instance (its instance id when
    None)."""
    who = who or event.instance_id
    match event:
        case OnDemandStart():
            gate = (
                f"; first waits for {size_text(event.gate_bytes)} of free memory"
                if event.gate_bytes is not None
                else ""
            )
            return f"{who}  on-demand start ({event.trigger}){gate}"
        case ResidencyStop():
            detail = f": {event.detail}" if event.detail else ""
            return f"{who}  stopping ({event.reason.value}){detail}"
        case QueuedRequestRefused():
            return (
                f"{who}  request refused after {event.waited_s:.1f} s "
                f"({event.kind}): {event.message}"
            )
        case FootprintDrift():
            return (
                f"{who}  memory drift: measured {size_text(event.measured_bytes)},"
                f" expected {size_text(event.expected_bytes)}"
            )
