"""Progress of the long work before a managed server serves, as `WorkProgress` events.

The re-hash at spawn: `HashWatch` is the hashing callback (`ProgressFn`, called by the
worker thread after every 4 MiB chunk: it only stores the latest numbers, one assignment),
and `report_hashing` samples it every `SHOWN_EVERY_S` of the trio clock and emits what moved,
paced per file (`ProgressPace`: rate and time left). The model load: `report_loading` emits
the seconds since the spawn every `LOAD_EVERY_S` until cancelled (the actor cancels it once
the server serves or its process ends).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import attrs
import trio

from ..._events import Event, WorkProgress
from ..._policy.progress_pace import SHOWN_EVERY_S, ProgressPace

LOAD_EVERY_S = 5.0
"""Seconds between two reports of a model load that goes on (5 s)."""


@attrs.define(eq=False)
class HashWatch:
    """The latest ``(path, done_bytes, total_bytes)`` a hash reported, or None; a
    `ProgressFn` safe to call from a worker thread (it only replaces one reference)."""

    latest: tuple[Path, int, int] | None = None

    def __call__(self, path: Path, done_bytes: int, total_bytes: int) -> None:
        """Store the hash's latest numbers."""
        self.latest = (path, done_bytes, total_bytes)


async def report_hashing(
    watch: HashWatch,
    emit: Callable[[Event], None],
    instance_id: str,
    interval_s: float = SHOWN_EVERY_S,
) -> None:
    """Emit a ``re-hashing`` `WorkProgress` every ``interval_s`` seconds in which the hash
    moved (from its second sample of a file on: the first starts its clock), the last one
    when a file is done; runs until cancelled."""
    file: Path | None = None
    pace, said = ProgressPace(0.0), -1
    while True:
        await trio.sleep(interval_s)
        latest = watch.latest
        if latest is None:
            continue
        path, done, total = latest
        if path != file:
            file, pace, said = path, ProgressPace(0.0), -1
        now = trio.current_time()
        reading = pace.offer(now, done, total)
        if reading is None or done == said:
            continue
        said = done
        emit(
            WorkProgress(
                instance_id,
                "re-hashing",
                path.name,
                done,
                total,
                reading.elapsed_s,
                reading.rate,
                reading.eta_s,
                now,
            )
        )


async def report_loading(
    emit: Callable[[Event], None],
    instance_id: str,
    model: str,
    started_at: float,
    interval_s: float = LOAD_EVERY_S,
) -> None:
    """Emit a ``loading`` `WorkProgress` every ``interval_s`` seconds after ``started_at``
    (the spawn, trio clock) with the seconds since; runs until cancelled."""
    beat = 1
    while True:
        await trio.sleep_until(started_at + beat * interval_s)
        now = trio.current_time()
        emit(WorkProgress(instance_id, "loading", model, 0, 0, now - started_at, 0.0, None, now))
        beat += 1
