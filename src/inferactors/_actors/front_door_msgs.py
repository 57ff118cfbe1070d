"""What the front door actor knows of each instance (`DoorMember`), its settings
(`DoorSettings`), what status shows of it (`ResidencyView`), and the messages of its
inbox (commands from callers, results from its workers). Frozen values; no I/O."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import attrs
import trio

from .._edges.memory_gauge import MemoryGauge
from .._errors import RefusalKind
from .._events import Event
from .._policy.residency import Footprint, Machine
from .._policy.scheduler_effects import Step
from .._policy.scheduler_state import Limits, SchedulerState, SlotRules, StartFailure
from .._status import InstanceStatus
from .._stop_reasons import StopReason
from .front_door_seam import Residency, Upstream
from .mailbox import Mailbox
from .messages import ReplyTo
from .runtime import InferRuntime
from .runtime_status import InstanceHandle

MEASURE_INTERVAL_S = 2.0
"""How often resident servers' RSS and the machine's memory are measured, float seconds."""
RECOVERY_POLL_S = 0.25
"""How often a start gated on memory recovery measures the machine's free memory."""


@attrs.frozen
class DoorMember:
    """One instance behind the front door.

    Attributes:
        rules: its residency rules.
        runtime: the runtime it is loaded in.
        handle: its handle there.
        upstream: where its granted requests go.
        footprint: its declared and estimated figures (measured ones come later).
        notes: what its figures lack (a header not read, a model not registered).
    """

    rules: SlotRules
    runtime: InferRuntime
    handle: InstanceHandle
    upstream: Upstream
    footprint: Footprint = Footprint()  # noqa: RUF009  (frozen value)
    notes: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """Its role."""
        return self.rules.name

    @property
    def instance_id(self) -> str:
        """Its runtime's instance id."""
        return self.handle.instance_id


@attrs.frozen
class DoorSettings:
    """How the front door runs (``_config.residency.ResidencySection``, resolved).

    Attributes:
        limits: the queue bounds and the budget.
        recovery_timeout_s: after an eviction, how long a start waits for free memory.
        stop_grace_s: SIGTERM to SIGKILL for every stop the front door makes.
        preload: on-demand roles started when the front door opens.
        measure_interval_s: how often memory is measured.
    """

    limits: Limits
    recovery_timeout_s: float = 10.0
    stop_grace_s: float = 10.0
    preload: tuple[str, ...] = ()
    measure_interval_s: float = MEASURE_INTERVAL_S


@attrs.frozen
class ResidencyView:
    """One instance in the front door, as status shows it.

    Attributes:
        residency: resident, starting, stopping or not loaded.
        on_demand: started by requests (else always on).
        declared_bytes: registry shards plus the KV cache (`Footprint.declared`).
        estimated_bytes: compute buffers, projector, draft, program.
        measured_bytes: the larger of its peak process tree RSS and its logged buffers,
            None before it was measured.
        kv_bytes: the KV cache part of the declared figure.
        in_flight: requests granted and not yet done.
        queued: requests waiting for it.
        ttl_left_s: seconds before it idles out, None when not counting down.
        last_stop: why the front door last stopped it (``ttl``, ``evicted``, ...), None.
        notes: what its figures lack.
    """

    residency: Residency
    on_demand: bool
    declared_bytes: int
    estimated_bytes: int
    measured_bytes: int | None
    kv_bytes: int
    in_flight: int
    queued: int
    ttl_left_s: float | None
    last_stop: str | None = None
    notes: tuple[str, ...] = ()


# Commands (carry a reply channel).


@attrs.frozen
class Begin:
    """The first message: start the workers (the mailbox's nursery exists now)."""


@attrs.frozen
class Acquire:
    request: int
    model: str
    reply: ReplyTo[Upstream]
    since: float | None = None
    """When the request arrived, if it waited before it was sent (trio time)."""


@attrs.frozen
class StartCommand:
    request: int
    name: str
    reply: ReplyTo[None] | None


@attrs.frozen
class StopCommand:
    name: str
    reason: StopReason
    reply: ReplyTo[None]


@attrs.frozen
class Close:
    reply: ReplyTo[None]


@attrs.frozen
class Rebind:
    """New members (and limits) after a reload."""

    members: tuple[DoorMember, ...]
    settings: DoorSettings
    reply: ReplyTo[None]


# Posted by workers and callers' returns.


@attrs.frozen
class Wake:
    """Grants were returned or waits withdrawn (`FrontDoorScheduler` keeps them in a list)."""


@attrs.frozen
class Tick:
    """A deadline of the scheduler came."""


@attrs.frozen
class StartDone:
    name: str
    failure: StartFailure | None


@attrs.frozen
class StopDone:
    name: str


@attrs.frozen
class Observed:
    """The instance's status after one of its events."""

    name: str
    status: InstanceStatus


@attrs.frozen
class Measured:
    """The machine and each held instance's process tree RSS (None: not measured)."""

    machine: Machine
    rss: tuple[tuple[str, int | None, int | None], ...]  # (role, pid, rss)


@attrs.frozen
class EngineFigure:
    """The buffers ``name``'s server (``pid``) logged while loading, bytes in all."""

    name: str
    pid: int
    total: int


class DoorObserver(Protocol):
    """Who hears each request's outcome (the fleet's metrics)."""

    def granted(self, name: str, waited_s: float) -> None:
        """A request for ``name`` was granted after ``waited_s`` seconds."""

    def refused(self, name: str | None, kind: RefusalKind) -> None:
        """A request (for ``name``, None when no instance has that name) was refused."""


class Loop(Protocol):
    """What the loop's helpers (``front_door_effects``, ``front_door_watch``) read and
    change of the front door actor (``front_door_loop.DoorLoop``)."""

    box: Mailbox
    settings: DoorSettings
    members: dict[str, DoorMember]
    state: SchedulerState
    gauge: MemoryGauge
    on_event: Callable[[Event], None]
    observer: DoorObserver
    replies: dict[int, ReplyTo[Any]]
    arrived: dict[int, float]
    starts: dict[str, trio.CancelScope]
    last_stop: dict[str, StopReason]
    cut: dict[int, str]
    measured_pid: dict[str, int]

    def step(self, step: Step) -> None:
        """Take a new state and carry out its effects."""

    def returned(self, request: int, served: bool) -> None:
        """A grant is over (``served`` False: never taken)."""

    def answer_stoppers(self, name: str) -> None:
        """Answer the operators waiting for ``name`` to be down, if it is."""

    def post(self, message: object) -> Awaitable[None]:
        """Send a worker's result to the loop."""
