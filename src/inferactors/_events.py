"""Events: frozen records of every transition, delivered to subscribers.

Subscribers receive them through `InferRuntime.subscribe`; the CLI prints them, tests assert
on their sequence. Every event carries two times: ``at``, the supervisor's monotonic clock
(``trio.current_time()``, float seconds: compare events with each other, and with the
runtime's deadlines), and ``wall_time``, the wall clock when it was made (unix time,
``time.time()``, float seconds: for people and logs; not part of an event's equality).
Durations are float seconds.
"""

from __future__ import annotations

import time

import attrs

from ._status import InstanceState
from ._stop_reasons import Diagnosis, StopReason


@attrs.frozen
class StateChanged:
    """An instance's reported state changed (``detail`` says why, as status would);
    ``serving``: its completions work (`InstanceStatus.serving`: Running, or Degraded but
    serving: slow, or ``/health`` failing while completions work)."""

    instance_id: str
    old: InstanceState
    new: InstanceState
    detail: str | None
    at: float
    wall_time: float = attrs.field(factory=time.time, eq=False, kw_only=True)
    serving: bool = False


@attrs.frozen
class ProcessStarted:
    """A managed server's process was spawned; ``args`` are its arguments as executed (the
    model named through its verified descriptors, ``-m /proc/self/fd/N --alias ...``)."""

    instance_id: str
    pid: int
    args: tuple[str, ...]
    at: float
    wall_time: float = attrs.field(factory=time.time, eq=False, kw_only=True)


@attrs.frozen
class ProcessExited:
    """A managed server's process ended: exit code or signal, and why (``reason``);
    ``survivors``: descendants that had left its process group and outlived even the
    SIGKILL, so the stop was not clean."""

    instance_id: str
    pid: int
    exit_code: int | None
    signal: int | None
    reason: StopReason
    at: float
    wall_time: float = attrs.field(factory=time.time, eq=False, kw_only=True)
    survivors: tuple[int, ...] = ()
    diagnosis: Diagnosis | None = None
    """What the server's own output says went wrong (an abnormal exit), else None."""
    last_lines: tuple[str, ...] = ()
    """The server's last (at most 20) non-empty output lines, cleaned to one line each."""


@attrs.frozen
class RestartScheduled:
    """The supervisor will restart the server in ``delay_s`` seconds (restart ``attempt``)."""

    instance_id: str
    attempt: int
    delay_s: float
    at: float
    wall_time: float = attrs.field(factory=time.time, eq=False, kw_only=True)


@attrs.frozen
class RestartFailed:
    """A scheduled restart could not start the server (``why``); it counts as a failure."""

    instance_id: str
    attempt: int
    why: str
    at: float
    wall_time: float = attrs.field(factory=time.time, eq=False, kw_only=True)


@attrs.frozen
class GaveUp:
    """The supervisor stopped restarting the server after ``attempts`` restarts (``why``)."""

    instance_id: str
    attempts: int
    why: str
    at: float
    wall_time: float = attrs.field(factory=time.time, eq=False, kw_only=True)


@attrs.frozen
class ExposureDetected:
    """A managed server listened beyond loopback; it is being stopped (``detail`` says where)."""

    instance_id: str
    detail: str
    at: float
    wall_time: float = attrs.field(factory=time.time, eq=False, kw_only=True)


@attrs.frozen
class ImpostorDetected:
    """Another process (``pid``) holds the instance's port; its answers are not taken for ours."""

    instance_id: str
    pid: int | None
    detail: str
    at: float
    wall_time: float = attrs.field(factory=time.time, eq=False, kw_only=True)


@attrs.frozen
class DeepHealthFailed:
    """A watchdog's one-token completion failed ``consecutive`` times in a row (``why``)."""

    instance_id: str
    consecutive: int
    why: str
    at: float
    wall_time: float = attrs.field(factory=time.time, eq=False, kw_only=True)


@attrs.frozen
class DeepHealthPassed:
    """A deep health (readiness's first token, a watchdog check, a caller's
    `InferRuntime.deep_health`, or the one completion that confirms a server whose
    ``/health`` failed) got its token: ``ttft_s`` is the time to
    first token, float seconds from sending the request to the complete one-token reply."""

    instance_id: str
    ttft_s: float
    at: float
    wall_time: float = attrs.field(factory=time.time, eq=False, kw_only=True)


@attrs.frozen
class InstanceCrashed:
    """An instance's own code raised an exception nobody foresaw, and that instance alone
    crashed (OTP's one_for_one): ``error_type`` and ``message`` (at most 200 characters)
    name the exception, ``where`` the loop or worker it came from.

    Its waiting callers were answered with `BackendError` naming the crash; a managed
    server is stopped (its `ProcessExited` follows with reason ``error``) and restarted
    under the restart policy; an adopted server is never signalled, only watched again
    under that policy; a managed Ollama model we loaded is unloaded. Other instances, the
    supervisor and the runtime go on.
    """

    instance_id: str
    error_type: str
    message: str
    where: str
    at: float
    wall_time: float = attrs.field(factory=time.time, eq=False, kw_only=True)


@attrs.frozen
class ModelTampered:
    """A spawn was refused because a pinned model file no longer matches its pin, or a
    running server's verified file changed in place (``why``: "changed while
    served: ..."; the server is stopped, stop reason ``tampered``): ``shard`` is the file's
    path relative to the model root, ``why`` what the check found (resized, BLAKE3 differs,
    resolves outside the root). No process is left running; the instance is held down
    (status Exited, stop reason ``tampered``) until the model is re-registered or the
    instance reloaded, and neither the refusal nor the stop is counted as a crash.
    """

    instance_id: str
    model: str
    shard: str
    why: str
    at: float
    wall_time: float = attrs.field(factory=time.time, eq=False, kw_only=True)


@attrs.frozen
class OnDemandStart:
    """The front door started an on-demand instance: for a request (``trigger``
    ``"request"``) or an operator's or the preload list's start (``"operator"``);
    ``gate_bytes``: it first waits for the machine's free memory to cover this much (it
    follows an eviction), None when it fit at once."""

    instance_id: str
    trigger: str
    gate_bytes: int | None
    at: float
    wall_time: float = attrs.field(factory=time.time, eq=False, kw_only=True)


@attrs.frozen
class ResidencyStop:
    """The front door is stopping an instance (after its requests in flight drained, or
    their drain timed out): ``reason`` ``ttl`` (idle for its TTL), ``evicted`` (room for
    another: ``detail`` names it), ``requested`` (an operator), ``reload`` or
    ``shutdown``. Its `ProcessExited` follows when the server is down."""

    instance_id: str
    reason: StopReason
    detail: str
    at: float
    wall_time: float = attrs.field(factory=time.time, eq=False, kw_only=True)


@attrs.frozen
class QueuedRequestRefused:
    """A request that waited in the front door's queue for the instance was refused:
    ``kind`` is the `RefusalKind` value (``wait-timeout``, ``never-fits``, ``start-failed``,
    ``memory-not-recovered``, ``stopping``), ``message`` says why, ``waited_s`` how long it
    had waited."""

    instance_id: str
    kind: str
    message: str
    waited_s: float
    at: float
    wall_time: float = attrs.field(factory=time.time, eq=False, kw_only=True)


@attrs.frozen
class FootprintDrift:
    """An instance's measured memory (its process tree's RSS, or the buffers its server
    logged) differs from its expected figure (declared + estimated) by more than a quarter
    and 64 MiB; admission now counts the measured figure. Bytes."""

    instance_id: str
    expected_bytes: int
    measured_bytes: int
    at: float
    wall_time: float = attrs.field(factory=time.time, eq=False, kw_only=True)


@attrs.frozen
class SupervisorOverloaded:
    """The supervisor itself is overloaded: its own event loop runs late (too many servers
    for the CPU, a spawn storm, a stalled thread), so deadlines lose their verdicts instead
    of judging servers (``_policy/lateness.py``). Reported once, when it starts, as the
    supervisor's state, never as a server's; ``why`` is the first sign (``"GET /health: no
    verdict: inferactors' event loop ran 840 ms late ..."`` or ``"event loop stalled 900
    ms"``), ``since`` when it began (for a stall, when the loop stopped running). The
    overload is the event loop's: every runtime on one trio run reports the same one, with
    the same ``since``, to its own subscribers (design/probing.md). Not an instance's
    event: it has no instance id."""

    why: str
    since: float
    at: float
    wall_time: float = attrs.field(factory=time.time, eq=False, kw_only=True)


@attrs.frozen
class SupervisorCaughtUp:
    """The supervisor caught up after ``lasted_s`` seconds overloaded (from the overload's
    ``since``, a stall that began it included, to now: no lost verdict and no long stall
    for ``_policy.lateness.CALM_S``): ``no_verdicts`` deadlines gave no
    verdict meanwhile, the longest stall of its loop was ``worst_stall_s`` seconds. Not an
    instance's event."""

    lasted_s: float
    no_verdicts: int
    worst_stall_s: float
    at: float
    wall_time: float = attrs.field(factory=time.time, eq=False, kw_only=True)


@attrs.frozen
class EventsLost:
    """The subscriber that receives it fell behind: ``count`` events were dropped for it
    since its last marker (the supervisor never waits for a subscriber), the newest ones
    each time its buffer was full. Delivered in its stream where those events would have
    been, as soon as there is room; other subscribers lost nothing. Not an instance's event:
    a status read now (``status``, ``statuses``) says where every instance stands."""

    count: int
    at: float


@attrs.frozen
class WorkProgress:
    """Long work before an instance serves is going on; sent every second or few while it
    lasts, never per chunk (``inferactors run`` prints each as a line).

    Attributes:
        instance_id: the instance.
        work: ``"re-hashing"``: a model file whose stamp (size, mtime, ctime, inode) changed
            since its last check is hashed again before the spawn (``subject`` is the file,
            ``done`` and ``total`` bytes); ``"loading"``: the server runs and does not serve
            yet (``subject`` is the model, ``done`` and ``total`` are 0).
        subject: what the work is on.
        done: units done (bytes).
        total: units in all (0 when unknown).
        elapsed_s: seconds since the work began (the first report of the file, or the spawn).
        rate: units a second so far (0.0 when unknown).
        eta_s: seconds still needed at that rate, or None when unknown.
        at: when, ``trio.current_time()`` seconds.
    """

    instance_id: str
    work: str
    subject: str
    done: int
    total: int
    elapsed_s: float
    rate: float
    eta_s: float | None
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
    | DeepHealthPassed
    | InstanceCrashed
    | ModelTampered
    | OnDemandStart
    | ResidencyStop
    | QueuedRequestRefused
    | FootprintDrift
    | SupervisorOverloaded
    | SupervisorCaughtUp
    | EventsLost
    | WorkProgress
)


def instance_of(event: Event) -> str | None:
    """The instance ``event`` is about, or None for the supervisor's own events
    (`SupervisorOverloaded`, `SupervisorCaughtUp`) and a subscriber's `EventsLost`."""
    if isinstance(event, SupervisorOverloaded | SupervisorCaughtUp | EventsLost):
        return None
    return event.instance_id
