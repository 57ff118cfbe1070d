"""The front door scheduler's effects: what the caller (the front door actor,
``_actors/front_door_scheduler.py``) carries out, in order, after each of
``_policy/scheduler.py``'s handlers (pure values; no I/O, no clock): grant, answer a start,
refuse, start, stop or abandon the start of an instance, and report a memory drift. A
handler's `Step` is the new `SchedulerState` (``scheduler_state.py``) and its effects.
"""

from __future__ import annotations

import enum

import attrs

from .._errors import RefusalKind
from .._stop_reasons import StopReason
from .scheduler_state import SchedulerState


@attrs.frozen
class Grant:
    """Answer ``request`` with a grant to the instance ``name`` (counted in flight)."""

    request: int
    name: str


@attrs.frozen
class Started:
    """Answer the operator's or preload start ``request``: ``name`` is resident."""

    request: int
    name: str


@attrs.frozen
class Refuse:
    """Answer ``request`` with a refusal.

    Attributes:
        request: the request.
        model: the name it asked for.
        kind: why.
        message: in words (the server's own words for a failed start).
        retry_after_s: when a retry may help, None when it cannot.
        waited_s: how long it waited in the queue (None: refused on arrival).
    """

    request: int
    model: str
    kind: RefusalKind
    message: str
    retry_after_s: float | None = None
    waited_s: float | None = None


class Trigger(enum.Enum):
    """Who asked for a start."""

    REQUEST = "request"
    OPERATOR = "operator"


@attrs.frozen
class StartInstance:
    """Start ``name`` and report `on_start_done` once it is Running or failed.

    ``gate``: the memory its start needs to see free on the machine first (it follows an
    eviction, whose memory may not be back yet), None when no wait is needed.
    """

    name: str
    trigger: Trigger
    gate: int | None = None


@attrs.frozen
class StopInstance:
    """Stop ``name`` (its requests in flight have ended or their drain timed out) for
    ``reason``; report `on_stopped` once it has. ``detail`` says why in words."""

    name: str
    reason: StopReason
    detail: str = ""


@attrs.frozen
class CancelStart:
    """Abandon the start of ``name`` (nobody waits for it, or it must stop), then stop it
    for ``reason``; report `on_stopped` once it is down."""

    name: str
    reason: StopReason
    detail: str = ""


@attrs.frozen
class Drift:
    """``name``'s measured memory drifted from its expected figure (bytes)."""

    name: str
    expected: int
    measured: int


Effect = Grant | Started | Refuse | StartInstance | StopInstance | CancelStart | Drift
Step = tuple[SchedulerState, tuple[Effect, ...]]
