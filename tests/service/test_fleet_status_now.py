"""systemd's STATUS= follows a crash at once, not at the respawn (issue 10 item 8, found by
an operator): a real `Fleet` of one fake llama-server that crashes, with a restart delay
of 3 s, and the notifier on a recording `Notifier`."""

from __future__ import annotations

import pytest
import trio

from inferactors._events import ProcessExited, ProcessStarted
from inferactors._service import lifecycle
from inferactors._service.fleet_open import open_fleet
from inferactors._service.lifecycle import ServiceNotes, serve_notify
from inferactors.testing import CrashAt, RuntimeKit, Timeline
from inferactors.testing._fake_processes import free_port
from service.fleet_support import Entry, Recorder, RunFile

PROMPT_S = 0.25
"""How soon after the exit event the STATUS line must say so, float seconds."""


async def test_status_says_restarting_within_the_exit_event(
    inferactors_kit: RuntimeKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lifecycle, "STATUS_EVERY_S", 60.0)  # only a change may send it
    run = RunFile.create(inferactors_kit, Timeline.of(CrashAt(after_s=1.0, exit_code=3)))
    run.restart = "max_restarts = 2\nbase_s = 3.0\ncap_s = 3.0\njitter = 0.0"
    run.write(Entry("a", free_port()))
    recorder = Recorder()
    async with open_fleet(run.config(), run.path) as fleet, trio.open_nursery() as nursery:
        await nursery.start(serve_notify, ServiceNotes(recorder, fleet), None)
        with fleet.follow_events() as events, trio.fail_after(30):
            started = 0
            async for event in events:
                if isinstance(event, ProcessExited):
                    exited_at = trio.current_time()
                started += isinstance(event, ProcessStarted)
                if started == 2:
                    break
        nursery.cancel_scope.cancel()
    statuses = [(at, fields["STATUS"]) for at, fields in recorder.sent if "STATUS" in fields]
    after = [(at - exited_at, line) for at, line in statuses if at >= exited_at]
    assert after, statuses
    delay, line = after[0]
    assert line == "0 of 1 running; 1 restarting", statuses
    assert delay < PROMPT_S, statuses
