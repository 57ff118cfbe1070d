"""The supervisor's one-line status for a service manager: ``3 of 4 running; 1 restarting``.

Pure: the systemd notifier (``_service/lifecycle.py``) sends it as ``STATUS=`` whenever it
changes, so ``systemctl status inferactors`` shows how the fleet stands.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from .._status import InstanceState, InstanceStatus

_ORDER = ("restarting", "starting", "degraded", "gave up", "exited", "loaded", "refused",
          "unknown")  # fmt: skip


def condition(status: InstanceStatus, refused: bool = False) -> str:
    """One word (or two) for an instance: ``running``, ``restarting``, ``starting``,
    ``degraded``, ``gave up``, ``exited``, ``loaded``, ``refused`` or ``unknown``."""
    supervision = status.supervision or ""
    if refused:
        return "refused"
    if status.state is InstanceState.RUNNING:
        return "running"
    if supervision.startswith("restarting"):
        return "restarting"
    if supervision.startswith("gave up"):
        return "gave up"
    if status.state is InstanceState.DEGRADED:
        return "starting" if _starting(status.detail) else "degraded"
    word: str = status.state.value
    return word


def _starting(detail: str | None) -> bool:
    return detail is not None and detail.startswith(("starting", "loading"))


def status_line(instances: Iterable[tuple[InstanceStatus, bool]]) -> str:
    """``"R of N running"`` and then each other condition's count, in a fixed order
    (``"3 of 4 running; 1 restarting"``), from (status, refused) pairs; ``"no instances"``
    when there are none."""
    counts = Counter(condition(status, refused) for status, refused in instances)
    total = sum(counts.values())
    if total == 0:
        return "no instances"
    parts = [f"{counts['running']} of {total} running"]
    parts.extend(f"{counts[word]} {word}" for word in _ORDER if counts[word])
    return "; ".join(parts)
