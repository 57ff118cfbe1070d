"""The web page's rows: each instance as the page shows it (`row`), its display state
(`display_state`), and the front door's residency against its budget (`door_summary`).

Plain data (JSON-ready dicts) computed from the fleet's cached views and the history's
last readings: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from .._actors.front_door_seam import Residency
from .._config.convert_api import api_data
from .._errors import InferactorsError, one_line
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


class Facts(Protocol):
    """What the page shows of an instance that its view lacks: its endpoint and model."""

    def __call__(self, name: str) -> tuple[str | None, str | None]: ...


def no_facts(name: str) -> tuple[str | None, str | None]:
    """No endpoint, no model known."""
    return (None, None)


def fleet_facts(members: Mapping[str, Any]) -> Facts:
    """The endpoint (``http://127.0.0.1:8090``) and model of each of a fleet's members,
    read from its placement in the run file."""

    def facts(name: str) -> tuple[str | None, str | None]:
        member = members.get(name)
        if member is None:
            return (None, None)
        spec = member.placement.entry.spec
        try:
            endpoint: str | None = spec.base_url()
        except InferactorsError:
            endpoint = None
        return (endpoint, spec.model)

    return facts


def row(view: InstanceView, facts: Facts, history: UiHistory) -> dict[str, Any]:
    """The page's row of ``view``: its display state, endpoint, model, pid, uptime,
    restarts, time to first token, resident memory (bytes) and CPU (percent of one core)
    of its process tree at the last reading, a detail in words, its residency, and its
    whole status (for the instance's panel)."""
    status = view.status
    endpoint, model = facts(view.name)
    rss, cpu = history.usage_now(view.name, status.pid)
    return {
        "name": view.name,
        "flavor": view.flavor,
        "mode": view.mode,
        "state": display_state(view),
        "endpoint": endpoint,
        "model": model,
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


_MOVING = "uptime_s"
"""The one field of a row (and of its status) that moves on its own: not a change."""


def _key(data: dict[str, Any]) -> str:
    """``data`` (a row) as compared between two tables: JSON without its uptimes."""
    still = {k: v for k, v in data.items() if k != _MOVING}
    status = still.get("status")
    if isinstance(status, dict):
        still["status"] = {k: v for k, v in status.items() if k != _MOVING}
    return json.dumps(still, sort_keys=True, separators=(",", ":"))


@attrs.define(eq=False)
class RowsSent:
    """What one live stream last sent of each row, so that a later table is sent as its
    changes only (`changes`): the page's rows at 200 instances are about 100 kB, one
    instance's change a few hundred bytes."""

    _keys: dict[str, str] = attrs.Factory(dict)
    _order: list[str] = attrs.Factory(list)
    _door: Any = None

    def changes(self, table: dict[str, Any]) -> dict[str, Any] | None:
        """The ``changes`` of ``table`` (``{"rows", "door", "now"}``, as `WebPage.rows`)
        since the last one: ``{"rows": [the rows that changed, whole], "order": [every
        name, in order] or None when the names and their order stayed, "door", "now"}``;
        None when nothing changed but uptimes (they move on their own: the page counts)."""
        rows: list[dict[str, Any]] = table["rows"]
        order = [each["name"] for each in rows]
        keys = {each["name"]: _key(each) for each in rows}
        changed = [each for each in rows if self._keys.get(each["name"]) != keys[each["name"]]]
        moved = order != self._order
        door_changed = table["door"] != self._door
        self._keys, self._order, self._door = keys, order, table["door"]
        if not changed and not moved and not door_changed:
            return None
        return {
            "rows": changed,
            "order": order if moved else None,
            "door": table["door"],
            "now": table["now"],
        }
