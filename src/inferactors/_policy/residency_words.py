"""The front door's events in words, one line each, for the CLI's event lines (pure)."""

from __future__ import annotations

from .._events import FootprintDrift, OnDemandStart, QueuedRequestRefused, ResidencyStop
from .residency import size_text


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
