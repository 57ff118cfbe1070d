"""The descendants timer of a server without a cgroup (`DescendantLooks.on_timer`): it looks
only once no look was made for 1.5 s, so it never wakes (a wake of the loop costs more than
the look) while another caller (the record refresh, once a second) looks, and looks about
once a second when nobody else does.

A real process (``sleep``); the looks are counted where they happen (`Descendants.track`)."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import trio

from inferactors._edges.descendant_looks import TRACK_S
from inferactors._edges.descendants import Descendants
from inferactors._edges.process import ManagedProcess


@attrs.frozen
class SleepLaunch:
    program: Path = Path("/bin/sleep")
    args: tuple[str, ...] = ("60",)
    cwd: Path = Path("/")
    env: tuple[tuple[str, str], ...] = (("PATH", "/usr/bin:/bin"),)


@pytest.fixture
def looks(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The trio time of every look at a server's descendants."""
    seen: list[float] = []
    real = Descendants.track

    def counted(self: Descendants) -> tuple[int, ...]:
        seen.append(trio.current_time())
        return real(self)

    monkeypatch.setattr(Descendants, "track", counted)
    return seen


async def spawned(nursery: trio.Nursery) -> ManagedProcess:
    process = await ManagedProcess.spawn(nursery, SleepLaunch())
    if process.cgroup is not None:
        await process.terminate(5.0)
        pytest.skip("the host delegates a cgroup: its servers are never looked at on a timer")
    return process


async def test_the_timer_looks_about_once_a_second_when_nobody_else_does(
    nursery: trio.Nursery, looks: list[float]
) -> None:
    process = await spawned(nursery)
    began = trio.current_time()
    await trio.sleep(3.5)
    timer_looks = [at - began for at in looks]
    await process.terminate(5.0)
    assert 2 <= len(timer_looks) <= 4  # at about 1, 2 and 3 s
    assert timer_looks[0] >= TRACK_S * 0.9


@attrs.define(eq=False)
class TimerSteps(trio.abc.Instrument):
    """How many times the descendants timer's task ran."""

    count: int = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.startswith("inferactors descendants"):
            self.count += 1


async def test_the_timer_never_wakes_while_another_caller_looks_every_second(
    nursery: trio.Nursery, looks: list[float]
) -> None:
    process = await spawned(nursery)
    await trio.sleep(0.1)  # the timer started and sleeps
    steps = TimerSteps()
    trio.lowlevel.add_instrument(steps)
    process.track_descendants()
    ours = 1
    for _ in range(4):
        await trio.sleep(0.9 * TRACK_S)  # the refresh's looks, each moving the timer on
        process.track_descendants()
        ours += 1
    await trio.sleep(0.5 * TRACK_S)
    trio.lowlevel.remove_instrument(steps)
    total = len(looks)
    await process.terminate(5.0)
    assert total == ours  # every look was ours
    assert steps.count == 0  # and the timer's task never woke
