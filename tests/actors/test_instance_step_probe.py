"""The probe's rules (``verdicts.judge_report``) and the status they read as (``status.py``),
one case each, synchronous: the order in which what we know wins, readiness, identity,
the checks around a failed ``/health``, the configuration errors a starting server shows,
the kills for health, slowness, and an adopted server's exposure (said, never acted on).

``actors.step_support`` builds the stand-ins; each case sends real messages to `step`.
"""

from __future__ import annotations

import attrs

from actors.step_support import (
    EXPOSURE,
    FATAL,
    Run,
    caller,
    events,
    evidence,
    kinds,
    made_ready,
    of_type,
    silent,
    started,
    unhealthy,
    up,
)
from inferactors import (
    DeepHealthFailed,
    DeepHealthPassed,
    ExposureDetected,
    FaultKind,
    ImpostorDetected,
    InstanceState,
    ProcessExited,
    StopReason,
)
from inferactors._actors.instance.effects import (
    NoteProbeTime,
    StartWatchdog,
    StopReadingLines,
    Terminate,
    TimeReadiness,
)
from inferactors._actors.instance.messages import (
    Confirmed,
    Exited,
    Probed,
    ReadinessExpired,
    Seen,
    StartupFault,
    WatchdogResult,
)
from inferactors._actors.instance.status import status_of
from inferactors._actors.instance.stopping import STARTUP_FAULT_GRACE_S
from inferactors._actors.instance.verdicts import MISBOUND_SETTLE_S, UNHEALTHY_KILL_AFTER_S
from inferactors._policy.health_truth import Confirmation
from inferactors._policy.lateness import LATE_S, no_verdict_report
from inferactors._policy.probe_report import ServerReport, Up

MISBOUND = 'listening on [::1]:8090, not 127.0.0.1:8090: set serve.host = "::1"'


def detail(run: Run) -> str | None:
    return run.status().detail


def test_ready_takes_up_listed_ours_and_one_token_and_happens_once() -> None:
    run = Run.of()
    process = started(run)
    run.send(Probed(up(), process))
    assert detail(run) == "starting: confirming the listener is ours"
    run.send(Probed(up(), process, owner_ok=True))
    assert detail(run) == "starting: waiting for a first token"
    run.send(Probed(up(), process, owner_ok=True, first_token="HTTP 500: boom"))
    assert detail(run) == "starting: the first token failed (HTTP 500: boom)"
    out = run.send(Probed(up(), process, owner_ok=True, first_token=""))
    assert kinds(out) == ["NoteProbeTime", "StopReadingLines", "StartWatchdog"]
    assert of_type(out, StopReadingLines) == [StopReadingLines(process)]
    assert of_type(out, StartWatchdog) == [StartWatchdog(process)]
    assert run.status().state is InstanceState.RUNNING
    assert run.status().serving
    assert kinds(run.send(Probed(up(), process, owner_ok=True))) == ["NoteProbeTime"]


def test_a_probe_of_a_process_that_just_died_is_dropped() -> None:
    run = Run.of()
    process = started(run)
    assert run.send(Probed(up(), process, owner_ok=True), Seen(running=False)) == ()
    assert detail(run) == "starting: not listening yet"


def test_a_report_without_a_verdict_is_never_judged_however_many_come() -> None:
    """Our own late loop is no verdict on a server: neither a ready one nor a starting one
    changes, emits or is killed, after any number of such reports in a row (before, the
    fourth in a row was judged as a timeout); the next report made on time is judged."""
    late = no_verdict_report("GET /health: no verdict: inferactors' event loop ran 900 ms late")
    for make in (made_ready, lambda run: None):
        run = Run.of()
        started(run)
        make(run)
        before = run.state
        for second in range(1, 30):
            assert run.at(10.0 + second).send(Probed(late, run.process, owner_ok=True)) == ()
        assert run.state == before
        run.at(40.0).send(Probed(silent("GET /health: timed out"), run.process))
        assert run.state.findings.last_probe == "unreachable: GET /health: timed out"
    adopted = Run.of(managed=False)
    adopted.send(Confirmed(caller("start")))
    adopted.send(Probed(up(), None))
    assert adopted.send(Probed(late, None)) == ()
    assert adopted.status().state is InstanceState.RUNNING


def test_a_running_server_without_a_verdict_for_seconds_says_so_not_server_up() -> None:
    """A Running server whose probes have given no verdict for some seconds (our own loop
    runs late) says so with its last answer, still Running; a brief no-verdict keeps
    "server up"; the next verdict says what it found. Before, it read "server up" for as
    long as the overload lasted (33 to 37 s at 1,000 adopted servers)."""
    late = no_verdict_report("GET /health: no verdict: inferactors' event loop ran 900 ms late")
    for managed in (True, False):
        run = Run.of(managed=managed)
        if managed:
            started(run)
            made_ready(run)
        else:
            run.send(Confirmed(caller("start")))
            run.send(Probed(up(), None))
        assert detail(run) == "server up"
        process = run.state.process
        run.send(Probed(late, process, owner_ok=True, no_verdict_for_s=2.0))
        assert detail(run) == "server up"  # brief: nothing to say yet
        run.send(Probed(late, process, owner_ok=True, no_verdict_for_s=12.5))
        assert run.status().state is InstanceState.RUNNING
        assert detail(run) == (
            "no verdict for over 12 s: the supervisor is overloaded (last answer: server up)"
        )
        run.send(Probed(up(), process, owner_ok=True))
        assert detail(run) == "server up"


def test_an_impostor_is_said_once_wins_over_everything_and_goes_when_ours_again() -> None:
    run = Run.of()
    process = started(run)
    made_ready(run)
    run.send(Probed(up(), process, owner_ok=False, owner_pid=7))
    run.send(Probed(unhealthy(), process, owner_ok=False, owner_pid=7))
    [said] = events(run.effects, ImpostorDetected)
    assert said.detail == "impostor: port 8090 is held by pid 7, not our server"
    assert detail(run) == said.detail
    run.send(Probed(up(), process, owner_ok=True))
    assert run.status().state is InstanceState.RUNNING


def test_a_refusal_wins_over_the_address_family_over_the_health_check() -> None:
    run = Run.of()
    process = started(run)
    report = attrs.evolve(silent(), refused="HTTP 401: Invalid API Key")
    confirmation = Confirmation(0.0, pending=True)
    run.send(Probed(report, process, misbound=MISBOUND, confirmation=confirmation))
    assert detail(run) == (
        "the server refuses our requests (HTTP 401: Invalid API Key): set serve.api_key_file"
    )
    run.send(Probed(silent(), process, misbound=MISBOUND, confirmation=confirmation))
    assert detail(run) == MISBOUND
    run.send(Probed(silent(), process, misbound="", confirmation=confirmation))
    assert detail(run) == (
        "health endpoint not answering (connection refused); checking with one completion"
    )


def test_a_starting_server_refusing_our_requests_is_stopped_at_once() -> None:
    run = Run.of()
    process = started(run)
    report = attrs.evolve(up(), refused="HTTP 401: Invalid API Key")
    out = run.send(Probed(report, process, owner_ok=True))
    assert of_type(out, Terminate) == [Terminate(process, STARTUP_FAULT_GRACE_S)]
    run.send(Exited(process, evidence(100, signal=15)))
    [exited] = events(run.effects, ProcessExited)
    assert exited.reason is StopReason.STARTUP_FAILURE
    assert exited.diagnosis is not None
    assert exited.diagnosis.kind is FaultKind.REFUSES_REQUESTS


def test_a_starting_server_on_the_wrong_address_family_is_stopped_once_it_settles() -> None:
    run = Run.of()
    process = started(run)
    run.at(1.0).send(Probed(silent(), process, misbound=MISBOUND))
    out = run.at(1.0 + MISBOUND_SETTLE_S / 2).send(Probed(silent(), process))
    assert of_type(out, Terminate) == []  # a server binding ::1 a moment first is not one
    out = run.at(1.0 + MISBOUND_SETTLE_S).send(Probed(silent(), process))
    assert of_type(out, Terminate) == [Terminate(process, STARTUP_FAULT_GRACE_S)]
    live = run.state.findings.live_fault
    assert live is not None
    assert live.kind is FaultKind.WRONG_ADDRESS_FAMILY


def test_completions_that_work_around_a_failed_health_keep_it_serving() -> None:
    run = Run.of()
    process = started(run)
    made_ready(run)
    pending = Confirmation(1.0, pending=True)
    run.send(Probed(unhealthy(), process, confirmation=pending))
    assert detail(run) == "health endpoint failing (HTTP 500); checking with one completion"
    assert run.status().serving  # the last completion worked
    worked = Confirmation(1.0, ttft_s=0.1)
    out = run.send(Probed(unhealthy(), process, confirmation=worked, ttft_s=0.1))
    assert detail(run) == "health endpoint failing (HTTP 500); completions work"
    assert events(out, DeepHealthPassed)[0].ttft_s == 0.1
    failed = Confirmation(2.0, why="deep health: timeout")
    run.send(Probed(unhealthy(), process, confirmation=failed))
    assert detail(run) == "HTTP 500; completions fail too (deep health: timeout)"
    assert not run.status().serving


def test_a_ready_server_unhealthy_for_three_seconds_is_killed() -> None:
    run = Run.of()
    process = started(run)
    made_ready(run)
    run.at(20.0).send(Probed(unhealthy(), process))
    out = run.at(20.0 + UNHEALTHY_KILL_AFTER_S - 0.1).send(Probed(unhealthy(), process))
    assert of_type(out, Terminate) == []
    out = run.at(20.0 + UNHEALTHY_KILL_AFTER_S).send(Probed(unhealthy(), process))
    assert of_type(out, Terminate) == [Terminate(process, 3.0)]
    assert run.state.stop_reason is StopReason.HEALTH_KILL
    assert detail(run) == "unhealthy for 3.0 s: HTTP 500"


def test_completions_that_work_spare_an_unhealthy_server() -> None:
    run = Run.of()
    process = started(run)
    made_ready(run)
    worked = Confirmation(1.0, ttft_s=0.1)
    for now in (20.0, 30.0, 40.0):
        out = run.at(now).send(Probed(unhealthy(), process, confirmation=worked))
        assert of_type(out, Terminate) == []


def test_the_watchdog_kills_after_its_failures_in_a_row_and_a_pass_resets_them() -> None:
    run = Run.of(watchdog=2)
    process = started(run)
    made_ready(run)
    run.send(WatchdogResult(process, "timeout"))
    run.send(WatchdogResult(process, None, 0.3))
    out = run.send(WatchdogResult(process, "timeout"))
    assert of_type(out, Terminate) == []
    out = run.send(WatchdogResult(process, "timeout"))
    assert of_type(out, Terminate) == [Terminate(process, 3.0)]
    assert [e.consecutive for e in events(run.effects, DeepHealthFailed)] == [1, 1, 2]
    assert detail(run) == "deep health failed 2 times: timeout"


def test_a_watchdog_check_without_a_verdict_counts_for_nothing() -> None:
    """A check whose deadline our own late loop ate is neither a failure (never a kill,
    however many) nor a pass (the failures in a row stand)."""
    run = Run.of(watchdog=2)
    process = started(run)
    made_ready(run)
    run.send(WatchdogResult(process, "deep health: timeout"))
    before = run.state
    late = WatchdogResult(process, "deep health: no verdict", no_verdict=True)
    for _ in range(5):
        assert run.send(late) == ()
    assert run.state == before
    out = run.send(WatchdogResult(process, "deep health: timeout"))
    assert of_type(out, Terminate) == [Terminate(process, 3.0)]


def test_an_adopted_server_failing_its_watchdog_is_marked_never_killed() -> None:
    run = Run.of(managed=False, watchdog=1)
    run.send(Confirmed(caller("start")))
    out = run.send(Probed(up(), None))
    assert of_type(out, StartWatchdog) == [StartWatchdog(None)]
    out = run.send(WatchdogResult(None, "timeout"))
    assert of_type(out, Terminate) == []
    assert run.status().state is InstanceState.DEGRADED
    assert detail(run) == "deep health failed 1 times: timeout"


def test_a_readiness_deadline_our_late_loop_ate_moves_on_by_the_time_lost() -> None:
    """More than `LATE_S` of the window lost to our own loop: the server gets that time
    back from when the timer was heard (the timer again), however often; on time, the
    kill (grace 0)."""
    run = Run.of()
    process = started(run)
    out = run.at(9.5).send(ReadinessExpired(process, 8.0, lost_s=1.5))
    assert out == (TimeReadiness(process, 8.0, 11.0),)
    out = run.at(11.9).send(ReadinessExpired(process, 8.0, lost_s=0.9))
    assert out == (TimeReadiness(process, 8.0, 12.8),)
    assert run.state.stop_reason is None
    out = run.at(12.8).send(ReadinessExpired(process, 8.0, lost_s=LATE_S))
    assert out == (Terminate(process, 0.0),)
    assert run.state.stop_reason is StopReason.READINESS_TIMEOUT
    ready = Run.of()
    made = started(ready)
    made_ready(ready)
    assert ready.send(ReadinessExpired(made, 8.0, lost_s=5.0)) == ()


def test_a_loop_that_keeps_stalling_gives_back_at_most_one_more_window() -> None:
    """A server that never loads, watched by a loop that stalls past `LATE_S` in every
    window, is still killed: by twice its readiness timeout after its spawn."""
    run = Run.of()
    process = started(run)
    at = process.started_at + 8.0
    out = run.at(at).send(ReadinessExpired(process, 8.0, lost_s=1.0))
    kills: list[float] = []
    for _ in range(40):
        assert len(out) == 1
        if isinstance(out[0], Terminate):
            kills.append(at)
            break
        assert isinstance(out[0], TimeReadiness)
        at = out[0].deadline
        out = run.at(at).send(ReadinessExpired(process, 8.0, lost_s=1.0))
    assert kills, "never killed"
    assert kills[0] - process.started_at <= 16.0 + 1.0
    assert run.state.stop_reason is StopReason.READINESS_TIMEOUT


def test_a_slow_first_token_is_ready_but_degraded_and_serving() -> None:
    run = Run.of()
    process = started(run)
    run.send(Probed(up(), process, owner_ok=True, first_token="", ttft_s=12.5))
    status = run.status()
    assert status.state is InstanceState.DEGRADED
    assert status.detail == "slow: first token in 12.5 s (threshold 10.0 s)"
    assert status.serving
    assert run.state.findings.ready_once


def test_a_start_up_fault_or_a_missed_deadline_stops_only_a_server_not_yet_ready() -> None:
    for ready in (False, True):
        run = Run.of()
        process = started(run)
        if ready:
            made_ready(run)
        run.send(ReadinessExpired(process, 8.0))
        assert (run.state.stop_reason is StopReason.READINESS_TIMEOUT) is not ready
        run = Run.of()
        process = started(run)
        if ready:
            made_ready(run)
        run.send(StartupFault(process, FATAL))
        assert (run.state.stop_reason is StopReason.STARTUP_FAILURE) is not ready


def test_an_adopted_servers_exposure_is_said_once_per_finding_never_acted_on() -> None:
    run = Run.of(managed=False)
    run.send(Confirmed(caller("start")))
    for _ in range(3):
        out = run.send(Probed(up(), None, exposure=EXPOSURE))
        assert of_type(out, Terminate) == []
    [said] = events(run.effects, ExposureDetected)
    assert said.detail.endswith("(reported only: inferactors never signals an adopted server)")
    assert detail(run) == f"server up; {EXPOSURE.describe()}"


def test_every_applied_probe_tells_the_edges_its_time() -> None:
    run = Run.of()
    process = started(run)
    run.at(3.0).send(Probed(ServerReport(Up(), models=("tiny",), latency_s=0.02), process))
    assert of_type(run.effects, NoteProbeTime) == [NoteProbeTime(0.02, 3.0)]


def test_pid_uptime_and_an_escaped_process_are_added_to_what_stands() -> None:
    run = Run.of()
    process = started(run)
    made_ready(run)
    status = status_of(run.state, 12.5, escaped=(4243,))
    assert (status.pid, status.uptime_s) == (process.pid, 12.5)
    assert status.detail == (
        "server up; server left its process group; inferactors tracks it by pid (4243)"
    )
    assert status.serving


def test_an_idle_instance_says_why_it_stopped_and_a_config_error_it_gave_up_on() -> None:
    run = Run.of()
    process = started(run)
    run.send(WatchdogResult(process, "timeout"))
    run.send(WatchdogResult(process, "timeout"))
    run.send(Exited(process, evidence(100, signal=15)))
    assert run.status().detail == "killed: deep health failed"
    note = "gave up: config-error: the same start-up failure twice"
    run.state = attrs.evolve(run.state, supervision=note)
    assert run.status().stop_reason == "config-error"
