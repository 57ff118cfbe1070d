"""An on-demand instance is ready while a request would start it (a real `Fleet` of fake
llama-servers, real processes): ``/readyz`` counts it ready before its first request and
after its server crashed while idle, and its display state is ``idle`` (never ``fatal``)
after that crash, since the next request starts it again; an operator's stop makes it
not ready (requests are refused until a start); an always-on instance that is down stays
not ready."""

from __future__ import annotations

import os
import signal

import trio

from inferactors._policy.service_status import DisplayState
from inferactors._service.fleet import Fleet
from inferactors._service.fleet_open import open_fleet
from inferactors._status import InstanceState
from inferactors.testing import RuntimeKit
from inferactors.testing._fake_processes import free_port
from service.fleet_support import Entry, RunFile, running, until
from service.test_fleet_on_demand import ON_DEMAND, _door, _write


def ready(fleet: Fleet, name: str) -> tuple[bool, str | None]:
    one = next(one for one in fleet.readiness() if one.name == name)
    return one.ready, one.reason


async def test_an_on_demand_instance_a_request_starts_is_ready(
    inferactors_kit: RuntimeKit,
) -> None:
    run = RunFile.create(inferactors_kit)
    _write(run, Entry("always", free_port()), Entry("lazy", free_port(), extra=ON_DEMAND))
    async with open_fleet(run.config(), run.path) as fleet:
        scheduler = await _door(fleet)
        await until(fleet, running("always"))
        with trio.fail_after(30.0):
            await fleet.settled.wait()
        assert fleet.view("lazy").display_state is DisplayState.IDLE
        assert ready(fleet, "lazy") == (True, None)  # never started: a request starts it
        with trio.fail_after(30.0):
            grant = await scheduler.acquire("lazy")
        grant.done()
        await until(fleet, running("lazy"))
        pid = fleet.view("lazy").status.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # a crash while idle
        await until(fleet, lambda f: f.view("lazy").status.state is InstanceState.EXITED)
        crashed = fleet.view("lazy")
        assert crashed.status.stop_reason == "crash"
        assert crashed.display_state is DisplayState.IDLE, crashed.display_state
        assert ready(fleet, "lazy") == (True, None)
        with trio.fail_after(30.0):
            grant = await scheduler.acquire("lazy")  # the next request starts it again
        grant.done()
        await until(fleet, running("lazy"))
        await fleet.stop("lazy")  # an operator's stop: refused until a start
        assert fleet.view("lazy").display_state is DisplayState.STOPPED
        lazy_ready, why = ready(fleet, "lazy")
        assert not lazy_ready
        assert why is not None
        always = fleet.view("always").status.pid
        assert always is not None
        await fleet.stop("always")  # required and always on: down is not ready
        assert not ready(fleet, "always")[0]
