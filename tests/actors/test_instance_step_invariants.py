"""No sequence of messages breaks the instance state machine's invariants (hypothesis).

A `World` stands around one managed instance's `step` and sends only what a real world
could: the operator's commands (start, restart, stop, status, health, annotate, unload),
the results of the workers the effects asked for (a spawn that works, fails, or finds the
model tampered; a stop that ends its process, its exit seen once or twice, in either
order), processes that die on their own, probes of every kind, watchdog results, readiness
deadlines, start-up faults, exposures, changed pins, crashes, and callers that give up.
Synchronous and pure: thousands of programs in seconds. After every message:

* one process at a time: a spawn only when no process of the instance is alive and no
  spawn is under way;
* a stop's reason is kept: each process is signalled at most once, and its exit reports
  the reason of that first stop (a crash during an operator's stop stays ``requested``);
* a probe that gives no verdict (our own loop ran late) changes nothing and asks nothing;
* a crash is never counted twice: at most one `ProcessExited` per process; and a crash of
  the actor stops the server it leaves (at once, or as soon as a start under way spawns);
* a held-down instance is never restarted without its hold, and one stopped for exposure
  is never started again; an unloading one never spawns;
* an operator's stop is never undone: no supervisor restart spawns after it until a start;
* every caller is answered at most once, and every caller is answered, handed to a worker
  that answers it, still waited for, or gave up.
"""

from __future__ import annotations

from itertools import count
from typing import Any

import attrs
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from actors.step_support import (
    CRASH,
    EXPOSURE,
    FATAL,
    Run,
    caller,
    evidence,
    hold,
    proc,
    silent,
    unhealthy,
    up,
)
from inferactors import PinMismatch, ProcessExited, StopReason
from inferactors._actors.instance.effects import (
    Answer,
    AnswerStatus,
    CheckDeepHealth,
    CheckHealth,
    CloseDown,
    Effect,
    Emit,
    Refuse,
    Spawn,
    Terminate,
)
from inferactors._actors.instance.messages import (
    Exited,
    ExposureFound,
    PinChanged,
    Probed,
    ReadinessExpired,
    Seen,
    ShutdownDone,
    Spawned,
    SpawnFailed,
    StartupFault,
    Stopped,
    WatchdogResult,
)
from inferactors._actors.instance.step import Message
from inferactors._actors.mailbox import Crashed
from inferactors._actors.messages import (
    Annotate,
    DeepHealth,
    GetHealth,
    GetStatus,
    ReplyTo,
    Restart,
    Shutdown,
    Start,
    Stop,
)
from inferactors._edges.process import ManagedProcess
from inferactors._policy.health_truth import Confirmation
from inferactors._policy.lateness import no_verdict_report

SETTINGS = settings(max_examples=300, stateful_step_count=50, deadline=None, derandomize=True)
HOLD = hold()
OPERATOR = st.sampled_from(
    ["start"] * 4
    + ["start, then gives up", "restart", "restart", "stop", "stop", "status", "health"]
    + ["deep health", "annotate"]
)
UNLOAD_AFTER = 25
"""Messages before an unload may come: it ends the instance's life, so it comes late."""
PROBES = [
    *["up", "ready", "ready", "unhealthy", "silent", "impostor", "refused", "checked"],
    "no verdict",
]
WATCHERS = st.sampled_from(
    [
        *PROBES,
        *["exposed", "tampered", "fault", "late", "watchdog passed", "watchdog failed"],
        *["watchdog no verdict", "late, our loop too", "crash"],
    ]
)


def watcher_message(kind: str, process: ManagedProcess, now: float) -> Message:
    """What a watching task (or the mailbox, for ``crash``) posts about ``process``."""
    others: dict[str, Message] = {
        "exposed": ExposureFound(process, EXPOSURE),
        "tampered": PinChanged(process, HOLD),
        "fault": StartupFault(process, FATAL),
        "late": ReadinessExpired(process, 8.0),
        "late, our loop too": ReadinessExpired(process, 8.0, lost_s=1.0),
        "watchdog passed": WatchdogResult(process, None, 0.3),
        "watchdog failed": WatchdogResult(process, "deep health: timeout"),
        "watchdog no verdict": WatchdogResult(process, "no verdict", no_verdict=True),
        "crash": Crashed(CRASH),
    }
    if kind in others:
        return others[kind]
    report = {
        "unhealthy": unhealthy(),
        "silent": silent(),
        "no verdict": no_verdict_report("GET /health: no verdict"),
    }.get(kind, up())
    if kind == "refused":
        report = attrs.evolve(report, refused="HTTP 401: Invalid API Key")
    owner = None if kind == "up" else kind != "impostor"
    probed = Probed(report, process, owner_ok=owner, owner_pid=7)
    if kind == "ready":
        return attrs.evolve(probed, first_token="", ttft_s=0.2)
    if kind == "checked":
        return attrs.evolve(probed, confirmation=Confirmation(now, ttft_s=0.2))
    return probed


@attrs.define(eq=False)
class Life:
    """One process as the world sees it: alive, then dead with its reports to deliver."""

    process: ManagedProcess
    alive: bool = True
    signalled: bool = False
    reports: list[Message] = attrs.Factory(list)


class World(RuleBasedStateMachine):
    """One managed instance, the workers its effects started, and the invariants."""

    def __init__(self) -> None:
        super().__init__()
        self.run = Run.of(watchdog=2)
        self.pids = count(100)
        self.spawns: list[ReplyTo[None]] = []  # spawn workers under way, by their reply
        self.lives: list[Life] = []
        self.asked: list[ReplyTo[Any]] = []  # every command's caller
        self.done: list[ReplyTo[Any]] = []  # answered, or handed to a worker that answers
        self.gone: list[ReplyTo[Any]] = []
        self.first_reason: dict[int, StopReason] = {}
        self.exit_reason: dict[int, StopReason] = {}
        self.closing: ReplyTo[None] | None = None
        self.operator_stopped = False
        self.unloaded = False
        self.sent = 0
        self.crashed_starting = False

    # Sending, and what the effects start in the world.

    def send(self, message: Message, seen: Seen | None = None) -> None:
        self.sent += 1
        before = self.run.state
        process = before.process
        life = next((life for life in self.lives if life.process is process), None)
        gone = frozenset(reply for reply in self.gone)
        if seen is None:
            seen = Seen(running=life is None or life.alive, gone=gone)
        out = self.run.send(message, seen)
        after = self.run.state
        if before.stop_reason is not None and after.process is before.process:
            assert after.stop_reason is before.stop_reason  # a stop's reason is kept
        late_check = isinstance(message, WatchdogResult) and message.no_verdict
        if late_check or (isinstance(message, Probed) and message.report.no_verdict):
            assert (after, out) == (before, ())  # our own lateness is never a verdict
        self.check_crash(message, before, out)
        for effect in out:
            self.effect(effect, message, before)

    def check_crash(self, message: Message, before: Any, out: tuple[Effect, ...]) -> None:
        """A crash stops the server it leaves running (reason ``error``), at once or, when
        it came while starting, as soon as the spawn returns; a stop under way stands. A
        start every caller gave up on is stopped too."""
        stops = [effect for effect in out if isinstance(effect, Terminate)]
        if isinstance(message, Crashed) and not before.closing:
            self.crashed_starting = self.crashed_starting or before.starting
            if before.process is not None and before.stop_reason is None:
                assert stops
                assert self.run.state.stop_reason is StopReason.ERROR
        gone = before.start_callers and all(r in self.gone for r in before.start_callers)
        if isinstance(message, Spawned) and gone:
            assert stops  # a start every caller gave up on is stopped as soon as it spawned
        if isinstance(message, Spawned) and self.crashed_starting:
            self.crashed_starting = False
            assert stops  # stopped once spawned (for the crash, or a stop that came first)
        if isinstance(message, SpawnFailed):
            self.crashed_starting = False

    def effect(self, effect: Effect, message: Message, before: Any) -> None:
        match effect:
            case Answer() | Refuse() | AnswerStatus():
                assert not any(effect.reply is r for r in self.done)  # answered once
                self.done.append(effect.reply)
            case CheckHealth() | CheckDeepHealth():
                self.done.append(effect.reply)  # the worker answers it
            case Spawn():
                assert not any(life.alive for life in self.lives)  # one process at a time
                assert not self.spawns
                assert before.exposed is None
                assert not before.closing
                assert effect.held is before.held  # a hold goes with every spawn
                if isinstance(message, Restart):
                    assert not self.operator_stopped  # an operator stop is never undone
                if isinstance(message, Start):
                    self.operator_stopped = False
                self.spawns.append(effect.reply)
            case Terminate():
                life = self.life_of(effect.process)
                assert not life.signalled  # one stop per process: the first one's reason
                life.signalled = True
                assert self.run.state.stop_reason is not None
                self.first_reason[effect.process.pid] = self.run.state.stop_reason
            case CloseDown():
                self.closing = effect.reply
                if effect.process is not None:
                    life = self.life_of(effect.process)
                    reason = self.run.state.stop_reason
                    self.first_reason.setdefault(effect.process.pid, reason or StopReason.UNLOAD)
                    self.die(life, stopped=life.signalled)
            case Emit(event=ProcessExited() as exited):
                assert exited.pid not in self.exit_reason  # counted once
                self.exit_reason[exited.pid] = exited.reason
                first = self.first_reason.get(exited.pid)
                if first is not None:
                    assert exited.reason is first
                else:
                    assert exited.reason in (StopReason.CRASH, StopReason.STARTUP_FAILURE)
            case _:
                pass

    def life_of(self, process: ManagedProcess) -> Life:
        [life] = [life for life in self.lives if life.process is process]
        return life

    def die(self, life: Life, *, stopped: bool, code: int | None = 1) -> None:
        if not life.alive:
            return
        life.alive = False
        ended = evidence(life.process.pid, exit_code=code, signal=None if code else 15)
        life.reports.append(Exited(life.process, ended))
        if stopped:
            life.reports.append(Stopped(life.process, ended))

    def current(self) -> ManagedProcess | None:
        return self.run.state.process

    def about(self, pick: int) -> ManagedProcess:
        """The current process, or (when ``pick`` says so) one of the earlier ones."""
        current = self.current()
        if current is not None and pick % 3:
            return current
        return self.lives[pick % len(self.lives)].process if self.lives else proc(9999)

    # The operator (a start most often; an unload only late: it ends the instance's life).

    @rule(command=OPERATOR, grace=st.sampled_from([0.0, 1.0, 5.0]))
    def the_operator(self, command: str, grace: float) -> None:
        reply = caller(f"c{len(self.asked)}")
        self.asked.append(reply)
        if command == "start, then gives up":
            self.gone.append(reply)
        if command == "stop":
            self.operator_stopped = True
        commands: dict[str, Message] = {
            "start": Start(reply),
            "start, then gives up": Start(reply),
            "restart": Restart(1, reply),
            "stop": Stop(grace, reply),
            "status": GetStatus(reply),
            "health": GetHealth(reply),
            "deep health": DeepHealth(reply),
            "annotate": Annotate("restarting in 0.5 s (attempt 1)", 1, reply),
        }
        self.send(commands[command])

    @precondition(lambda self: not self.unloaded and self.sent >= UNLOAD_AFTER)
    @rule()
    def the_operator_unloads(self) -> None:
        self.unloaded = True
        reply = caller("unload")
        self.asked.append(reply)
        self.send(Shutdown(5.0, reply))

    @precondition(lambda self: self.run.state.start_callers)
    @rule(pick=st.integers(0, 3))
    def a_waiting_caller_gives_up(self, pick: int) -> None:
        """A caller of the start under way is cancelled (it closes its reply channel)."""
        callers = self.run.state.start_callers
        self.gone.append(callers[pick % len(callers)])

    @rule(seconds=st.sampled_from([0.1, 0.5, 1.0, 3.0, 10.0]))
    def time_passes(self, seconds: float) -> None:
        self.run.now += seconds

    # The workers and the processes.

    @precondition(lambda self: self.spawns)
    @rule(outcome=st.sampled_from(["spawned", "spawned", "failed", "tampered"]))
    def a_spawn_ends(self, outcome: str) -> None:
        reply = self.spawns.pop(0)
        if outcome == "spawned":
            life = Life(proc(next(self.pids), self.run.now))
            self.lives.append(life)
            self.send(Spawned(life.process, reply))
        elif outcome == "failed":
            self.send(SpawnFailed(PinMismatch("port taken"), reply))
        else:
            self.send(SpawnFailed(HOLD.error, reply, HOLD))

    @precondition(lambda self: any(life.alive for life in self.lives))
    @rule(code=st.sampled_from([0, 1, None]))
    def a_process_ends(self, code: int | None) -> None:
        life = next(life for life in self.lives if life.alive)
        self.die(life, stopped=life.signalled, code=code)

    @precondition(lambda self: any(life.reports for life in self.lives))
    @rule(pick=st.integers(0, 5))
    def an_exit_is_reported(self, pick: int) -> None:
        waiting = [life for life in self.lives if life.reports]
        life = waiting[pick % len(waiting)]
        self.send(life.reports.pop(pick % len(life.reports)))

    @precondition(lambda self: self.closing is not None and not self.run.state.process)
    @rule()
    def the_unload_ends(self) -> None:
        assert self.closing is not None
        reply, self.closing = self.closing, None
        self.send(ShutdownDone(reply))

    @rule(kind=WATCHERS, pick=st.integers(0, 5))
    def a_watcher_reports(self, kind: str, pick: int) -> None:
        """A probe, the exposure watch, the watchdog, a timer, or a crash of the actor."""
        process = self.about(pick)
        self.send(watcher_message(kind, process, self.run.now))

    # What holds after every step.

    @invariant()
    def every_caller_is_answered_or_waited_for(self) -> None:
        waiting = self.run.state.callers() + ([self.closing] if self.closing else [])
        for reply in self.asked:  # an unload's caller waits for the unload worker
            known = self.done + waiting + self.gone
            assert any(reply is r for r in known), reply

    @invariant()
    def the_state_knows_at_most_the_one_live_process(self) -> None:
        alive = [life.process for life in self.lives if life.alive]
        assert len(alive) <= 1
        if alive:
            assert self.run.state.process is alive[0]


def test_no_sequence_of_messages_breaks_the_invariants() -> None:
    run_state_machine_as_test(World, settings=SETTINGS)
