"""What the instance's rules ask the actor to do: frozen values, carried out by the loop.

`step` (``step.py``) never does anything itself: it returns a new state and a tuple of
these, and `InstanceActor` (``actor.py``) carries them out in order, as llama-swap's router
sends every effect of its scheduler through one ``Effects`` table. Each class names the
worker or the call it becomes; the state machine's tests record them instead (pure; no
trio, no I/O).
"""

from __future__ import annotations

from typing import Any

import attrs

from ..._edges.process import ManagedProcess
from ..._errors import InferactorsError
from ..._events import Event
from ..messages import ReplyTo
from .pins import PinHold, PinnedLaunch


@attrs.frozen
class Answer:
    """Answer ``reply`` with ``value`` (`messages.answer`)."""

    reply: ReplyTo[Any]
    value: object


@attrs.frozen
class Refuse:
    """Answer ``reply`` with ``error`` (`messages.refuse`)."""

    reply: ReplyTo[Any]
    error: InferactorsError


@attrs.frozen
class AnswerStatus:
    """Answer ``reply`` with the status the actor publishes now (`status.status_of`)."""

    reply: ReplyTo[Any]


@attrs.frozen
class Emit:
    """Send ``event`` to the supervisor (`Mailbox.emit`: never waits)."""

    event: Event


@attrs.frozen
class Spawn:
    """Start the spawn worker (`ProcessLife.spawn`): the pin check, then the process; it
    posts `Spawned` or `SpawnFailed`. ``held``: the instance's hold, handed to the pin check
    (a held model is refused again without being read)."""

    reply: ReplyTo[None]
    held: PinHold | None


@attrs.frozen
class Terminate:
    """Start the stop worker (`ProcessLife.stop`): TERM the group, KILL it after
    ``grace_s`` seconds, reap; it posts `Stopped`."""

    process: ManagedProcess
    grace_s: float


@attrs.frozen
class WatchProcess:
    """Start the tasks that watch a process that just started (the exit watcher, the
    monitor, the exposure watch over ``pins``, the start-up fault watch and, when the plan
    has one, the readiness timer); they end together (`EndProcessWatch`)."""

    process: ManagedProcess
    pins: PinnedLaunch | None


@attrs.frozen
class TimeReadiness:
    """Start the readiness timer of ``process`` again, to fire at trio time ``deadline``
    (`ProcessLife.readiness_timer`), among the tasks watching it."""

    process: ManagedProcess
    timeout_s: float
    deadline: float


@attrs.frozen
class EndProcessWatch:
    """Cancel the tasks watching the current process (it exited)."""


@attrs.frozen
class WatchAdopted:
    """Start the monitor of an adopted server (the tasks of its watch)."""


@attrs.frozen
class ForgetWatches:
    """After a crash: cancel every watching task (the mailbox already cancelled them) and
    forget them, so the next process or watch starts afresh."""


@attrs.frozen
class StartWatchdog:
    """Start the deep-health watchdog among the tasks watching ``process`` (None: the
    adopted server's watch)."""

    process: ManagedProcess | None


@attrs.frozen
class StopReadingLines:
    """The server is ready: stop reading its output line by line (`LineWatch.stop`)."""

    process: ManagedProcess


@attrs.frozen
class NoteProbeTime:
    """Tell the edges how long a probe took (`Edges.on_probe`), at trio time ``at``."""

    latency_s: float
    at: float


@attrs.frozen
class CheckHealth:
    """Start a worker that answers ``reply`` with one probe report (`Probing.health`)."""

    process: ManagedProcess | None
    reply: ReplyTo[Any]


@attrs.frozen
class CheckDeepHealth:
    """Start a worker that asks for one real token and answers ``reply``
    (`Probing.deep_health`)."""

    process: ManagedProcess | None
    reply: ReplyTo[Any]


@attrs.frozen
class ConfirmAdopted:
    """Start a worker that checks that the adopted server answers (`Probing.confirm_adopted`);
    it posts `Confirmed` or refuses ``reply``."""

    reply: ReplyTo[None]


@attrs.frozen
class CloseDown:
    """Start the unload worker (`ProcessLife.shutdown`): stop ``process`` (when it runs)
    with ``grace_s`` seconds of grace, delete the instance directory; it posts
    `ShutdownDone`."""

    process: ManagedProcess | None
    grace_s: float
    reply: ReplyTo[None]


@attrs.frozen
class EndActor:
    """End the actor's loop (`Mailbox.close`): the unload is done."""


Effect = (
    Answer
    | Refuse
    | AnswerStatus
    | Emit
    | Spawn
    | Terminate
    | WatchProcess
    | TimeReadiness
    | EndProcessWatch
    | WatchAdopted
    | ForgetWatches
    | StartWatchdog
    | StopReadingLines
    | NoteProbeTime
    | CheckHealth
    | CheckDeepHealth
    | ConfirmAdopted
    | CloseDown
    | EndActor
)

Effects = list[Effect]
"""The effects one step has asked for so far, in order."""
