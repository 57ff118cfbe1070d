"""The instance state machine's life-cycle rules, one case each, synchronous (as llama-swap's
``fifo_test.go`` drives its scheduler): starts that coalesce or are refused, stops (while
starting, twice, of an adopted server, with a reason), abandoned starts, exits counted
once, unload and adoption. Crashes and the holds that keep an instance down are
``test_instance_step_downs.py``.

``actors.step_support`` builds the stand-ins; each case sends real messages to `step`.
"""

from __future__ import annotations

from actors.step_support import (
    FATAL,
    Run,
    caller,
    events,
    evidence,
    exits,
    kinds,
    made_ready,
    of_type,
    proc,
    refusals,
    started,
)
from inferactors import (
    InstanceState,
    PinMismatch,
    ProcessStarted,
    StopReason,
    Unsupported,
)
from inferactors._actors.instance.effects import (
    Answer,
    CloseDown,
    ConfirmAdopted,
    EndActor,
    Refuse,
    Spawn,
    Terminate,
    WatchAdopted,
    WatchProcess,
)
from inferactors._actors.instance.messages import (
    Confirmed,
    Exited,
    Seen,
    ShutdownDone,
    Spawned,
    SpawnFailed,
    Stopped,
)
from inferactors._actors.instance.stopping import ABANDONED_GRACE_S
from inferactors._actors.messages import Annotate, Restart, Shutdown, Start, Stop
from inferactors._edges.capture import RunEvidence
from inferactors._policy.service_status import DisplayState, display_state

# Starts.


def test_concurrent_starts_spawn_once_and_share_the_one_outcome() -> None:
    run = Run.of()
    first, second = caller("first"), caller("second")
    assert kinds(run.send(Start(first))) == ["Spawn"]
    assert run.send(Start(second)) == ()  # joins the start under way
    process = proc(100)
    out = run.send(Spawned(process, first))
    assert kinds(out) == ["Emit", "WatchProcess", "Answer", "Answer"]
    assert {a.reply for a in of_type(out, Answer)} == {first, second}
    assert run.state.process is process
    assert not run.state.starting
    [started_event] = events(out, ProcessStarted)
    assert started_event.pid == 100


def test_a_start_while_running_is_refused_and_a_restart_while_starting_too() -> None:
    run = Run.of()
    run.send(Start(caller("first")))
    run.send(Restart(1, caller("restart")))
    started(run, pid=101)
    run.send(Start(caller("again")))
    assert refusals(run) == {
        "restart": "chat-1 is already running",
        "again": "chat-1 is already running",
    }


def test_a_start_whose_caller_gave_up_before_it_was_read_spawns_nothing() -> None:
    run = Run.of()
    gone = caller("gone")
    assert run.send(Start(gone), Seen(gone=frozenset({gone}))) == ()
    assert not run.state.starting


def test_a_restart_after_an_operator_stop_is_refused_and_a_start_is_not() -> None:
    run = Run.of()
    started(run)
    run.send(Stop(1.0, caller("stop")))
    run.send(Stopped(run.process, evidence(100, signal=15)))
    run.send(Restart(1, caller("restart")))
    assert refusals(run) == {"restart": "chat-1 was stopped by the operator"}
    assert kinds(run.send(Start(caller("start")))) == ["Spawn"]


def test_a_restart_after_a_crash_spawns_again() -> None:
    run = Run.of()
    started(run)
    run.send(Exited(run.process, evidence(100, exit_code=1)))
    out = run.send(Restart(1, caller("restart")))
    assert of_type(out, Spawn) == [Spawn(of_type(out, Spawn)[0].reply, None)]


def test_a_stop_between_a_crash_and_its_restart_is_the_operators_stop() -> None:
    """Crashed, its restart pending (wanted still): the stop is answered at once with the
    crash's evidence (before: refused as not running), the view says ``requested`` with
    no supervisor note, the pending restart is refused, and a second stop is refused."""
    run = Run.of()
    started(run)
    crash = evidence(100, exit_code=1)
    run.send(Exited(run.process, crash))
    run.send(Annotate("restarting in 0.3 s (attempt 1)", 1, caller("note")))
    stop = caller("stop")
    out = run.send(Stop(1.0, stop))
    [answer] = of_type(out, Answer)
    assert answer.reply is stop
    assert answer.value == run.state.last  # the crash's, named (runtime, instance)
    assert isinstance(answer.value, RunEvidence)
    assert (answer.value.pid, answer.value.exit_code) == (crash.pid, 1)
    assert not of_type(out, Terminate)
    status = run.status()
    assert (status.state, status.stop_reason, status.supervision) == (
        InstanceState.EXITED,
        "requested",
        None,
    )
    run.send(Restart(1, caller("restart")))
    run.send(Stop(1.0, caller("again")))
    assert refusals(run) == {
        "restart": "chat-1 was stopped by the operator",
        "again": "chat-1 is not running",
    }


def test_a_stop_of_a_given_up_server_answers_and_keeps_its_view() -> None:
    """Given up (the supervisor said so): a stop (the run's shutdown, an operator's) is
    answered with the last exit's evidence, and the view keeps the give-up and the exit's
    own reason: nothing ran, so nothing was stopped on request."""
    run = Run.of()
    started(run)
    crash = evidence(100, exit_code=1)
    run.send(Exited(run.process, crash))
    run.send(Annotate("gave up: 5 restarts", 5, caller("note"), gave_up=True))
    before = run.status()
    stop = caller("stop")
    out = run.send(Stop(1.0, stop))
    [answer] = of_type(out, Answer)
    assert answer.reply is stop
    assert answer.value == run.state.last
    after = run.status()
    assert (after.state, after.stop_reason, after.supervision) == (
        InstanceState.EXITED,
        before.stop_reason,
        "gave up: 5 restarts",
    )
    assert after.stop_reason == "crash"


def test_a_spawn_that_failed_refuses_its_callers_and_the_stops_that_waited() -> None:
    run = Run.of()
    start = caller("start")
    run.send(Start(start))
    run.send(Stop(1.0, caller("stop")))
    run.send(SpawnFailed(PinMismatch("port 8090 is taken"), start))
    assert refusals(run) == {"start": "port 8090 is taken", "stop": "chat-1 is not running"}
    assert run.state.callers() == []
    assert not run.state.starting


def test_a_start_that_failed_after_an_operator_stop_reads_failed_not_stopped() -> None:
    run = Run.of()
    started(run)
    run.send(Stop(1.0, caller("stop")))
    run.send(Stopped(run.process, evidence(100, signal=15)))
    assert run.status().stop_reason == StopReason.REQUESTED.value
    start = caller("start")
    run.send(Start(start))
    run.send(SpawnFailed(PinMismatch("port 8090 is taken"), start))
    status = run.status()
    assert status.state is InstanceState.EXITED
    assert status.detail == "failed to start: port 8090 is taken"
    assert status.stop_reason == StopReason.STARTUP_FAILURE.value
    started(run, pid=101)  # the next spawn that works forgets it
    run.send(Exited(run.process, evidence(101, exit_code=1)))
    detail = run.status().detail
    assert detail is not None
    assert "port 8090" not in detail


# Stops.


def test_a_stop_while_starting_waits_for_the_spawn_and_then_stops_it() -> None:
    run = Run.of()
    start, stop = caller("start"), caller("stop")
    run.send(Start(start))
    assert run.send(Stop(2.0, stop)) == ()
    process = proc(100)
    out = run.send(Spawned(process, start))
    assert refusals(run) == {"start": "the start of chat-1 was aborted by a stop"}
    assert of_type(out, Terminate) == [Terminate(process, 2.0)]
    assert run.state.stop_reason is StopReason.REQUESTED
    out = run.send(Stopped(process, evidence(100, signal=15)))
    [answer] = of_type(out, Answer)
    assert answer.reply is stop
    assert [e.reason for e in exits(run)] == [StopReason.REQUESTED]


def test_a_second_stop_waits_for_the_first_and_its_reason_is_kept() -> None:
    run = Run.of()
    process = started(run)
    run.send(Stop(2.0, caller("one"), reason=StopReason.SHUTDOWN))
    assert run.send(Stop(9.0, caller("two"))) == ()  # no second signal, no new reason
    assert run.state.stop_reason is StopReason.SHUTDOWN
    out = run.send(Stopped(process, evidence(100, signal=15)))
    assert {getattr(a.reply, "name", "") for a in of_type(out, Answer)} == {"one", "two"}
    assert [e.reason for e in exits(run)] == [StopReason.SHUTDOWN]


def test_an_adopted_server_is_never_stopped_and_a_stop_of_nothing_is_refused() -> None:
    adopted = Run.of(managed=False)
    [refusal] = adopted.send(Stop(1.0, caller("stop")))
    assert isinstance(refusal, Refuse)
    assert isinstance(refusal.error, Unsupported)
    managed = Run.of()
    managed.send(Stop(1.0, caller("stop")))
    assert refusals(managed) == {"stop": "chat-1 is not running"}


def test_a_start_every_caller_gave_up_on_is_stopped_once_spawned() -> None:
    run = Run.of()
    one, two = caller("one"), caller("two")
    run.send(Start(one))
    run.send(Start(two))
    out = run.send(Spawned(proc(100), one), Seen(gone=frozenset({one, two})))
    assert of_type(out, Terminate) == [Terminate(run.process, ABANDONED_GRACE_S)]
    assert (run.state.stop_reason, run.state.wanted) == (StopReason.REQUESTED, False)
    assert len(of_type(out, Refuse)) == 2  # nobody reads them


def test_a_start_that_one_caller_still_waits_for_goes_on() -> None:
    run = Run.of()
    one, two = caller("one"), caller("two")
    run.send(Start(one))
    run.send(Start(two))
    out = run.send(Spawned(proc(100), one), Seen(gone=frozenset({one})))
    assert of_type(out, Terminate) == []
    assert len(of_type(out, Answer)) == 2


# Exits.


def test_an_exit_seen_twice_is_counted_once() -> None:
    run = Run.of()
    process = started(run)
    run.send(Stop(1.0, caller("stop")))
    run.send(Exited(process, evidence(100, signal=15)))
    out = run.send(Stopped(process, evidence(100, signal=15)))
    assert kinds(out) == ["Answer"]
    assert len(exits(run)) == 1


def test_an_exit_without_a_stop_is_a_crash_or_a_start_up_failure_in_its_own_words() -> None:
    crash = Run.of()
    started(crash)
    made_ready(crash)
    crash.send(Exited(crash.process, evidence(100, exit_code=1)), Seen(fatal=FATAL))
    failure = Run.of()
    started(failure)
    failure.send(Exited(failure.process, evidence(100, exit_code=1)), Seen(fatal=FATAL))
    [crashed], [failed] = exits(crash), exits(failure)
    assert crashed.reason is StopReason.CRASH  # it was ready: a crash, diagnosed
    assert failed.reason is StopReason.STARTUP_FAILURE
    assert failed.diagnosis is not None
    assert failed.diagnosis.line == FATAL.line
    status = failure.status()
    assert (status.state, status.stop_reason) == (InstanceState.EXITED, "start-up failure")
    assert status.detail == f"failed to start: {FATAL.describe()}"


# Unload and adoption.


def test_an_unload_stops_the_server_for_unload_and_ends_the_actor() -> None:
    run = Run.of()
    process = started(run)
    unload = caller("unload")
    out = run.send(Shutdown(5.0, unload))
    assert out == (CloseDown(process, 5.0, unload),)
    assert run.state.stop_reason is StopReason.UNLOAD
    run.send(Exited(process, evidence(100, signal=15)))
    assert kinds(run.send(ShutdownDone(unload))) == ["Answer", "EndActor"]
    assert [e.reason for e in exits(run)] == [StopReason.UNLOAD]
    assert of_type(run.effects, EndActor) == [EndActor()]


def test_an_unload_during_a_stop_keeps_the_stop() -> None:
    run = Run.of()
    started(run)
    run.send(Stop(2.0, caller("stop")))
    run.send(Shutdown(5.0, caller("unload")))
    assert run.state.stop_reason is StopReason.REQUESTED


def test_an_adopted_start_is_checked_and_its_watch_begins_once() -> None:
    run = Run.of(managed=False)
    run.send(Restart(1, caller("restart")))
    assert refusals(run) == {"restart": "chat-1 is not being watched"}
    start = caller("start")
    assert run.send(Start(start)) == (ConfirmAdopted(start),)
    assert run.send(Confirmed(start)) == (WatchAdopted(), Answer(start, None))
    again = caller("again")
    assert run.send(Confirmed(again)) == (Answer(again, None),)
    assert run.state.wanted


def test_the_supervisors_note_is_kept_and_shown() -> None:
    run = Run.of()
    note = caller("note")
    assert run.send(Annotate("restarting in 0.5 s (attempt 1)", 1, note)) == (Answer(note, None),)
    status = run.status()
    assert (status.supervision, status.restarts) == ("restarting in 0.5 s (attempt 1)", 1)


def test_a_new_process_is_believed_nothing_of_the_last() -> None:
    run = Run.of()
    first = started(run)
    made_ready(run)
    run.send(Exited(first, evidence(100, exit_code=1)))
    second = started(run, pid=101)
    assert run.state.findings.ready_once is False
    assert run.status().detail == "starting: not listening yet"
    assert of_type(run.effects, WatchProcess)[-1].process is second


def test_a_stop_that_waits_for_its_process_says_its_deadline_until_the_exit() -> None:
    """A server still finishing (an endless stream) after SIGTERM: the status carries the
    stop's deadline (SIGKILL at the stop's time + its grace) and reads stopping in the
    service's words; a second stop keeps the first deadline; the exit clears it."""
    run = Run.of()
    started(run)
    assert run.status().stop_deadline is None
    out = run.at(40.0).send(Stop(12.5, caller("stop")))
    assert of_type(out, Terminate) == [Terminate(run.process, 12.5)]
    status = run.status()
    assert status.stop_deadline == 52.5
    assert display_state(status) is DisplayState.STOPPING
    run.at(45.0).send(Stop(1.0, caller("again")))  # the stop under way answers it too
    assert run.status().stop_deadline == 52.5
    run.at(50.0).send(Stopped(run.process, evidence(100, signal=15)))
    status = run.status()
    assert status.stop_deadline is None
    assert display_state(status) is DisplayState.STOPPED


def test_an_unloads_stop_is_dated_too() -> None:
    run = Run.of()
    started(run)
    out = run.at(7.0).send(Shutdown(3.0, caller("unload")))
    assert [effect.grace_s for effect in of_type(out, CloseDown)] == [3.0]
    assert run.status().stop_deadline == 10.0
