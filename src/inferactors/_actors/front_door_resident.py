"""`ResidentScheduler`: the front door's scheduler for instances that are always resident.

Every instance it knows is started elsewhere (by ``inferactors run``, by the application,
or by a test) and stays up: a request is granted at once while its instance is ready, and
refused while it is not (503, ``Retry-After``), since nothing here starts or stops anything.
It keeps count of what it granted (`ResidentScheduler.in_flight`, `granted`, `finished`),
so a test can check that every grant ended exactly once. The scheduler with on-demand
starts, idle TTL and eviction meets the front door at the same seam
(``front_door_seam.Scheduler``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

import attrs
import trio

from .._errors import FrontDoorRefused, RefusalKind
from .front_door_names import find_model, unknown_model
from .front_door_seam import Grant, ModelEntry, Residency, Upstream

NOT_READY_RETRY_S = 1.0
"""``Retry-After`` of a request for an instance that is not ready, float seconds."""


@attrs.define(eq=False)
class _ResidentGrant:
    upstream: Upstream
    name: str
    _scheduler: ResidentScheduler
    _done: bool = False

    def done(self) -> None:
        if self._done:
            return
        self._done = True
        self._scheduler.in_flight[self.name] -= 1
        self._scheduler.finished[self.name] += 1

    def cut_by(self) -> str | None:
        """Never: nothing here stops an instance."""
        return None


class ResidentScheduler:
    """A `front_door_seam.Scheduler` over instances that are always resident (module
    docstring).

    Args:
        models: each model the front door serves with where its requests go, in the order
            the model lists show them. Every instance is shown `Residency.RESIDENT` while
            ready, `Residency.NOT_LOADED` while not.
        ready: whether the instance with that role can take requests now (every one, when
            not given); called for each `models` and `acquire`, so it must be cheap.

    Raises:
        ValueError: two models with one name.
    """

    def __init__(
        self,
        models: Iterable[tuple[ModelEntry, Upstream]],
        *,
        ready: Callable[[str], bool] | None = None,
    ) -> None:
        self._models = tuple(models)
        names = [entry.name for entry, _ in self._models]
        if len(set(names)) != len(names):
            raise ValueError(f"two models share a name: {sorted(names)}")
        self._upstreams = {entry.name: upstream for entry, upstream in self._models}
        self._ready = ready
        self.in_flight: Counter[str] = Counter()
        """Grants not yet done, by model name."""
        self.granted: Counter[str] = Counter()
        """Grants given, by model name."""
        self.finished: Counter[str] = Counter()
        """Grants done, by model name (each grant counts once, however often it is done)."""

    def models(self) -> tuple[ModelEntry, ...]:
        """Every model, resident when its instance is ready, else not loaded; no I/O."""
        return tuple(
            attrs.evolve(entry, residency=self._residency(entry.name)) for entry, _ in self._models
        )

    async def acquire(self, model: str) -> Grant:
        """A grant for ``model`` (a name, an alias or an Ollama reading of one), at once.

        Raises:
            FrontDoorRefused: unknown model (404, naming the models there are), or its
                instance is not ready (503 with ``Retry-After`` `NOT_READY_RETRY_S`).
        """
        await trio.lowlevel.checkpoint()
        entries = self.models()
        entry = find_model(entries, model)
        if entry is None:
            raise unknown_model(entries, model)
        if entry.residency is not Residency.RESIDENT:
            raise FrontDoorRefused(
                f"model {entry.name!r} is not ready: its instance is not running",
                kind=RefusalKind.START_FAILED,
                status=503,
                model=model,
                retry_after_s=NOT_READY_RETRY_S,
            )
        upstream = self._upstreams[entry.name]
        self.granted[entry.name] += 1
        self.in_flight[entry.name] += 1
        return _ResidentGrant(upstream, entry.name, self)

    def _residency(self, name: str) -> Residency:
        if self._ready is None or self._ready(name):
            return Residency.RESIDENT
        return Residency.NOT_LOADED
