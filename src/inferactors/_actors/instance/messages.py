"""The instance actor's internal messages: what its workers post back to its loop, and
what the loop read of the live world as it took a message (`Seen`) (pure values; the rules
that apply them are ``step.py`` and ``verdicts.py``; a crash arrives as `mailbox.Crashed`)."""

from __future__ import annotations

import attrs

from ..._edges.capture import RunEvidence
from ..._edges.process import ManagedProcess
from ..._errors import InferactorsError
from ..._policy.exposure import Exposure
from ..._policy.health_truth import Confirmation
from ..._policy.probe_report import ServerReport
from ..._stop_reasons import Diagnosis
from ..messages import ReplyTo
from .pins import PinHold, PinnedLaunch


@attrs.frozen
class Spawned:
    """The server process started; ``pins`` are the verified descriptors it serves, open
    until it is reaped (None: nothing pinned)."""

    process: ManagedProcess
    reply: ReplyTo[None]
    pins: PinnedLaunch | None = None


@attrs.frozen
class SpawnFailed:
    """The server process could not be started (port taken, exec failed); ``hold`` is set
    when its model failed its pins (tampered): the instance is then held down."""

    error: InferactorsError
    reply: ReplyTo[None]
    hold: PinHold | None = None


@attrs.frozen
class Exited:
    """The server process ended (on its own, or after a stop or an unload)."""

    process: ManagedProcess
    evidence: RunEvidence


@attrs.frozen
class Stopped:
    """A requested stop finished; its waiters get ``evidence``."""

    process: ManagedProcess
    evidence: RunEvidence


@attrs.frozen
class Probed:
    """A probe of the server finished; ``process`` is the one probed (None when adopted).

    ``owner_ok`` says whether the socket on our port belongs to our process group (None
    when not checked); ``owner_pid`` is the listener's pid when known; ``exposure`` is set
    when the server was found listening beyond loopback.
    """

    report: ServerReport
    process: ManagedProcess | None
    owner_ok: bool | None = None
    owner_pid: int | None = None
    exposure: Exposure | None = None
    first_token: str | None = None
    """None: not asked; ``""``: one token came back; otherwise why the first token failed."""
    stopped: bool = False
    """True when a managed server that did not answer is stopped by a signal (SIGSTOP)."""
    confirmation: Confirmation | None = None
    """The completion that checks a server whose ``/health`` failed."""
    ttft_s: float | None = None
    """Time to first token, float seconds, of a deep health this probe measured (the first
    token, or a confirmation that worked); None when it measured none."""
    misbound: str | None = None
    """The configuration error when the port listens only on the other address family;
    ``""``: looked, nothing wrong; None: not looked (the last verdict stands)."""
    no_verdict_for_s: float = 0.0
    """For a report that gives no verdict: how long (float seconds) no probe of the server
    has given one (``_policy/lateness.py`` `VerdictBound.lasted_s`)."""


@attrs.frozen
class ExposureFound:
    """The exposure watch found the server listening beyond loopback."""

    process: ManagedProcess
    exposure: Exposure


@attrs.frozen
class PinChanged:
    """A verified model file changed while the server served it (`PinnedLaunch.changed`)."""

    process: ManagedProcess
    hold: PinHold


@attrs.frozen
class StartupFault:
    """A starting server printed a fault it will not exit on (``address in use``:
    mlx_lm.server then hangs); it must be stopped."""

    process: ManagedProcess
    diagnosis: Diagnosis


@attrs.frozen
class ReadinessExpired:
    """The readiness deadline of ``process`` (``timeout_s`` seconds after its spawn, or an
    extension of it) passed; if it never was up, it must go, unless our own loop lost time
    meanwhile."""

    process: ManagedProcess
    timeout_s: float
    lost_s: float = 0.0
    """Float seconds our own event loop lost in the window the timer timed (how late it
    fired plus the stalls since it began; ``_edges/loop_lag.py``)."""


@attrs.frozen
class WatchdogResult:
    """One deep-health check of the watchdog: ``why`` is None when it passed."""

    process: ManagedProcess | None
    why: str | None
    ttft_s: float | None = None
    """The check's time to first token when it passed, float seconds."""
    no_verdict: bool = False
    """The check's deadline was lost to our own late loop (`NoVerdict`): ``why`` says so;
    neither a pass nor a failure."""


@attrs.frozen
class DeepHealthDone:
    """A caller's deep health (`InferRuntime.deep_health`) passed on ``process``."""

    process: ManagedProcess | None
    ttft_s: float
    """Its time to first token, float seconds."""


@attrs.frozen
class Confirmed:
    """An adopted server answered a start; watching it begins."""

    reply: ReplyTo[None]


@attrs.frozen
class ShutdownDone:
    """The unload finished its cleanup; the actor ends after answering."""

    reply: ReplyTo[None]


Internal = (
    Spawned
    | SpawnFailed
    | Exited
    | Stopped
    | Probed
    | Confirmed
    | ShutdownDone
    | ExposureFound
    | PinChanged
    | ReadinessExpired
    | StartupFault
    | WatchdogResult
    | DeepHealthDone
)


@attrs.frozen
class Seen:
    """What the actor read of the live world as it took a message: the rules never read a
    process or a channel themselves."""

    running: bool = True
    """The current process's exit has not been noticed yet (`ManagedProcess.running`)."""
    fatal: Diagnosis | None = None
    """The fatal start-up line the current process printed (`LineWatch.fatal`)."""
    gone: frozenset[object] = frozenset()
    """The callers (reply channels) that gave up: of the message, and of the start under
    way (`caller_gone`: the caller closed its end)."""


NOTHING_SEEN = Seen()
"""A message taken with a live process, no caller gone and no fatal line."""
