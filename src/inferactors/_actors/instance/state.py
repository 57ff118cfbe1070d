"""What one instance actor knows: a frozen `State` (pure; no trio, no I/O).

`step` (``step.py``) is the only function that makes a new `State`, and the actor
(``actor.py``) the only holder of the current one. Every field says when it is set and
when it is cleared, as trio writes the invariant on each field of its ``CancelStatus``.

Three parts:

* `Setup`: what the plan fixes for the actor's whole life (ids, the names the server must
  list, the watchdog's limit).
* `State`: the instance's life: its process, the stop under way, the holds that keep it
  down, the last exit, the callers waiting for an answer.
* `Findings`: what the probes and checks found about the server now running (a managed
  process, or the adopted server); a fresh one at every spawn.

Live facts that only trio objects know (whether a process still runs, which callers gave
up) are not read here: the actor reads them as it takes a message and hands them to
`step` (`messages.Seen`).
"""

from __future__ import annotations

from typing import Any

import attrs

from ..._config.config import ControlMode
from ..._edges.capture import RunEvidence
from ..._edges.process import ManagedProcess
from ..._flavor import InferFlavor
from ..._policy.admission import Plan
from ..._policy.health_truth import Confirmation
from ..._status import InstanceState, InstanceStatus
from ..._stop_reasons import Diagnosis, StopReason
from ..mailbox import Crash
from ..messages import ReplyTo, Stop
from .pins import PinHold

STARTING = InstanceStatus(InstanceState.DEGRADED, "starting: not listening yet")
"""A managed server's status from its spawn to its first probe."""


@attrs.frozen
class Setup:
    """What the plan fixes for the rules, for the actor's whole life."""

    instance_id: str
    runtime_id: str
    managed: bool
    """Whether inferactors runs the server's process (else it is adopted: only watched)."""
    port: int
    listed_names: tuple[str, ...] = ()
    """The names the server must list our model under (`Plan.listed_names`)."""
    ollama_tag: str | None = None
    """An adopted Ollama's model tag: its probes are mapped by Ollama's own rules."""
    key_sent: bool = False
    """Whether our probes send an API key (a refusal then means the wrong key)."""
    slow_after_s: float = 10.0
    """A deep health slower than this (float seconds) leaves the server Degraded (slow)."""
    watchdog_failures: int | None = None
    """Failed watchdog checks in a row that kill the server; None: no watchdog."""
    endpoint: str | None = None
    """The server's base URL (``http://127.0.0.1:8090``), shown in its status."""
    model: str | None = None
    """The model it serves (`Plan.served_model`), shown in its status."""

    @classmethod
    def of(cls, instance_id: str, runtime_id: str, plan: Plan) -> Setup:
        """The setup of the instance ``instance_id`` planned by ``plan``."""
        spec, supervision = plan.spec, plan.supervision
        managed = plan.mode is ControlMode.MANAGED
        adopted_ollama = not managed and spec.runtime is InferFlavor.OLLAMA and spec.model
        watchdog = supervision.watchdog
        return cls(
            instance_id,
            runtime_id,
            managed=managed,
            port=spec.port(),
            listed_names=plan.listed_names,
            ollama_tag=spec.model if adopted_ollama else None,
            key_sent=plan.api_key is not None,
            slow_after_s=supervision.slow_threshold_s,
            watchdog_failures=watchdog.failures if watchdog is not None else None,
            endpoint=spec.base_url(),
            model=plan.served_model,
        )


@attrs.frozen
class Findings:
    """What the probes and checks found about the server now running.

    A managed instance gets a fresh one at each spawn (`State.spawned`), so nothing found
    about one process is believed of the next; an adopted one keeps its own for the actor's
    life. Every field below is set by the rules of ``step.py`` named beside it.
    """

    mapped: InstanceStatus = InstanceStatus(InstanceState.LOADED)  # noqa: RUF009  (frozen)
    """The last probe's verdict (`status.probe_verdict`), before the live overrides of
    `status.status_of`. Set at every applied probe; `STARTING` at a spawn; a crash's note
    until the next probe. Not read while a managed instance has no process."""
    last_probe: str | None = None
    """A probe's words (``up``, ``loading``, ``unreachable: why``); set at every probe."""
    answered: bool = False
    """Set when a probe first gets any answer; never cleared (a silent server that
    answered before went away, one that never answered is still starting)."""
    impostor: str | None = None
    """Set when the listener on our port is not our process (said once); cleared when a
    probe finds it ours again."""
    identity_ok: bool = False
    """Set when a probe finds the listener on our port ours; not cleared (an impostor
    after it is `impostor`)."""
    first_token: str | None = None
    """None until the first one-token check; then ``""`` (a token came back) or why not."""
    ready_once: bool = False
    """Set the first time the server is ready (up, listing our model, ours, a token came
    back); cleared only when an adopted server's watch begins."""
    confirmation: Confirmation | None = None
    """The completion that checks a failed ``/health`` of a server that was Running: set
    by a probe that carries one; cleared by a serving or loading ``/health``."""
    completions_worked: bool = False
    """Whether the last completion (first token, confirmation, deep health) came back; set
    by each, cleared by a failed watchdog check."""
    misbound: str | None = None
    """The port listens only on the other address family: set by a refused probe that
    looked; cleared by any answer, or a look that found nothing wrong."""
    misbound_since: float | None = None
    """Trio time `misbound` was first seen while starting; cleared with it."""
    refused: str | None = None
    """The server refuses our requests (HTTP 401/403): set and cleared by every probe."""
    live_fault: Diagnosis | None = None
    """The configuration error a starting server shows while it lives (refused, misbound
    for `MISBOUND_SETTLE_S`); set once seen, kept, so the exit carries it."""
    health_failures: int = 0
    """Failed watchdog checks in a row; cleared by one that passed."""
    health_failed: str | None = None
    """Why the server is (about to be) killed for its health (watchdog, or unhealthy for
    `UNHEALTHY_KILL_AFTER_S`); cleared by a watchdog check that passed."""
    unhealthy_since: float | None = None
    """Trio time a ready managed server's ``/health`` began failing; cleared by a probe
    that is not Unhealthy or by completions that work."""
    ttft_s: float | None = None
    """The last deep health's time to first token (float seconds); set by each that
    passed (first token, confirmation, watchdog, a caller's deep health)."""
    no_verdict_for_s: float = 0.0
    """How long no probe gave a verdict, as the last no-verdict probe said (float seconds;
    0 once a probe judged): rule 1 (`status.status_of` says it, `no_verdict_words`)."""
    slow: str | None = None
    """Set (`slow_detail`) when the last deep health was slower than
    `Setup.slow_after_s`; cleared by a quick one."""


@attrs.frozen
class StopCaller:
    """A caller waiting for the stop of ``process`` to finish."""

    process: ManagedProcess
    reply: ReplyTo[Any]


@attrs.frozen
class State:
    """Everything one instance actor knows about its instance (see the module docstring)."""

    setup: Setup
    findings: Findings = Findings()
    """What the probes found about the server now running; fresh at each spawn."""
    process: ManagedProcess | None = None
    """The managed server's process: set at `Spawned`, cleared at the first `Exited` or
    `Stopped` of that process. Always None for an adopted server."""
    starting: bool = False
    """A spawn is under way: set when a start sends the spawn worker; cleared at its
    `Spawned` or `SpawnFailed`. At most one at a time, and never while `process` runs."""
    wanted: bool = False
    """Whether the operator wants it running: set at a spawn and when an adopted server's
    watch begins; cleared by a stop, an exposure stop and a model that changed while
    served. A supervisor's restart of an unwanted instance is refused."""
    stop_reason: StopReason | None = None
    """The reason of the stop under way of `process`: set when its first stop begins
    (operator, unload, exposure, health, readiness, crash, ...), never replaced by a later
    one; cleared at the exit, which reports it."""
    stop_deadline: float | None = None
    """Trio time (float seconds) at which the stop under way of `process` kills it
    (SIGKILL) if it has not exited by then: set by the step whose stop sent its SIGTERM
    (``now`` + the stop's grace); cleared at the exit and at a new spawn."""
    held: PinHold | None = None
    """The model failed its pins (tampered): set by a refused spawn or a file that changed
    while served; cleared by the next spawn that passes its pins."""
    exposed: str | None = None
    """Set when a managed server is found listening beyond loopback: it stays stopped until
    reload (a new actor); never cleared. For an adopted server, the last exposure reported."""
    last: RunEvidence | None = None
    """The evidence of the last exit; set at each exit, never cleared."""
    last_reason: StopReason | None = None
    """The stop reason of the last exit; set at each exit."""
    diagnosis: Diagnosis | None = None
    """Why the last start failed, read from its output; set at each exit."""
    last_lines: tuple[str, ...] = ()
    """The last lines the last process printed (for a start-up failure); set at each exit."""
    start_error: str | None = None
    """Why the last start failed before a process ran (the spawn's error: a port taken, an
    unreadable state directory, ...): set at a `SpawnFailed`, cleared at the next `Spawned`.
    While set, status says it, not the reason of the exit before (an operator's stop)."""
    supervision: str | None = None
    """The supervisor's note (restarting in ..., gave up: ...); set by `Annotate`."""
    given_up: bool = False
    """The supervisor gave up on it (set by `Annotate`, cleared by the next `Spawned`)."""
    restarts: int = 0
    """Restarts the supervisor counted; set by `Annotate`."""
    start_callers: tuple[ReplyTo[None], ...] = ()
    """The callers of the start under way (the first and every one that joined it):
    added while `starting`; all answered at its `Spawned` or `SpawnFailed`."""
    stops_after_start: tuple[Stop, ...] = ()
    """Stops that arrived while `starting`: applied to the new process at `Spawned`,
    refused (not running) at `SpawnFailed`."""
    stop_callers: tuple[StopCaller, ...] = ()
    """Callers of a stop under way: added at the stop; answered with the evidence at the
    `Stopped` of their process."""
    crash_while_starting: Crash | None = None
    """A crash that came while `starting`: the new process is stopped for it at `Spawned`;
    cleared then or at `SpawnFailed` (nothing runs: nothing to stop)."""
    process_watch: bool = False
    """The tasks watching `process` run: set at `Spawned`; cleared at its exit and at a
    crash (the mailbox cancelled them)."""
    adopted_watch: bool = False
    """An adopted server's watch runs: set by the first `Confirmed`; cleared at a crash."""
    closing: bool = False
    """Set by `Shutdown` (the unload): every later command is refused; never cleared."""

    @classmethod
    def initial(cls, setup: Setup) -> State:
        """A loaded instance: nothing runs, nothing is known."""
        return cls(setup)

    @property
    def managed(self) -> bool:
        """Whether inferactors runs the server's process."""
        return self.setup.managed

    def with_findings(self, **changes: Any) -> State:
        """This state with `findings` changed as ``changes`` say (itself when nothing
        changes: most probes of a steady server change nothing)."""
        found = self.findings
        for name, value in changes.items():
            if getattr(found, name) != value:
                return attrs.evolve(self, findings=attrs.evolve(found, **changes))
        return self

    def spawned(self, process: ManagedProcess) -> State:
        """A new process runs: forget everything found about the previous one."""
        return attrs.evolve(
            self,
            findings=Findings(mapped=STARTING),
            process=process,
            held=None,  # its model passed its pins
            starting=False,
            wanted=True,
            stop_reason=None,
            stop_deadline=None,
        )

    def callers(self) -> list[ReplyTo[Any]]:
        """Every caller still waiting for an answer this state owes (the start under way,
        stops after it, stops under way)."""
        stops = [stop.reply for stop in self.stops_after_start]
        return [*self.start_callers, *stops, *(caller.reply for caller in self.stop_callers)]
