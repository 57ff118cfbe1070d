"""One instance of the fleet: `Member` (what the fleet knows of it, cached) and `keep`
(the task that loads and starts it, retries an adopted server that is down, keeps its
status fresh and proves it with one first token).

The status shown is the one last read by the member's own task, never by a caller: on
every event of the instance (the fleet marks it ``dirty``), and at least every
`REFRESH_S` so uptime moves on.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

import attrs
import trio

from .._actors.front_door_msgs import ResidencyView
from .._actors.front_door_seam import Residency
from .._actors.runtime import InferRuntime, InstanceHandle
from .._config.config import ControlMode
from .._config.runfile import RunInstance
from .._config.spec import InferenceSpec
from .._config.supervision import RestartPolicy
from .._errors import AdmissionRefused, BackendError, InferactorsError, NoVerdict, one_line
from .._events import Event, StateChanged
from .._policy.fleet_exit import Place, Standing, adopted_retry_delay_s, down_kind, standing
from .._policy.lateness import deferred_delay_s
from .._policy.probe_schedule import phase_of
from .._policy.readiness import Readiness
from .._policy.reload_plan import Placement
from .._policy.service_status import DisplayState, display_state
from .._status import InstanceState, InstanceStatus
from .hosts import RuntimeHost, Say
from .views import InstanceView, ReadyView

REFRESH_S = 5.0
"""The longest a member's cached status goes without being read again, float seconds."""

SETTLE_S = 0.001
"""How long a member waits after an event before it reads the status again, float seconds,
so the event's log line comes first."""

_STARTING = InstanceStatus(InstanceState.LOADED, "loading")
_STARTABLE = frozenset(
    {DisplayState.IDLE, DisplayState.STARTING, DisplayState.STOPPING, DisplayState.BACKOFF}
)
"""Display states of an on-demand instance that a request starts (or waits for)."""


class Keeper(Protocol):
    """What a member's task tells the fleet."""

    say: Say

    def index(self, member: Member) -> None:
        """The member has an instance id now: route its events to it."""

    def changed(self, member: Member) -> None:
        """The member's view changed."""


@attrs.define(eq=False)
class Member:
    """One instance of the run file, as the fleet last saw it."""

    name: str
    placement: Placement
    host: RuntimeHost
    handle: InstanceHandle | None = None
    status: InstanceStatus = _STARTING
    refused: str | None = None
    retrying: bool = False
    deferred: bool = False
    """Its last load or start gave no verdict (`NoVerdict`): re-checked, never Exited."""
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    dirty: trio.Event = attrs.Factory(trio.Event)
    heard: InstanceState | None = None
    """The state its last `StateChanged` announced (None before any)."""
    first_done: trio.Event = attrs.Factory(trio.Event)
    """Set once its first load and start returned (or were refused)."""
    readiness: Readiness = attrs.Factory(Readiness)
    """Whether ``/readyz`` counts it ready (changed by observations in a row)."""
    signed_by: str | None = None
    """Who signed its model, as the registry's last check of it found (`signer_of`): read
    again at each load and each fresh status, so a spawn's pin or a reload's re-check shows."""
    stopping: int = 0
    """How many stops of it (the fleet's: an operator's, a restart's) are under way."""
    _updated: trio.Event = attrs.Factory(trio.Event)

    @property
    def runtime(self) -> InferRuntime:
        """The runtime it runs in."""
        return self.host.runtime

    @property
    def on_demand(self) -> bool:
        """Whether requests start it (not ``run``), and idleness stops it."""
        return self.placement.entry.residency.on_demand

    def view(self, residency: ResidencyView | None = None) -> InstanceView:
        """Its row of ``inferactors status`` (no I/O), with what the scheduler shows of it
        (``residency``) when it schedules it."""
        spec, mode = self.placement.entry.spec, self.placement.entry.mode
        stopping = self.stopping > 0 or (
            residency is not None and residency.residency is Residency.STOPPING
        )
        shown = display_state(
            self.status,
            adopted=mode is ControlMode.ADOPTED,
            refused=self.refused,
            retrying=self.retrying,
            on_demand=self.on_demand,
            stopping=stopping,
        )
        return InstanceView(
            name=self.name,
            flavor=spec.runtime.id,
            mode=mode.value,
            instance_id=None if self.handle is None else self.handle.instance_id,
            status=self.status,
            refused=self.refused,
            residency=residency,
            signed_by=self.signed_by,
            endpoint=_endpoint(spec),
            model=spec.model,
            stop_deadline_at=_on_wall_clock(self.status.stop_deadline),
            display_state=shown,
        )

    def standing(self) -> Standing:
        """Where it stands for the exit decision (`_policy.fleet_exit.standing`); an
        on-demand instance loaded without a refusal is supervised whether it runs or not
        (a request starts it)."""
        if self.on_demand and self.refused is None and self.handle is not None:
            return Standing.SUPERVISED
        return standing(self.status, self.refused, self.retrying)

    def place(self) -> Place:
        """Its standing, whether it is required, and why it is down (`_policy.fleet_exit`)."""
        required = self.placement.entry.required
        return Place(self.standing(), required, down_kind(self.status, self.refused))

    def ready_view(self) -> ReadyView:
        """Its line of ``/readyz``: ready when it serves (`Readiness`), or when it is on
        demand and a request would start it (`startable`)."""
        readiness = self.readiness
        ready = readiness.ready or self.startable()
        why = None if ready else (self.refused or readiness.why)
        return ReadyView(
            self.name,
            ready,
            self.placement.entry.required,
            self.status.state.value,
            why,
        )

    def startable(self) -> bool:
        """Whether it is on demand and the front door starts it for the next request (or
        is starting or swapping it): idle (never started, evicted, stopped by its idle
        TTL, crashed while idle), starting, or a scheduler's stop under way. Not when
        refused, given up, held down, or stopped by an operator (requests are refused
        until a start)."""
        if not self.on_demand or self.refused is not None or self.handle is None:
            return False
        if self.stopping > 0:
            return False
        shown = display_state(self.status, on_demand=True)
        return shown in _STARTABLE

    def held_down(self) -> bool:
        """Whether only a reload brings it back (refused, given up, held down)."""
        return self.standing() is Standing.DOWN

    def hear(self, event: Event) -> None:
        """One event of its instance: read the status again (`keep`)."""
        if isinstance(event, StateChanged):
            self.heard = event.new
        self.dirty.set()

    def update(self, status: InstanceStatus, keeper: Keeper) -> None:
        """Take a fresh status (one readiness observation) and tell the fleet and the
        member's waiters."""
        self.status = status
        self.signed_by = signer_of(self.runtime, self.placement.entry.spec.model)
        if self.refused is not None:
            self.readiness.down(f"refused: {self.refused}")
        else:
            self.readiness.observe(status)
        self._updated.set()
        self._updated = trio.Event()
        keeper.changed(self)

    async def until_updated(self) -> None:
        """Wait for the next `update`."""
        await self._updated.wait()


async def keep(member: Member, keeper: Keeper) -> None:
    """Load and start ``member``, retry an adopted server that did not answer under its
    restart policy, then keep its status fresh until cancelled (``member.scope``)."""
    with member.scope:
        try:
            up = await _attempt(member, keeper)
        finally:
            member.first_done.set()
        attempt = deferred = 0
        while not up and member.retrying:
            if member.deferred:  # no verdict: not a try; checked again until one comes
                wait_s = deferred_delay_s(deferred, _phase(member))
                deferred += 1
                member.update(_deferred(member.status, wait_s), keeper)
                await trio.sleep(wait_s)
                up = await _attempt(member, keeper)
                continue
            delay = adopted_retry_delay_s(_policy(member), attempt)
            if delay is None:
                member.retrying = False
                member.refused = f"gave up: not reachable after {attempt} retries"
                member.update(attrs.evolve(member.status, supervision=member.refused), keeper)
                return
            member.update(_waiting(member.status, delay), keeper)
            await trio.sleep(delay)
            attempt += 1
            up = await _attempt(member, keeper)
        if up:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_refresh, member, keeper)
                if asks_first_deep_health(member.placement.entry):
                    nursery.start_soon(_first_deep_health, member, keeper)


def _endpoint(spec: InferenceSpec) -> str | None:
    """The spec's base URL; None when it has none it can say (its check failed at load)."""
    try:
        return spec.base_url()
    except InferactorsError:
        return None


def _policy(member: Member) -> RestartPolicy:
    return member.placement.entry.supervision.restart or RestartPolicy()


def _phase(member: Member) -> float:
    return phase_of(_endpoint(member.placement.entry.spec) or member.name)


def _deferred(status: InstanceStatus, delay: float) -> InstanceStatus:
    """Loaded, not Exited: an admission without a verdict says nothing about the server."""
    why = status.detail or "admission deferred: the supervisor is overloaded"
    return InstanceStatus(
        InstanceState.LOADED, why, supervision=f"no verdict yet, checking again in {delay:.1f} s"
    )


def _waiting(status: InstanceStatus, delay: float) -> InstanceStatus:
    why = status.detail or "not reachable"
    return InstanceStatus(
        InstanceState.EXITED, why, supervision=f"not reachable, retrying in {delay:g} s"
    )


async def _attempt(member: Member, keeper: Keeper) -> bool:
    """One load and start; True once started. A refusal is recorded on the member: for an
    adopted server that is down, as a retry to come."""
    entry, runtime = member.placement.entry, member.runtime
    try:
        member.handle = await runtime.load(entry.spec, entry.supervision)
        member.signed_by = signer_of(runtime, entry.spec.model)
        keeper.index(member)
        if not member.on_demand:  # an on-demand instance waits for its first request
            await runtime.start(member.handle)
    except InferactorsError as error:
        await _refused(member, keeper, error)
        return False
    member.refused, member.retrying, member.deferred = None, False, False
    iid = member.handle.instance_id
    done = "loaded, started on demand" if member.on_demand else "started"
    keeper.say(f"{member.name}: {done} ({runtime.id})", instance=iid)
    return True


def signer_of(runtime: InferRuntime, model: str | None) -> str | None:
    """Who signed ``model`` as the last check of it in ``runtime``'s registry found it (a
    load, a spawn's pin, a re-check after the anchors changed: `ModelRegistry.signer_seen`),
    or None (no registry, no model, unsigned, refused, or never checked). No I/O."""
    if runtime.registry is None or model is None:
        return None
    return runtime.registry.signer_seen(model)


async def _refused(member: Member, keeper: Keeper, error: InferactorsError) -> None:
    if isinstance(error, NoVerdict):  # our own lateness: nothing known, never Exited
        await _deferred_by(member, keeper, error)
        return
    member.deferred = False
    adopted = member.placement.entry.mode is ControlMode.ADOPTED
    retry = adopted and isinstance(error, AdmissionRefused | BackendError)
    why = one_line(f"{error.code}: {error}")
    if retry and member.handle is not None:  # loaded, but not answering: retried from load
        handle, member.handle = member.handle, None
        await _unload_quietly(member.runtime, handle)
    first = not member.retrying
    member.retrying, member.refused = retry, None if retry else why
    detail = f"not reachable: {error}" if retry else why
    member.update(InstanceStatus(InstanceState.EXITED, one_line(detail)), keeper)
    if first:
        level = logging.WARNING
        keeper.say(
            one_line(f"{member.name}: not started: {why}"), instance=member.name, level=level
        )


async def _deferred_by(member: Member, keeper: Keeper, error: NoVerdict) -> None:
    """A load or start that gave no verdict (`NoVerdict`): the member stays Loaded
    ("admission deferred") and is checked again, paced (`deferred_delay_s`), until a
    verdict comes; said once in the log."""
    if member.handle is not None:
        handle, member.handle = member.handle, None
        await _unload_quietly(member.runtime, handle)
    first = not member.deferred
    member.retrying, member.deferred, member.refused = True, True, None
    detail = one_line(f"admission deferred: {error}")
    member.update(InstanceStatus(InstanceState.LOADED, detail), keeper)
    if first:
        say = f"{member.name}: admission deferred (no verdict; checking again): {error}"
        keeper.say(one_line(say), instance=member.name, level=logging.WARNING)


async def _unload_quietly(runtime: InferRuntime, handle: InstanceHandle) -> None:
    try:
        await runtime.unload(handle)
    except InferactorsError:
        pass  # already gone: nothing to forget


async def _refresh(member: Member, keeper: Keeper) -> None:
    """Keep the member's view: read on every event of its instance, at least every
    `REFRESH_S`. The status board runs ahead of the event stream (the actor publishes its
    view as it emits the event), so a view whose state no `StateChanged` has announced yet
    waits for that event (or for `REFRESH_S`): the fleet's verdicts (nothing left to
    supervise) come after the lines that explain them, as when a status was a probe."""
    assert member.handle is not None
    timed_out = True
    while True:
        dirty = member.dirty = trio.Event()  # an event during the read reads again
        status = member.runtime.status(member.handle)
        if timed_out or member.heard in (None, status.state):
            member.update(status, keeper)
        with trio.move_on_after(REFRESH_S) as timer:
            await dirty.wait()
            await trio.sleep(SETTLE_S)
        timed_out = timer.cancelled_caught


def asks_first_deep_health(entry: RunInstance) -> bool:
    """Whether the run proves ``entry`` with one token once it first serves: always for a
    managed instance (ours to run); for an adopted one only when its spec asks for deep
    health (``supervision.watchdog``), since an adopted server is somebody else's and
    receives only GET requests otherwise (a completion makes it generate)."""
    return entry.mode is not ControlMode.ADOPTED or entry.supervision.watchdog is not None


async def _first_deep_health(member: Member, keeper: Keeper) -> None:
    """Once the instance first serves (`InstanceStatus.serving`: Running, or Degraded but
    serving), prove it with one real token and say so."""
    assert member.handle is not None
    iid = member.handle.instance_id
    while not (member.status.serving or member.status.state is InstanceState.RUNNING):
        if member.status.state is InstanceState.UNKNOWN:
            return
        await member.until_updated()
    try:
        result = await member.runtime.deep_health(member.handle)
    except InferactorsError as error:
        say = f"{member.name}  deep health failed: {error}"
        keeper.say(say, instance=iid, level=logging.WARNING)
        return
    latency = f"{result.latency_s * 1000:.1f} ms"
    keeper.say(f"{member.name}  deep health: one token {result.text!r} in {latency}", instance=iid)


def _on_wall_clock(deadline: float | None) -> float | None:
    """A trio-time deadline as wall-clock unix seconds (for a CLI in another process)."""
    if deadline is None:
        return None
    return time.time() + (deadline - trio.current_time())
