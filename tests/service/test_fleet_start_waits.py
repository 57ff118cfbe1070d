"""``start`` and ``restart`` wait for the instance to settle (issue 19 item 3): a real
`Fleet` of fake llama-servers. A start answers at spawn no more: it answers once the
server is running, or once its start failed for good (given up after its restarts); with
no wait, at spawn (starting). A stop of a stopped instance is no error: the view as it is."""

from __future__ import annotations

import pytest
import trio

from inferactors._errors import Unsupported
from inferactors._policy.service_status import DisplayState
from inferactors._service.fleet_open import open_fleet
from inferactors.testing import CrashAt, ListenLate, RuntimeKit, Status503, Timeline
from inferactors.testing._fake_processes import free_port
from service.fleet_support import Entry, RunFile, running, until


async def test_a_start_answers_once_running_and_no_wait_at_spawn(
    inferactors_kit: RuntimeKit,
) -> None:
    run = RunFile.create(inferactors_kit, Timeline.of(ListenLate(after_s=1.0)))
    run.write(Entry("a", free_port()))
    async with open_fleet(run.config(), run.path) as fleet:
        await until(fleet, running("a"))
        stopped = await fleet.stop("a")
        again = await fleet.stop("a")  # nothing runs: no error, the view as it is
        waited = await fleet.start("a", wait_s=30.0)
        await fleet.stop("a")
        spawned = await fleet.start("a", wait_s=0.0)
    assert stopped.display_state is DisplayState.STOPPED
    assert again.display_state is DisplayState.STOPPED
    assert again.status.stop_reason == "requested"
    assert waited.display_state is DisplayState.RUNNING
    assert waited.status.pid is not None
    assert spawned.display_state is DisplayState.STARTING


async def test_a_start_that_fails_for_good_answers_fatal_not_at_its_deadline(
    inferactors_kit: RuntimeKit,
) -> None:
    run = RunFile.create(
        inferactors_kit, Timeline.of(Status503(for_s=10.0), CrashAt(after_s=0.3, exit_code=3))
    )
    run.restart = "max_restarts = 1\nbase_s = 0.2\ncap_s = 0.2\njitter = 0.0"
    run.write(Entry("a", free_port()), Entry("b", free_port(), extra="required = false\n"))
    async with open_fleet(run.config(), run.path) as fleet:
        await until(fleet, lambda f: f.view("a").display_state is DisplayState.FATAL)
        began = trio.current_time()
        view = await fleet.restart("a", wait_s=60.0)
        took = trio.current_time() - began
    assert view.display_state is DisplayState.FATAL
    assert (view.status.supervision or "").startswith("gave up")
    assert took < 30.0  # it answered when the start gave up, not at the wait's end


async def test_an_adopted_servers_output_is_not_ours_to_show(
    inferactors_kit: RuntimeKit,
) -> None:
    run = RunFile.create(inferactors_kit)
    port = free_port()
    run.write(Entry("a", free_port()), Entry("other", port, mode="adopted"))
    async with open_fleet(run.config(), run.path) as fleet:
        await until(fleet, running("a"))
        assert fleet.log_tail("a", 5) != ()  # ours: the fake server's own lines
        with pytest.raises(Unsupported, match="other is adopted: inferactors did not start it"):
            fleet.log_tail("other", 5)
        with pytest.raises(Unsupported), fleet.follow_logs("other"):
            pass
