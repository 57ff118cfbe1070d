"""Internal messages: results that an instance actor's workers post back to its loop."""

from __future__ import annotations

import attrs

from ._capture import RunEvidence
from ._errors import InferactorsError
from ._messages import ReplyTo
from ._probe import ServerReport
from ._process import ManagedProcess
from ._status import InstanceStatus


@attrs.frozen
class Spawned:
    """The server process started."""

    process: ManagedProcess
    reply: ReplyTo[None]


@attrs.frozen
class SpawnFailed:
    """The server process could not be started (port taken, exec failed)."""

    error: InferactorsError
    reply: ReplyTo[None]


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
    """A probe of the server finished; ``process`` is the one probed (None when adopted)."""

    report: ServerReport
    process: ManagedProcess | None
    reply: ReplyTo[InstanceStatus] | None = None


@attrs.frozen
class Confirmed:
    """An adopted server answered a start; watching it begins."""

    reply: ReplyTo[None]


@attrs.frozen
class ShutdownDone:
    """The unload finished its cleanup; the actor ends after answering."""

    reply: ReplyTo[None]


Internal = Spawned | SpawnFailed | Exited | Stopped | Probed | Confirmed | ShutdownDone
INTERNAL_TYPES = (Spawned, SpawnFailed, Exited, Stopped, Probed, Confirmed, ShutdownDone)
