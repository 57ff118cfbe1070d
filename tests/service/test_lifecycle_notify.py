"""What the supervisor tells systemd, and when, on trio's MockClock (issue 10 item 8).

The socket itself is `tests/edges/test_sd_notify.py`'s and a real ``inferactors run``'s
(`tests/e2e/test_sd_notify_run.py`); here a recording notifier and a stand-in fleet
pin down the timing: READY=1 only after settle, WATCHDOG=1 every period while the actor
tree answers and none while it does not, STATUS= only when the line changes.
"""

from __future__ import annotations

import attrs
import trio
import trio.testing

from inferactors._edges.sd_notify import monotonic_usec
from inferactors._service.lifecycle import ServiceNotes, serve_notify
from inferactors._service.views import InstanceView, Lifecycle, LifecycleNote
from inferactors._status import InstanceState, InstanceStatus
from service.fleet_support import Recorder


def _view(name: str, state: InstanceState) -> InstanceView:
    detail = "starting: not listening yet" if state is InstanceState.DEGRADED else None
    status = InstanceStatus(state, detail)
    return InstanceView(name, "infer.llamacpp", "managed", f"{name}-id", status)


@attrs.define
class StandInFleet:
    """Views, settledness and an actor tree that answers after ``answer_s`` (None: never);
    `poke` says the views changed."""

    states: dict[str, InstanceState]
    answer_s: float | None = 0.01
    settled: trio.Event = attrs.Factory(trio.Event)
    changed: trio.Event = attrs.Factory(trio.Event)

    def views(self) -> tuple[InstanceView, ...]:
        return tuple(_view(name, state) for name, state in self.states.items())

    async def alive(self, deadline_s: float) -> bool:
        with trio.move_on_after(deadline_s):
            await trio.sleep(float("inf") if self.answer_s is None else self.answer_s)
            return True
        return False

    async def until_changed(self) -> None:
        await self.changed.wait()

    def poke(self) -> None:
        self.changed.set()
        self.changed = trio.Event()


async def test_ready_only_once_settled_with_the_status_line(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fleet = StandInFleet({"a": InstanceState.DEGRADED, "b": InstanceState.RUNNING})
    recorder = Recorder()
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_notify, ServiceNotes(recorder, fleet), None)
        await trio.sleep(5.0)
        assert recorder.times_of("READY") == []
        fleet.states["a"] = InstanceState.RUNNING
        fleet.settled.set()
        await trio.sleep(0.1)
        nursery.cancel_scope.cancel()
    ready = [fields for _, fields in recorder.sent if "READY" in fields]
    assert ready == [{"READY": 1, "STATUS": "2 of 2 running"}]
    assert recorder.times_of("READY") == [5.0]


async def test_the_start_timeout_is_extended_while_models_load_and_not_after(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fleet = StandInFleet({"big": InstanceState.DEGRADED})
    recorder = Recorder()
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_notify, ServiceNotes(recorder, fleet), None)
        await trio.sleep(125.0)  # a model that loads for two minutes
        fleet.states["big"] = InstanceState.RUNNING
        fleet.settled.set()
        await trio.sleep(60.0)
        nursery.cancel_scope.cancel()
    extended = recorder.times_of("EXTEND_TIMEOUT_USEC")
    assert extended == [10.0 * n for n in range(13)]  # 0, 10, ..., 120: none after READY
    assert {f["EXTEND_TIMEOUT_USEC"] for _, f in recorder.sent if "EXTEND_TIMEOUT_USEC" in f} == {
        30_000_000
    }
    assert recorder.times_of("READY") == [125.0]


async def test_watchdog_pings_every_period_while_the_tree_answers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fleet = StandInFleet({"a": InstanceState.RUNNING})
    recorder = Recorder()
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_notify, ServiceNotes(recorder, fleet), 2.0)
        await trio.sleep(7.0)
        fleet.answer_s = None  # the actor tree stops answering
        await trio.sleep(10.0)
        fleet.answer_s = 0.01
        await trio.sleep(3.5)
        nursery.cancel_scope.cancel()
    pings = [round(at, 2) for at in recorder.times_of("WATCHDOG")]
    assert pings == [0.01, 2.01, 4.01, 6.01, 18.01, 20.01]


async def test_status_is_sent_when_the_line_changes_only(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fleet = StandInFleet({"a": InstanceState.DEGRADED, "b": InstanceState.DEGRADED})
    recorder = Recorder()
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_notify, ServiceNotes(recorder, fleet), None)
        await trio.sleep(3.5)
        fleet.states["a"] = InstanceState.RUNNING
        fleet.poke()
        await trio.sleep(0.01)
        status_at = trio.current_time()
        await trio.sleep(3.0)
        nursery.cancel_scope.cancel()
    statuses = [(at, fields["STATUS"]) for at, fields in recorder.sent if "STATUS" in fields]
    assert statuses == [(0.0, "0 of 2 running; 2 starting"), (3.5, "1 of 2 running; 1 starting")]
    assert status_at == 3.51


async def test_milestones_become_reloading_ready_and_stopping(
    autojump_clock: trio.testing.MockClock,
) -> None:
    recorder = Recorder()
    notes = ServiceNotes(recorder, StandInFleet({"a": InstanceState.RUNNING}))
    before = monotonic_usec()
    for kind in (Lifecycle.RELOADING, Lifecycle.RELOADED, Lifecycle.STOPPING):
        notes.on_note(LifecycleNote(kind, "", 0.0))
    sent = [fields for _, fields in recorder.sent]
    assert [tuple(fields) for fields in sent] == [
        ("RELOADING", "MONOTONIC_USEC", "STATUS"),
        ("READY", "STATUS"),
        ("STOPPING", "STATUS"),
    ]
    usec = sent[0]["MONOTONIC_USEC"]
    assert isinstance(usec, int)
    assert before <= usec <= monotonic_usec()  # CLOCK_MONOTONIC, not trio's clock
    assert sent[1]["STATUS"] == "1 of 1 running"
