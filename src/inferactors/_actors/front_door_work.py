"""The front door actor's workers: each does I/O through the runtime's public calls and
the memory gauge, and posts what it found to the actor's inbox (``front_door_loop.py``), the
only writer of the scheduler's state.

- `start_instance`: after an eviction, wait (bounded) until the machine's free memory
  covers the need; start the instance; wait for Running (its deep health passed) or its
  failure, in the server's own words.
- `stop_instance`: the one stop path's last step: SIGTERM, grace, SIGKILL, with the reason.
- `watch_events`: every event of a member becomes its status, posted (`Observed`).
- `measure`: every interval, and at once when a server became resident (`Nudge`), the
  machine's memory and each held server's tree RSS.
- `follow_engine`: a llama-server's buffer-size lines, summed once its load logged them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence

import attrs
import trio

from .._edges.memory_gauge import MemoryGauge
from .._errors import InferactorsError, InvalidState, RefusalKind, Unsupported
from .._events import Event, ProcessStarted, StateChanged, instance_of
from .._flavor import InferFlavor
from .._policy.buffer_lines import EngineBuffers
from .._policy.fleet_exit import HELD_DOWN
from .._policy.residency import size_text
from .._policy.scheduler_state import StartFailure
from .._status import InstanceState, InstanceStatus
from .._stop_reasons import StopReason
from .front_door_msgs import (
    RECOVERY_POLL_S,
    DoorMember,
    EngineFigure,
    Measured,
    Observed,
    StartDone,
    StopDone,
)
from .runtime import InferRuntime

Post = Callable[[object], Awaitable[None]]
"""Send one message to the actor's inbox."""


def serving(status: InstanceStatus) -> bool:
    """Whether requests may go to an instance with ``status``: Running, or Degraded but
    serving (slow, or its ``/health`` fails while completions work)."""
    return status.state is InstanceState.RUNNING or status.serving


def given_up(status: InstanceStatus) -> bool:
    """Whether nothing but an operator brings the instance back: its supervisor gave up,
    or it is held down (exposure, a tampered model)."""
    held = status.state is InstanceState.EXITED and status.stop_reason in HELD_DOWN
    return held or (status.supervision or "").startswith("gave up")


async def start_instance(
    member: DoorMember,
    gate: int | None,
    gauge: MemoryGauge,
    recovery_timeout_s: float,
    retry_after_s: float,
    post: Post,
) -> None:
    """Start ``member`` and post `StartDone` once it serves or failed (cancellation posts
    nothing: the actor that cancelled it stops it)."""
    failure: StartFailure | None = None
    try:
        if gate is not None:
            await _memory_recovered(member, gate, gauge, recovery_timeout_s, retry_after_s)
        events = await member.runtime.subscribe(64)  # before the start: no event is missed
        with events:
            await _start(member)
            await _until_serving(member, events)
    except _Failed as failed:
        failure = failed.failure
        await _stop_quietly(member, 0.0, StopReason.REQUESTED)  # no restart behind our back
    await post(StartDone(member.name, failure))


class _Failed(Exception):
    def __init__(self, failure: StartFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


async def _memory_recovered(
    member: DoorMember, need: int, gauge: MemoryGauge, timeout_s: float, retry_after_s: float
) -> None:
    """Wait until the machine's available memory covers ``need`` bytes (measured every
    `RECOVERY_POLL_S`), at most ``timeout_s``; never a start into a sure OOM."""
    available = 0
    with trio.move_on_after(timeout_s):
        while True:
            available = (await gauge.machine()).available
            if available >= need:
                return
            await trio.sleep(RECOVERY_POLL_S)
    why = (
        f"memory not recovered: {member.name!r} needs {size_text(need)} but only "
        f"{size_text(available)} is available {timeout_s:g} s after an eviction"
    )
    raise _Failed(StartFailure(RefusalKind.MEMORY_NOT_RECOVERED, why, retry_after_s))


async def _start(member: DoorMember) -> None:
    try:
        await member.runtime.start(member.handle)
    except InvalidState as error:
        if "already running" in str(error):
            return  # its supervisor restarted it meanwhile: wait for it to serve
        raise _Failed(StartFailure(RefusalKind.START_FAILED, str(error))) from None
    except InferactorsError as error:
        raise _Failed(StartFailure(RefusalKind.START_FAILED, str(error))) from None


async def _until_serving(member: DoorMember, events: trio.MemoryReceiveChannel[Event]) -> None:
    """Return once the instance serves; raise `_Failed` (in the server's own words) once
    it exited or is unknown after an event of this start (a status read at once may
    still be the last run's). Bounded by the instance's own readiness deadline, which
    stops a server not ready in time."""
    runtime, handle = member.runtime, member.handle
    heard = False
    while True:
        status = runtime.status(handle)
        if serving(status):
            return
        if status.state is InstanceState.UNKNOWN or (
            heard and status.state is InstanceState.EXITED
        ):
            why = status.diagnosis or status.detail or status.state.value
            raise _Failed(StartFailure(RefusalKind.START_FAILED, f"{member.name}: {why}"))
        await _next_event_of(events, handle.instance_id)
        heard = True


async def _next_event_of(events: trio.MemoryReceiveChannel[Event], iid: str) -> None:
    async for event in events:
        if instance_of(event) == iid:
            return


async def stop_instance(member: DoorMember, reason: StopReason, grace_s: float, post: Post) -> None:
    """Stop ``member`` for ``reason`` (SIGTERM, ``grace_s``, SIGKILL) and post `StopDone`
    (also when it was not running any more)."""
    await _stop_quietly(member, grace_s, reason)
    await post(StopDone(member.name))


async def _stop_quietly(member: DoorMember, grace_s: float, reason: StopReason) -> None:
    try:
        await member.runtime.stop(member.handle, grace_s, reason)
    except (InvalidState, Unsupported):
        pass  # not running (it exited, or never spawned): nothing left to stop
    except InferactorsError:
        pass  # the runtime is closing: its own teardown stops the server


async def watch_events(
    runtime: InferRuntime, members: Mapping[str, DoorMember], post: Post
) -> None:
    """Post every member's status after each of its state changes and spawns."""
    by_iid = {member.instance_id: member for member in members.values()}
    events = await runtime.subscribe(256)
    with events:
        for member in by_iid.values():
            await post(Observed(member.name, runtime.status(member.handle)))
        async for event in events:
            changed = by_iid.get(instance_of(event) or "")
            if changed is not None and isinstance(event, StateChanged | ProcessStarted):
                await post(Observed(changed.name, runtime.status(changed.handle)))


@attrs.define(eq=False)
class Nudge:
    """Wakes a periodic worker before its interval is over (a nudge while it works is kept
    for its next wait)."""

    _event: trio.Event = attrs.Factory(trio.Event)

    def now(self) -> None:
        """Wake the worker (from the loop; never blocks)."""
        self._event.set()

    async def wait(self, timeout_s: float) -> None:
        """Return after ``timeout_s`` float seconds, or at the first nudge."""
        with trio.move_on_after(timeout_s):
            await self._event.wait()
        self._event = trio.Event()


async def measure(
    held: Callable[[], Sequence[DoorMember]],
    gauge: MemoryGauge,
    interval_s: float,
    post: Post,
    nudge: Nudge | None = None,
) -> None:
    """Every ``interval_s``, and at once when ``nudge`` says a server became resident:
    the machine's memory and the tree RSS of each held managed server (``held()``, by the
    pid its status shows)."""
    nudge = nudge or Nudge()
    while True:
        machine = await gauge.machine()
        figures: list[tuple[str, int | None, int | None]] = []
        for member in held():
            if member.rules.adopted:
                continue
            pid = (member.runtime.status(member.handle)).pid
            rss = None if pid is None else await gauge.tree_rss(pid)
            figures.append((member.name, pid, rss))
        await post(Measured(machine, tuple(figures)))
        await nudge.wait(interval_s)


async def follow_engine(member: DoorMember, post: Post) -> None:
    """Read a managed llama-server's output for its buffer-size lines (``-lv 4``); post
    their sum once a load logged its compute buffer, for each process anew."""
    if member.upstream.flavor is not InferFlavor.LLAMACPP or member.rules.adopted:
        return
    pid, buffers, told = 0, EngineBuffers(), False
    with member.runtime.follow_logs(member.handle) as lines:
        async for line in lines:
            if line.pid != pid:
                pid, buffers, told = line.pid, EngineBuffers(), False
            buffers = buffers.add(line.text)
            if buffers.complete() and not told:
                told = True
                await post(EngineFigure(member.name, pid, buffers.total()))
