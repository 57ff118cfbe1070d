"""``/readyz`` as a kubelet sees it, from a real `Fleet` of fake llama-servers (real
processes): a saturated engine whose ``/health`` says "no slot available" is ready, and
one whose ``/health`` stops answering while its completions still work stays ready, while
the same server truly gone turns not ready after the probes in a row, with the reason."""

from __future__ import annotations

import os
import signal

import trio

from inferactors._service.fleet import Fleet
from inferactors._service.fleet_open import open_fleet
from inferactors.testing import FakeServerFaults, RuntimeKit
from inferactors.testing._fake_launch import write_fake_server_program
from inferactors.testing._fake_processes import free_port
from service.fleet_support import Entry, RunFile, running, until


def ready(fleet: Fleet, name: str) -> bool:
    return next(one.ready for one in fleet.readiness() if one.name == name)


async def watch_ready(fleet: Fleet, name: str, for_s: float) -> list[bool]:
    seen = []
    with trio.move_on_after(for_s):
        while True:
            seen.append(ready(fleet, name))
            await trio.sleep(0.05)
    return seen


async def test_busy_or_slow_but_serving_engines_stay_ready(inferactors_kit: RuntimeKit) -> None:
    def program(name: str, faults: FakeServerFaults) -> RunFile:
        run = RunFile.create(inferactors_kit)
        run.program = write_fake_server_program(
            inferactors_kit.root / name,
            faults=faults,
            python=inferactors_kit.workspace.python,
            sys_path=inferactors_kit.workspace.sys_path,
        )
        return run

    busy = program("busy", FakeServerFaults(health_fault="busy"))
    busy.write(Entry("busy", free_port()))
    async with open_fleet(busy.config(), busy.path) as fleet:
        await until(fleet, running("busy"))
        assert fleet.view("busy").status.detail == "busy: no slot available"
        assert all(await watch_ready(fleet, "busy", 3.0))

    slow = program("slow", FakeServerFaults(health_fault="hang", health_fault_after_s=1.0))
    slow.write(Entry("slow", free_port()))
    async with open_fleet(slow.config(), slow.path) as fleet:
        await until(fleet, running("slow"))
        seen = await watch_ready(fleet, "slow", 6.0)
        assert fleet.view("slow").status.serving, fleet.view("slow").status
        assert all(seen[seen.index(True) :]), seen  # never pulled once ready


async def test_a_server_gone_turns_not_ready_with_the_reason(inferactors_kit: RuntimeKit) -> None:
    run = RunFile.create(inferactors_kit)
    run.write(Entry("chat", free_port()))
    async with open_fleet(run.config(), run.path) as fleet:
        await until(fleet, running("chat"))
        await until(fleet, lambda f: ready(f, "chat"))
        pid = fleet.view("chat").status.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # alive, but answers nothing
        try:
            # a silent server is judged within the no-verdict bound (12 late probes, 24 s
            # at the default 2 s timeout) however late a loaded machine runs our loop
            await until(fleet, lambda f: not ready(f, "chat"), within_s=40)
        finally:
            os.kill(pid, signal.SIGCONT)
        [one] = [one for one in fleet.readiness() if one.name == "chat"]
        assert one.reason is not None
        assert one.reason.startswith("degraded: process is stopped"), one.reason
