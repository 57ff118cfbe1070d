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


@attrs.frozen
class RestartScheduled:
    """The supervisor will restart the server in ``delay_s`` seconds (restart ``attempt``)."""

    instance_id: str
    attempt: int
    delay_s: float
    at: float


@attrs.frozen
class RestartFailed:
    """A scheduled restart could not start the server (``why``); it counts as a failure."""

    instance_id: str
    attempt: int
    why: str
    at: float


@attrs.frozen
class GaveUp:
    """The supervisor stopped restarting the server after ``attempts`` restarts (``why``)."""

    instance_id: str
    attempts: int
    why: str
    at: float


@attrs.frozen
class ExposureDetected:
    """A managed server listened beyond loopback; it is being stopped (``detail`` says where)."""

    instance_id: str
    detail: str
    at: float


@attrs.frozen
class ImpostorDetected:
    """Another process (``pid``) holds the instance's port; its answers are not taken for ours."""

    instance_id: str
    pid: int | None
    detail: str
    at: float


@attrs.frozen
class DeepHealthFailed:
    """A watchdog's one-token completion failed ``consecutive`` times in a row (``why``)."""

    instance_id: str
    consecutive: int
    why: str
    at: float


Event = (
    StateChanged
    | ProcessStarted
    | ProcessExited
    | RestartScheduled
    | RestartFailed
    | GaveUp
    | ExposureDetected
    | ImpostorDetected
    | DeepHealthFailed
)
