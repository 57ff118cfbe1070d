"""The web page's rows: each instance as the page shows it (`row`), its display state
(`display_state`), and the front door's residency against its budget (`door_summary`).

Plain data (JSON-ready dicts) computed from the fleet's cached views and the history's
last readings: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .._actors.front_door_seam import Residency
from .._config.convert_api import api_data
from .._errors import one_line
from .._policy.service_status import DisplayState
from .._status import InstanceState
from .ui_history import UiHistory
from .views import InstanceView

DISPLAY_STATES = tuple(shown.value for shown in DisplayState)
"""The words an operator acts on, each with its own colour on the page."""


def display_state(view: InstanceView) -> str:
    """``view``'s display state as ``inferactors status`` and the control API show it
    (`InstanceView.display_state`, derived in ``_policy/service_status.py``): one of
    `DISPLAY_STATES`; the page shows the same word (an on-demand instance a request starts
    is ``idle``, never ``stopped``)."""
    return view.display_state.value


def row(view: InstanceView, history: UiHistory) -> dict[str, Any]:
    """The page's row of ``view``: its display state, endpoint, model, pid, uptime,
    restarts, time to first token, resident memory (bytes) and CPU (percent of one core)
    of its process tree at the last reading, a detail in words, its residency, and its
    whole status (for the instance's panel)."""
    status = view.status
    rss, cpu = history.usage_now(view.name, status.pid)
    return {
        "name": view.name,
        "flavor": view.flavor,
        "mode": view.mode,
        "state": display_state(view),
        "endpoint": view.endpoint,
        "model": view.model,
        "pid": status.pid,
        "uptime_s": status.uptime_s,
        "restarts": status.restarts,
        "ttft_s": status.ttft_s,
        "rss_bytes": rss,
        "cpu_percent": cpu,
        "detail": detail_words(view),
        "residency": None if view.residency is None else api_data(view.residency),
        "status": api_data(status),
        "refused": view.refused,
    }


def detail_words(view: InstanceView) -> str:
    """Why it stands where it does, in one line: its refusal, else its detail, its last
    stop's reason (once exited) and what the supervisor does about it."""
    if view.refused:
        return one_line(f"refused: {view.refused}", 300)
    status = view.status
    words = [status.detail]
    if status.state is InstanceState.EXITED and status.stop_reason:
        words.append(f"reason: {status.stop_reason}")
    words.append(status.supervision)
    return one_line("; ".join(word for word in words if word), 300)


def door_summary(
    views: Sequence[InstanceView], budget: Callable[[], int | None]
) -> dict[str, Any] | None:
    """The front door's residency, None when no scheduler runs (no view has residency):
    the bytes of the instances resident (or starting, or stopping) against the budget's
    memory (None before the scheduler opened), and the requests in flight and queued.
    An instance counts its measured bytes once known, never less than its declared ones,
    as admission does."""
    scheduled = [view.residency for view in views if view.residency is not None]
    if not scheduled:
        return None
    held = (Residency.RESIDENT, Residency.STARTING, Residency.STOPPING)
    resident = sum(
        max(one.declared_bytes, one.measured_bytes or 0)
        for one in scheduled
        if one.residency in held
    )
    return {
        "budget_bytes": budget(),
        "resident_bytes": resident,
        "in_flight": sum(one.in_flight for one in scheduled),
        "queued": sum(one.queued for one in scheduled),
    }
