"""Issue 8, "Truthful": a server that answered before and now does not is "not
answering", never "starting: not listening yet"; a live process stopped by a signal
(SIGSTOP, SIGTSTP) says so. A server that never answered is still starting, as before.
"""

from __future__ import annotations

from inferactors._policy.probe_report import ServerReport, Unreachable
from inferactors._policy.status import map_report
from inferactors._status import InstanceState

WHY = "GET /health: no complete reply within 2 s"
SILENT = ServerReport(Unreachable(WHY))


def test_a_server_that_never_answered_is_starting() -> None:
    status = map_report(SILENT, model="tiny", alive=True, adopted=False)
    assert (status.state, status.detail) == (
        InstanceState.DEGRADED,
        f"starting: not listening yet ({WHY})",
    )


def test_a_server_that_answered_and_went_silent_is_not_answering() -> None:
    status = map_report(SILENT, model="tiny", alive=True, adopted=False, answered=True)
    assert (status.state, status.detail) == (
        InstanceState.DEGRADED,
        f"not answering: {WHY}",
    )


def test_a_stopped_process_says_it_is_stopped() -> None:
    was_up = map_report(
        SILENT, model="tiny", alive=True, adopted=False, answered=True, stopped=True
    )
    assert (was_up.state, was_up.detail) == (
        InstanceState.DEGRADED,
        f"process is stopped (SIGSTOP/SIGTSTP): not answering: {WHY}",
    )
    never_up = map_report(SILENT, model="tiny", alive=True, adopted=False, stopped=True)
    assert never_up.detail == f"process is stopped (SIGSTOP/SIGTSTP): not answering: {WHY}"


def test_an_adopted_server_that_had_been_up_is_not_answering() -> None:
    status = map_report(SILENT, model="tiny", alive=True, adopted=True, answered=True)
    assert (status.state, status.detail) == (
        InstanceState.EXITED,
        f"unreachable: not answering: {WHY}; inferactors does not restart adopted servers",
    )
    never = map_report(SILENT, model="tiny", alive=True, adopted=True)
    assert never.detail == f"unreachable ({WHY}); inferactors does not restart adopted servers"
