"""Why a server stopped: the stop reason recorded apart from its exit status
(`StopReason`), and, for a start-up failure, the diagnosis in the server's own words
(`FaultKind`, `Diagnosis`). Events (``_events.py``), commands and status carry them.
"""

from __future__ import annotations

import enum

import attrs


class StopReason(enum.StrEnum):
    """Why a managed server's process ended, recorded apart from its exit status."""

    REQUESTED = "requested"
    CRASH = "crash"
    READINESS_TIMEOUT = "readiness timeout"
    HEALTH_KILL = "health kill"
    EXPOSURE = "exposure"
    TAMPERED = "tampered"
    """A verified model file changed while the server served it (an in-place write); the
    server was stopped and is held down like a spawn refused for tampering."""
    UNLOAD = "unload"
    SHUTDOWN = "shutdown"
    STARTUP_FAILURE = "start-up failure"
    """The process ended (or was stopped for a bind failure it printed) before it was ever
    Running, and its output says why (`Diagnosis`); a plain ``crash`` when nothing matched."""
    CONFIG_ERROR = "config-error"
    """Shown in status, never in `ProcessExited`: the same start-up failure twice in a row,
    so the supervisor gave up at once; fix the configuration, then start it again."""
    TTL = "ttl"
    """An on-demand instance idle for its TTL was stopped by the front door (drained)."""
    EVICTED = "evicted"
    """The front door stopped an idle on-demand instance to make room for another."""
    RELOAD = "reload"
    """A reload changed or removed the instance: drained, then stopped."""
    ERROR = "error"
    """The instance's own code raised (`InstanceCrashed`), so its server was stopped: OTP's
    exit with an error reason, abnormal, restarted and counted like a crash."""


class FaultKind(enum.StrEnum):
    """What kind of start-up failure a server's own words describe (the value is shown);
    read from its output by ``_policy.startup_fault``."""

    BAD_MODEL_FILE = "bad model file"
    INVALID_FLAG = "invalid flag"
    ADDRESS_IN_USE = "address in use"
    CANNOT_BIND = "cannot bind"
    PERMISSION_DENIED = "permission denied"
    OUT_OF_MEMORY = "out of memory"
    MISSING_LIBRARY = "missing library"
    PYTHON_TRACEBACK = "python traceback"
    WRONG_ADDRESS_FAMILY = "wrong address family"
    """Seen while the server lives: it listens only on the other address family from the
    one we probe (``::1`` against 127.0.0.1); the line is ours and names the fix."""
    REFUSES_REQUESTS = "refuses our requests"
    """Seen while the server lives: it answers 401 or 403 (it wants an API key we do not
    have, or refuses ours); the line is ours, with the server's words, and names the fix."""


@attrs.frozen
class Diagnosis:
    """Why a server failed, in its own words.

    Attributes:
        kind: the class of the failure.
        line: the server's line that matched: one line, control characters removed, cut to
            about 300 characters, llama.cpp's log prefix dropped.
        last_lines: the server's last (at most 20) non-empty lines, cleaned alike.
    """

    kind: FaultKind
    line: str
    last_lines: tuple[str, ...] = ()

    def describe(self) -> str:
        """``"invalid flag: error: invalid argument: --no-such-flag"``: the kind, then the
        server's line; a line in our own words (`OUR_WORDS`) alone."""
        return self.line if self.kind in OUR_WORDS else f"{self.kind.value}: {self.line}"


OUR_WORDS = frozenset({FaultKind.WRONG_ADDRESS_FAMILY, FaultKind.REFUSES_REQUESTS})
"""Fault kinds read from what the server does, not from what it printed: their line is
ours, says the kind itself, and names the setting that fixes it."""
