"""Shared by the start-up failure tests (issue 9 items 1-4): run an instance until the
supervisor gives up on it, then read what it said."""

from __future__ import annotations

import attrs
import trio

from inferactors._actors.runtime import InferRuntime, InstanceHandle
from inferactors._config.spec import InferenceSpec
from inferactors._config.supervision import RestartPolicy, Supervision
from inferactors._events import Event, GaveUp, ProcessExited, ProcessStarted, instance_of
from inferactors._status import InstanceStatus

FAST = Supervision(
    restart=RestartPolicy(max_restarts=5, base_s=0.05, cap_s=0.05, jitter=0.0),
    readiness_timeout_s=60.0,
)
"""Short backoff, and a readiness deadline far beyond what any of these tests waits."""

GIVE_UP_S = 60.0
"""Deadline for the whole run to reach `GaveUp` (seconds); it takes well under 5."""

QUIET_S = 0.5
"""How long after `GaveUp` the test watches for a third spawn (10 backoffs)."""


@attrs.frozen
class Outcome:
    """What a run until the supervisor gave up produced."""

    events: tuple[Event, ...]
    status: InstanceStatus
    handle: InstanceHandle

    @property
    def exits(self) -> list[ProcessExited]:
        return [e for e in self.events if isinstance(e, ProcessExited)]

    @property
    def spawns(self) -> list[ProcessStarted]:
        return [e for e in self.events if isinstance(e, ProcessStarted)]

    @property
    def gave_up(self) -> GaveUp:
        (gave,) = [e for e in self.events if isinstance(e, GaveUp)]
        return gave


async def run_until_gave_up(
    runtime: InferRuntime, spec: InferenceSpec, supervision: Supervision = FAST
) -> Outcome:
    """Load and start ``spec``; collect its events until `GaveUp`, then `QUIET_S` more."""
    events = await runtime.subscribe(1024)
    handle = await runtime.load(spec, supervision)
    await runtime.start(handle)
    seen: list[Event] = []
    with trio.fail_after(GIVE_UP_S):
        async for event in events:
            seen.append(event)
            if isinstance(event, GaveUp):
                break
    with trio.move_on_after(QUIET_S):
        async for event in events:
            seen.append(event)
    mine = tuple(e for e in seen if instance_of(e) == handle.instance_id)
    return Outcome(mine, runtime.status(handle), handle)


def assert_config_error(outcome: Outcome, kind: str, words: str) -> None:
    """Two spawns, two start-up failures diagnosed ``kind`` with ``words`` in the server's
    line, then `GaveUp` ``config-error`` at once and no third spawn; status says so."""
    exits = outcome.exits
    assert len(outcome.spawns) == 2, outcome.events
    assert [e.reason.value for e in exits] == ["start-up failure"] * 2
    diagnoses = [e.diagnosis for e in exits]
    assert all(d is not None and d.kind.value == kind for d in diagnoses), diagnoses
    last = diagnoses[-1]
    assert last is not None
    assert words in last.line
    assert exits[-1].last_lines
    assert len(exits[-1].last_lines) <= 20
    assert outcome.gave_up.why == f"config-error: {kind}: {last.line}"
    status = outcome.status
    assert status.stop_reason == "config-error"
    assert status.supervision == f"gave up: config-error: {kind}: {last.line}"
    assert status.diagnosis == f"{kind}: {last.line}"
    assert status.last_lines == exits[-1].last_lines
