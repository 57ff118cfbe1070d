"""The web page's table: `RowTable`, every instance's row computed once per change of the
fleet and shared by every open page, each row stamped with the version it changed at, so
that a page is sent only the rows that changed since the version it has (`changes_since`).

A refresh compares each instance's frozen view (and its last usage reading) with the one
its row was made from, and converts only the views that changed (`ui_rows.row`); the
uptimes are left out of the comparison, as they move on their own (the page counts them
from the row's arrival). A refresh is done once per change of the fleet or usage reading
(`TableSource.changes`, `UiHistory.readings`): the first page woken by a change refreshes,
the others find the table current. Synchronous and I/O free.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import attrs

from .ui_history import UiHistory
from .ui_rows import door_summary, row
from .views import InstanceView


class TableSource(Protocol):
    """What the table reads of a `Fleet`."""

    @property
    def history(self) -> UiHistory: ...

    @property
    def changes(self) -> int:
        """How many times a member's view changed (it grows with each change)."""
        ...

    def views(self) -> tuple[InstanceView, ...]: ...


Key = tuple[Any, ...]


def still(view: InstanceView, history: UiHistory) -> Key:
    """What a row is made of, as compared between two refreshes: the view without its
    uptime (nor the wall-clock stop deadline, which is read anew each time and is not
    shown) and the usage reading shown with it."""
    status = view.status
    usage = history.usage_now(view.name, status.pid)
    fixed = status if status.uptime_s is None else attrs.evolve(status, uptime_s=None)
    shown = (view.flavor, view.mode, view.refused, view.residency, view.endpoint, view.model)
    return (fixed, shown, usage)


@attrs.define(eq=False)
class _Row:
    key: Key
    data: dict[str, Any]


@attrs.define(eq=False)
class RowTable:
    """Every instance's row, shared by the page's streams (module docstring).

    ``version`` grows by one with each refresh that changed anything; a stream keeps the
    version it was last sent (`changes_since`).
    """

    source: TableSource
    budget: Callable[[], int | None]
    version: int = 0
    _rows: dict[str, _Row] = attrs.Factory(dict)
    _changed: dict[str, int] = attrs.Factory(dict)
    """Each name and the version its row last changed at, the latest last."""
    _order: tuple[str, ...] = ()
    _place: dict[str, int] = attrs.Factory(dict)
    _order_at: int = 0
    _door: dict[str, Any] | None = None
    _door_at: int = 0
    _now: float = 0.0
    _stamp: tuple[int, int] | None = None
    _sample: tuple[int, dict[str, Any]] | None = None

    def refresh(self, force: bool = False) -> None:
        """Bring the table up to the fleet's views, unless nothing changed since the last
        refresh (``force``: compare anyway, as the front door's residency moves with each
        request without a change of the fleet)."""
        history = self.source.history
        stamp = (self.source.changes, history.readings)
        if stamp == self._stamp and not force:
            return
        self._stamp = stamp
        views = self.source.views()
        version = self.version + 1
        changed = False
        for view in views:
            key = still(view, history)
            kept = self._rows.get(view.name)
            if kept is None or kept.key != key:
                self._rows[view.name] = _Row(key, row(view, history))
                self._changed.pop(view.name, None)
                self._changed[view.name] = version
                changed = True
        order = tuple(view.name for view in views)
        if order != self._order:
            for gone in set(self._order) - set(order):
                del self._rows[gone]
                self._changed.pop(gone, None)
            self._order, self._order_at, changed = order, version, True
            self._place = {name: index for index, name in enumerate(order)}
        door = door_summary(views, self.budget)
        if door != self._door:
            self._door, self._door_at, changed = door, version, True
        self._now = history.wall()
        if changed:
            self.version = version

    def table(self) -> dict[str, Any]:
        """The whole table now (``{"rows", "door", "now"}``), every row made anew (so its
        uptime is now's); the table is refreshed first (forced)."""
        self.refresh(force=True)
        history = self.source.history
        rows = [row(view, history) for view in self.source.views()]
        return {"rows": rows, "door": self._door, "now": history.wall()}

    def changes_since(self, version: int) -> dict[str, Any] | None:
        """What changed after ``version``: ``{"rows": [the rows that changed, whole, in
        order], "order": [every name, in order] or None when the names and their order
        stayed, "door", "now"}``; None when nothing did. Reads only the rows that changed."""
        if version >= self.version:
            return None
        names = []
        for name, at in reversed(self._changed.items()):
            if at <= version:
                break
            names.append(name)
        names.sort(key=self._place.__getitem__)
        return {
            "rows": [self._rows[name].data for name in names],
            "order": list(self._order) if self._order_at > version else None,
            "door": self._door,
            "now": self._now,
        }

    def sample(self) -> dict[str, Any]:
        """Each instance's newest points (`UiHistory.latest`), made once per reading."""
        history = self.source.history
        if self._sample is None or self._sample[0] != history.readings:
            latest = {name: history.latest(name) for name in self._order}
            self._sample = (history.readings, latest)
        return self._sample[1]
