"""Arrange code for the instance state machine's tests (``_actors/instance/step.py``):
synchronous, no trio, no I/O, the way llama-swap's ``fifo_test.go`` drives its scheduler.

The rules only compare a process by identity and read its pid, start time and argv, and
only hand a reply channel back in an effect: `Proc` and `Caller` stand in for them. `Run`
drives `step` and keeps every effect (llama-swap's ``fakeEffects``); the named states
(`STATES`) are reached through real messages from a loaded instance, so each is one the
actor can be in. `messages_for` builds every message the inbox can carry for a state.

Imported as ``actors.step_support``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import attrs

from inferactors import (
    Diagnosis,
    FaultKind,
    InstanceStatus,
    PinMismatch,
    ProcessExited,
    RunEvidence,
)
from inferactors._actors.instance.effects import Effect, Emit, Refuse
from inferactors._actors.instance.messages import (
    NOTHING_SEEN,
    Confirmed,
    DeepHealthDone,
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
from inferactors._actors.instance.pins import PinHold
from inferactors._actors.instance.state import Setup, State
from inferactors._actors.instance.status import status_of
from inferactors._actors.instance.step import Message, step
from inferactors._actors.mailbox import Crash, Crashed
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
from inferactors._models.manifest import ModelManifest
from inferactors._policy.exposure import Exposure, Listener
from inferactors._policy.lateness import no_verdict_report
from inferactors._policy.probe_report import ServerReport, Unhealthy, Unreachable, Up

E = TypeVar("E")
PORT = 8090
MODEL = "tiny"


@attrs.define(eq=False)
class Proc:
    """What the rules read of a managed process: its identity, pid, start time and argv."""

    pid: int
    started_at: float = 0.0
    args: tuple[str, ...] = ("--port", str(PORT))


@attrs.define(eq=False)
class Caller:
    """An opaque reply channel: the rules only hand it back in an effect."""

    name: str


def proc(pid: int, started_at: float = 0.0) -> ManagedProcess:
    return cast(ManagedProcess, Proc(pid, started_at))


def caller(name: str = "caller") -> ReplyTo[Any]:
    return cast("ReplyTo[Any]", Caller(name))


def setup(*, managed: bool = True, watchdog: int | None = 2, slow_after_s: float = 10.0) -> Setup:
    return Setup(
        "chat-1",
        "rt",
        managed=managed,
        port=PORT,
        listed_names=(MODEL,),
        slow_after_s=slow_after_s,
        watchdog_failures=watchdog,
    )


def evidence(pid: int, *, exit_code: int | None = 0, signal: int | None = None) -> RunEvidence:
    return attrs.evolve(RunEvidence.empty(), pid=pid, exit_code=exit_code, signal=signal)


def hold(name: str = MODEL) -> PinHold:
    error = PinMismatch(f"model {name} is not ready", name, "x.gguf", "shard x.gguf: digest")
    return PinHold(cast(ModelManifest, f"manifest of {name}"), error)


def up(*models: str) -> ServerReport:
    return ServerReport(Up(), models=models or (MODEL,))


def unhealthy(why: str = "HTTP 500") -> ServerReport:
    return ServerReport(Unhealthy(why))


def silent(why: str = "connection refused") -> ServerReport:
    return ServerReport(Unreachable(why))


EXPOSURE = Exposure((), (Listener("0.0.0.0", PORT, 4242),), PORT)
CRASH = Crash("ValueError", "boom", "its loop, handling Probed")
FATAL = Diagnosis(FaultKind.ADDRESS_IN_USE, "bind: address already in use")


@attrs.define
class Run:
    """One instance driven through `step`: its state, trio time and every effect so far."""

    state: State
    now: float = 0.0
    effects: list[Effect] = attrs.Factory(list)

    @classmethod
    def of(cls, managed: bool = True, watchdog: int | None = 2) -> Run:
        return cls(State.initial(setup(managed=managed, watchdog=watchdog)))

    def send(self, message: Message, seen: Seen = NOTHING_SEEN) -> tuple[Effect, ...]:
        """Step ``message`` at `now`; keep and return its effects."""
        self.state, out = step(self.state, message, self.now, seen)
        self.effects += out
        return out

    def at(self, now: float) -> Run:
        self.now = now
        return self

    def status(self) -> InstanceStatus:
        return status_of(self.state, self.now)

    @property
    def process(self) -> ManagedProcess:
        assert self.state.process is not None
        return self.state.process


def of_type(effects: Sequence[object], kind: type[E]) -> list[E]:
    return [effect for effect in effects if isinstance(effect, kind)]


def events(effects: Sequence[object], kind: type[E]) -> list[E]:
    """The events of ``kind`` among the `Emit` effects."""
    return [e.event for e in of_type(effects, Emit) if isinstance(e.event, kind)]


def refusals(run: Run) -> dict[str, str]:
    """Each refused caller's name to the refusal's words."""
    return {getattr(r.reply, "name", "?"): str(r.error) for r in of_type(run.effects, Refuse)}


def exits(run: Run) -> list[ProcessExited]:
    """The `ProcessExited` events of ``run``."""
    return events(run.effects, ProcessExited)


def kinds(effects: Sequence[object]) -> list[str]:
    return [type(effect).__name__ for effect in effects]


# Named states, each reached through messages from a loaded instance.


def started(run: Run, pid: int = 100) -> ManagedProcess:
    """Start, and the spawn worker's `Spawned`: the new process runs (not yet ready)."""
    reply = caller("start")
    run.send(Start(reply))
    process = proc(pid, run.now)
    run.send(Spawned(process, reply))
    return process


def made_ready(run: Run) -> None:
    """A probe finds the server up, listing our model, ours, and one token came back
    (in 0.1 s)."""
    run.send(Probed(up(), run.state.process, owner_ok=True, first_token="", ttft_s=0.1))


def _loaded(run: Run) -> None:
    pass


def _starting(run: Run) -> None:
    run.send(Start(caller("start")))


def _starting_then_stopped(run: Run) -> None:
    run.send(Start(caller("start")))
    run.send(Stop(1.0, caller("stop")))


def _crashed_while_starting(run: Run) -> None:
    run.send(Start(caller("start")))
    run.send(Crashed(CRASH))


def _running(run: Run) -> None:
    started(run)


def _ready(run: Run) -> None:
    started(run)
    made_ready(run)


def _stopping(run: Run) -> None:
    _ready(run)
    run.send(Stop(2.0, caller("stop")))


def _exited(run: Run) -> None:
    _ready(run)
    run.send(Exited(run.process, evidence(100, exit_code=1)))


def _held(run: Run) -> None:
    reply = caller("start")
    run.send(Start(reply))
    run.send(SpawnFailed(hold().error, reply, hold()))


def _exposed(run: Run) -> None:
    _ready(run)
    process = run.process
    run.send(ExposureFound(process, EXPOSURE))
    run.send(Stopped(process, evidence(100, signal=15)))


def _closing(run: Run) -> None:
    _ready(run)
    run.send(Shutdown(5.0, caller("unload")))


def _adopted_loaded(run: Run) -> None:
    run.state = State.initial(setup(managed=False))


def _adopted_watched(run: Run) -> None:
    _adopted_loaded(run)
    run.send(Confirmed(caller("start")))
    run.send(Probed(up(), None))


STATES: dict[str, Callable[[Run], None]] = {
    "loaded": _loaded,
    "starting": _starting,
    "starting, a stop waiting": _starting_then_stopped,
    "starting, crashed meanwhile": _crashed_while_starting,
    "running, not ready": _running,
    "ready": _ready,
    "stopping": _stopping,
    "exited (a crash)": _exited,
    "held down (tampered)": _held,
    "stopped for exposure": _exposed,
    "closing (unloading)": _closing,
    "adopted": _adopted_loaded,
    "adopted, watched": _adopted_watched,
}


def reach(name: str) -> Run:
    """A fresh run in the named state (`STATES`), at trio time 10."""
    run = Run.of()
    STATES[name](run)
    return run.at(10.0)


def messages_for(run: Run) -> dict[str, Message]:
    """Every message the inbox can carry, about the current process (a new one if none)."""
    current = run.state.process or proc(999)
    watched = run.state.process  # None for an adopted server
    start = run.state.start_callers[0] if run.state.start_callers else caller("start")
    return {
        "Start": Start(caller("start2")),
        "Restart": Restart(1, caller("restart")),
        "Stop": Stop(1.0, caller("stop2")),
        "GetStatus": GetStatus(caller("status")),
        "GetHealth": GetHealth(caller("health")),
        "DeepHealth": DeepHealth(caller("deep")),
        "Annotate": Annotate("restarting in 1.0 s (attempt 1)", 1, caller("note")),
        "Shutdown": Shutdown(5.0, caller("unload2")),
        "Spawned": Spawned(proc(500, run.now), start),
        "SpawnFailed": SpawnFailed(PinMismatch("port taken"), start),
        "SpawnFailed (held)": SpawnFailed(hold().error, start, hold("other")),
        "Exited": Exited(current, evidence(current.pid, exit_code=1)),
        "Stopped": Stopped(current, evidence(current.pid, signal=15)),
        "Probed up": Probed(up(), watched, owner_ok=True, first_token=""),
        "Probed unhealthy": Probed(unhealthy(), watched, owner_ok=True),
        "Probed silent": Probed(silent(), watched),
        "Probed no verdict": Probed(no_verdict_report("GET /health: no verdict"), watched),
        "Probed impostor": Probed(up(), watched, owner_ok=False, owner_pid=7),
        "Probed exposed": Probed(up(), watched, exposure=EXPOSURE),
        "ExposureFound": ExposureFound(current, EXPOSURE),
        "PinChanged": PinChanged(current, hold()),
        "StartupFault": StartupFault(current, FATAL),
        "ReadinessExpired": ReadinessExpired(current, 8.0),
        "ReadinessExpired late": ReadinessExpired(current, 8.0, lost_s=2.0),
        "WatchdogResult failed": WatchdogResult(watched, "deep health: timeout"),
        "WatchdogResult passed": WatchdogResult(watched, None, 0.2),
        "WatchdogResult no verdict": WatchdogResult(watched, "no verdict", no_verdict=True),
        "DeepHealthDone": DeepHealthDone(watched, 0.2),
        "Confirmed": Confirmed(caller("confirm")),
        "ShutdownDone": ShutdownDone(caller("unload3")),
        "Crashed": Crashed(CRASH),
    }


STALE: dict[str, Callable[[ManagedProcess], Message]] = {
    "Exited": lambda p: Exited(p, evidence(p.pid)),
    "Probed": lambda p: Probed(up(), p, owner_ok=True, first_token=""),
    "ExposureFound": lambda p: ExposureFound(p, EXPOSURE),
    "PinChanged": lambda p: PinChanged(p, hold()),
    "StartupFault": lambda p: StartupFault(p, FATAL),
    "ReadinessExpired": lambda p: ReadinessExpired(p, 8.0),
    "WatchdogResult": lambda p: WatchdogResult(p, "deep health: timeout"),
    "DeepHealthDone": lambda p: DeepHealthDone(p, 0.2),
}
"""Messages about a process: sent about one that is not (or no longer) the current one."""
