"""The page's shared table (`ui_table.RowTable`): refreshed once per change of the fleet
whatever the number of pages, each page sent only the rows changed since its version,
an uptime that moves is no change, and the whole table is made anew for a new page."""

from __future__ import annotations

import attrs
import trio

from inferactors._edges.tree_usage import TreeUsage
from inferactors._service.ui_table import RowTable
from inferactors._service.views import InstanceView
from service.control_support import running
from service.ui_support import PageFleet


@attrs.define(eq=False)
class Counted(PageFleet):
    """`PageFleet` that counts its `views` calls."""

    reads: int = 0

    def views(self) -> tuple[InstanceView, ...]:
        self.reads += 1
        return super().views()


def _fleet() -> Counted:
    return Counted(instances={name: running(name, 100 + n) for n, name in enumerate("abc")})


def _restart(fleet: Counted, name: str) -> None:
    view = fleet.instances[name]
    fleet.instances[name] = attrs.evolve(view, status=attrs.evolve(view.status, restarts=1))
    fleet.changed()


async def test_one_refresh_per_change_serves_every_page() -> None:
    fleet = _fleet()
    table = RowTable(fleet, lambda: None)
    first = table.table()
    behind = ahead = table.version
    assert [row["name"] for row in first["rows"]] == ["a", "b", "c"]
    _restart(fleet, "b")
    reads = fleet.reads
    for _ in range(5):  # five pages woken by one change
        table.refresh()
    assert fleet.reads == reads + 1
    changes = table.changes_since(ahead)
    assert changes is not None
    assert [row["name"] for row in changes["rows"]] == ["b"]
    assert changes["order"] is None
    ahead = table.version
    assert table.changes_since(ahead) is None
    _restart(fleet, "a")
    table.refresh()
    late = table.changes_since(behind)  # a page that missed both changes gets both
    assert late is not None
    assert [row["name"] for row in late["rows"]] == ["a", "b"]
    now = table.changes_since(ahead)
    assert now is not None
    assert [row["name"] for row in now["rows"]] == ["a"]


async def test_uptime_is_no_change_but_usage_and_removal_are() -> None:
    fleet = _fleet()
    table = RowTable(fleet, lambda: None)
    table.table()
    seen = table.version
    await trio.sleep(0.01)  # every uptime moved
    fleet.changed()
    table.refresh()
    assert table.changes_since(seen) is None
    fleet.history.on_usage({"c": (102, TreeUsage(rss_bytes=7_000, cpu_s=0.5))})
    table.refresh()
    used = table.changes_since(seen)
    assert used is not None
    assert [(row["name"], row["rss_bytes"]) for row in used["rows"]] == [("c", 7_000)]
    assert table.sample()["c"]["memory"][1] == 7_000
    seen = table.version
    del fleet.instances["a"]
    fleet.changed()
    table.refresh()
    gone = table.changes_since(seen)
    assert gone is not None
    assert (gone["rows"], gone["order"]) == ([], ["b", "c"])


async def test_a_new_page_gets_every_row_with_its_uptime_now() -> None:
    fleet = _fleet()
    table = RowTable(fleet, lambda: None)
    old = table.table()["rows"][0]["uptime_s"]
    await trio.sleep(0.05)
    table.refresh()  # nothing changed: the rows kept are the old ones
    assert table.table()["rows"][0]["uptime_s"] >= old + 0.05
