"""The instance state machine's rules for what takes an instance down without an
operator's stop, one case each, synchronous: a crash (of a running, stopping, starting or
adopted server) and the holds that keep an instance down until a reload (a server listening
beyond loopback, a model changed while served, a spawn refused for a tampered model).
Split from ``test_instance_step_rules.py`` (starts, stops, exits, unload and adoption).

``actors.step_support`` builds the stand-ins; each case sends real messages to `step`.
"""

from __future__ import annotations

from actors.step_support import (
    CRASH,
    EXPOSURE,
    Run,
    caller,
    events,
    evidence,
    exits,
    hold,
    kinds,
    of_type,
    proc,
    refusals,
    started,
)
from inferactors import (
    InstanceState,
    ModelTampered,
    PinMismatch,
    StopReason,
)
from inferactors._actors.instance.effects import (
    Spawn,
    Terminate,
)
from inferactors._actors.instance.messages import (
    Confirmed,
    Exited,
    ExposureFound,
    PinChanged,
    Spawned,
    SpawnFailed,
    Stopped,
)
from inferactors._actors.instance.stopping import CRASH_GRACE_S
from inferactors._actors.mailbox import Crashed
from inferactors._actors.messages import Restart, Start, Stop

# Crashes.


def test_a_crash_stops_a_running_server_with_reason_error() -> None:
    run = Run.of()
    process = started(run)
    out = run.send(Crashed(CRASH))
    assert kinds(out) == ["ForgetWatches", "Terminate"]
    assert of_type(out, Terminate) == [Terminate(process, CRASH_GRACE_S)]
    assert run.status().detail == "crashed (ValueError: boom); stopping its server"
    run.send(Exited(process, evidence(100, signal=15)))
    assert [e.reason for e in exits(run)] == [StopReason.ERROR]


def test_a_crash_during_an_operator_stop_keeps_the_stop() -> None:
    run = Run.of()
    process = started(run)
    run.send(Stop(2.0, caller("stop")))
    assert kinds(run.send(Crashed(CRASH))) == ["ForgetWatches"]
    run.send(Stopped(process, evidence(100, signal=15)))
    assert [e.reason for e in exits(run)] == [StopReason.REQUESTED]
    assert not run.state.wanted  # the supervisor's restart is refused


def test_a_crash_while_starting_aborts_the_start_once_spawned() -> None:
    run = Run.of()
    start = caller("start")
    run.send(Start(start))
    run.send(Crashed(CRASH))
    out = run.send(Spawned(proc(100), start))
    assert refusals(run) == {
        "start": "the start of chat-1 was aborted by a crash (ValueError: boom)"
    }
    assert of_type(out, Terminate) == [Terminate(run.process, CRASH_GRACE_S)]
    assert run.state.stop_reason is StopReason.ERROR


def test_a_crash_while_starting_then_a_failed_spawn_stops_nothing() -> None:
    run = Run.of()
    start = caller("start")
    run.send(Start(start))
    run.send(Crashed(CRASH))
    run.send(SpawnFailed(PinMismatch("exec failed"), start))
    assert run.state.crash_while_starting is None
    assert of_type(run.effects, Terminate) == []


def test_a_crash_of_an_adopted_server_is_only_said() -> None:
    run = Run.of(managed=False)
    run.send(Confirmed(caller("start")))
    assert kinds(run.send(Crashed(CRASH))) == ["ForgetWatches"]
    assert run.status().detail == "crashed (ValueError: boom)"
    assert not run.state.adopted_watch


# Holds.


def test_a_server_listening_beyond_loopback_is_stopped_and_held_until_reload() -> None:
    run = Run.of()
    process = started(run)
    out = run.send(ExposureFound(process, EXPOSURE))
    assert of_type(out, Terminate) == [Terminate(process, 3.0)]
    run.send(Stopped(process, evidence(100, signal=15)))
    run.send(Start(caller("start")))
    run.send(Restart(1, caller("restart")))
    why = f"the server was stopped for listening beyond loopback ({EXPOSURE.describe()})"
    assert refusals(run) == {
        "start": f"{why}; reload the instance",
        "restart": f"{why}; reload the instance",
    }
    status = run.status()
    assert (status.state, status.stop_reason) == (InstanceState.EXITED, "exposure")


def test_a_model_changed_while_served_holds_the_instance_down() -> None:
    run = Run.of()
    process, held = started(run), hold()
    out = run.send(PinChanged(process, held))
    assert kinds(out) == ["Emit", "Terminate"]
    assert run.send(PinChanged(process, hold())) == ()  # said once
    run.send(Stopped(process, evidence(100, signal=15)))
    run.send(Restart(1, caller("restart")))
    assert refusals(run) == {"restart": "chat-1 was stopped by the operator"}
    out = run.send(Start(caller("start")))
    assert of_type(out, Spawn)[0].held is held  # the pin check refuses it unread
    assert run.status().stop_reason == "tampered"


def test_a_spawn_refused_for_a_tampered_model_is_said_once_per_hold() -> None:
    run, held = Run.of(), hold()
    for name in ("first", "second"):  # the pin check hands the same hold back, unread
        start = caller(name)
        run.send(Start(start))
        run.send(SpawnFailed(held.error, start, held))
    assert len(events(run.effects, ModelTampered)) == 1
    assert (run.status().detail or "").startswith("not started: model tiny")
