"""Events: frozen records of every transition, delivered to subscribers.

Subscribers receive them through `InferRuntime.subscribe`; the CLI prints them, tests assert
on their sequence. Times are ``trio.current_time()`` seconds (``at``); durations are float
seconds.
"""

from __future__ import annotations

import enum

import attrs

from ._status import InstanceState


class StopReason(enum.Enum):
    """Why a managed server's process ended, recorded apart from its exit status (FC-22)."""

    REQUESTED = "requested"
    CRASH = "crash"
    READINESS_TIMEOUT = "readiness timeout"
    HEALTH_KILL = "health kill"
    EXPOSURE = "exposure"
    UNLOAD = "unload"
    SHUTDOWN = "shutdown"


@attrs.frozen
class StateChanged:
    """An instance's reported state changed (``detail`` says why, as status would)."""

    instance_id: str
    old: InstanceState
    new: InstanceState
    detail: str | None
    at: float


@attrs.frozen
class ProcessStarted:
    """A managed server's process was spawned."""

    instance_id: str
    pid: int
    args: tuple[str, ...]
    at: float


@attrs.frozen
class ProcessExited:
    """A managed server's process ended: exit code or signal, and why (``reason``)."""

    instance_id: str
    pid: int
    exit_code: int | None
    signal: int | None
    reason: StopReason
    at: float


Event = StateChanged | ProcessStarted | ProcessExited
