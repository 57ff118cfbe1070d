"""A synchronous driver for the pure front door scheduler (``_policy/scheduler.py``):
each call feeds one input, records every effect, and returns the new effects, so a test
reads like llama-swap's fifo_test.go (a fake clock, no trio)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs

from inferactors._errors import RefusalKind
from inferactors._policy import scheduler, scheduler_stops
from inferactors._policy.residency import Bytes, Footprint
from inferactors._policy.scheduler_effects import (
    CancelStart,
    Effect,
    Grant,
    Refuse,
    Started,
    StartInstance,
    Step,
    StopInstance,
)
from inferactors._policy.scheduler_state import (
    Limits,
    SchedulerState,
    Slot,
    SlotRules,
    StartFailure,
)
from inferactors._stop_reasons import StopReason

MB = 1_000_000


def slot(
    name: str,
    mb: int = 100,
    *,
    on_demand: bool = True,
    ttl: float = math.inf,
    swap: str | None = None,
    persistent: str | None = None,
    adopted: bool = False,
    limit: int | None = None,
    excludes: Sequence[str] = (),
    aliases: Sequence[str] = (),
) -> Slot:
    """A slot of ``mb`` MB declared; ``swap``/``persistent`` name the group it is in."""
    groups = frozenset(g for g in (swap, persistent) if g is not None)
    rules = SlotRules(
        name=name,
        aliases=tuple(aliases),
        on_demand=on_demand and not adopted,
        idle_ttl_s=ttl,
        concurrency_limit=limit,
        groups=groups,
        persistent_groups=frozenset({persistent} if persistent else ()),
        swap_group=swap,
        excludes=frozenset(excludes),
        adopted=adopted,
    )
    return Slot(rules, Footprint(declared=mb * MB))


def state(*slots: Slot, budget_mb: int = 1000, **limits: object) -> SchedulerState:
    """A fresh state holding ``slots`` within ``budget_mb``."""
    return SchedulerState.of(Limits(Bytes.of(budget_mb * MB), **limits), tuple(slots))  # type: ignore[arg-type]


@attrs.define
class Driver:
    """Feeds inputs at a fake time ``now`` and keeps every effect."""

    state: SchedulerState
    now: float = 0.0
    effects: list[Effect] = attrs.Factory(list)
    _next: int = 1

    def _apply(self, step: Step) -> list[Effect]:
        self.state, new = step
        self.effects.extend(new)
        return list(new)

    def request(self, model: str) -> int:
        """A new request for ``model``; its id."""
        request = self._next
        self._next += 1
        self._apply(scheduler.on_request(self.state, request, model, self.now))
        return request

    def start(self, name: str) -> int:
        """An operator's start of ``name``; its id."""
        request = self._next
        self._next += 1
        self._apply(scheduler.on_start(self.state, request, name, self.now))
        return request

    def start_done(self, name: str, failure: StartFailure | None = None) -> list[Effect]:
        return self._apply(scheduler.on_start_done(self.state, name, self.now, failure))

    def stopped(self, name: str, down: str | None = None) -> list[Effect]:
        return self._apply(scheduler.on_stopped(self.state, name, self.now, down))

    def loading(self, name: str) -> list[Effect]:
        return self._apply(scheduler.on_loading(self.state, name, self.now))

    def running(self, name: str) -> list[Effect]:
        return self._apply(scheduler.on_running(self.state, name, self.now))

    def done(self, request: int, served: bool = True) -> list[Effect]:
        return self._apply(scheduler.on_serve_done(self.state, request, self.now, served))

    def cancel(self, request: int) -> list[Effect]:
        return self._apply(scheduler.on_cancel(self.state, request, self.now))

    def stop(self, name: str, reason: StopReason = StopReason.REQUESTED) -> list[Effect]:
        return self._apply(scheduler_stops.on_stop(self.state, name, reason, self.now))

    def shutdown(self) -> list[Effect]:
        return self._apply(scheduler_stops.on_shutdown(self.state, self.now))

    def footprint(self, name: str, footprint: Footprint) -> list[Effect]:
        return self._apply(scheduler.on_footprint(self.state, name, footprint, self.now))

    def foreign(self, foreign_bytes: int) -> list[Effect]:
        return self._apply(scheduler.on_foreign(self.state, foreign_bytes, self.now))

    def tick(self, now: float) -> list[Effect]:
        self.now = now
        return self._apply(scheduler_stops.on_tick(self.state, now))

    # Reading what happened.

    def starts(self, name: str) -> int:
        return sum(1 for e in self.effects if isinstance(e, StartInstance) and e.name == name)

    def stops(self, name: str, reason: StopReason | None = None) -> int:
        return sum(
            1
            for e in self.effects
            if isinstance(e, StopInstance | CancelStart)
            and e.name == name
            and (reason is None or e.reason is reason)
        )

    def served(self, name: str) -> int:
        return sum(1 for e in self.effects if isinstance(e, Grant) and e.name == name)

    def granted(self, request: int) -> bool:
        return any(isinstance(e, Grant) and e.request == request for e in self.effects)

    def started(self, request: int) -> bool:
        return any(isinstance(e, Started) and e.request == request for e in self.effects)

    def refusal(self, request: int) -> Refuse | None:
        for effect in self.effects:
            if isinstance(effect, Refuse) and effect.request == request:
                return effect
        return None

    def refused(self, kind: RefusalKind | None = None) -> int:
        return sum(
            1 for e in self.effects if isinstance(e, Refuse) and (kind is None or e.kind is kind)
        )

    def grants_of(self, name: str) -> list[int]:
        return [e.request for e in self.effects if isinstance(e, Grant) and e.name == name]
