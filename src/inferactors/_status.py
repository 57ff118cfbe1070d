"""Instance states and the status snapshot: the vocabulary every layer speaks.

A status is a snapshot: it never raises and it is never stale by more than one probe.
"""

from __future__ import annotations

import enum

import attrs


class InstanceState(enum.StrEnum):
    """The reference's five states; ``detail`` in `InstanceStatus` says the rest."""

    LOADED = "loaded"
    RUNNING = "running"
    DEGRADED = "degraded"
    EXITED = "exited"
    UNKNOWN = "unknown"


@attrs.frozen
class InstanceStatus:
    """What `InferRuntime.status` answers.

    Attributes:
        state: one of `InstanceState`.
        detail: why, in words (``"loading model"``, ``"server process exited"``), or None.
        exit_code: the last process's exit status when it exited with one. This field,
            ``stop_reason`` and ``signal`` describe the process that ended while no process
            runs; once a new one runs (after a restart) they are None again, and
            ``restarts`` counts the restarts (each exit is in its `ProcessExited` event).
        stop_reason: why the last process ended (``"requested"``, ``"crash"``, ``"start-up
            failure"``, ``"config-error"`` once the supervisor gave up on the same start-up
            failure twice in a row, ...), kept apart from the exit status.
        pid: the live process id of a managed server, else None.
        uptime_s: seconds since the live process was spawned, else None.
        last_probe: what the last probe found (``"up"``, ``"loading"``, ``"unreachable:
            connection refused"``), to show loading progress.
        restarts: restarts made since the restart budget was last refilled.
        supervision: what the supervisor is doing about it (``"restarting in 2.0 s"``,
            ``"gave up: restart budget spent (5 of 5)"``), else None.
        ttft_s: time to first token of the last deep health that passed (readiness's first
            token, a watchdog check, or a confirming completion), float seconds; None
            before any.
        diagnosis: why the last process failed, in its own words (``"invalid flag: error:
            invalid argument: --no-such-flag"``: the kind, then the server's line), else None.
        last_lines: the last process's last (at most 20) non-empty output lines.
        serving: whether the server's completions work: Running, or Degraded only because
            it is slow or its ``/health`` fails while a completion confirmed it serves. A
            serving server counts as up for the restart budget's refill (``stable_after_s``).
        signal: the signal number that ended the last process (``9`` for SIGKILL) when a
            signal ended it, else None (then ``exit_code`` says how it ended).
        stop_deadline: while a stop of its process waits for it to exit (a server finishing
            an endless stream after SIGTERM): trio time (float seconds, the runtime's
            clock) at which it is killed with SIGKILL if still running; None when no stop
            is under way. Its display state is then ``stopping``.
        since: trio time (float seconds, the runtime's clock) from which ``state`` holds:
            set when the instance's state last changed; None before its first report.
            Two statuses that differ only in ``since`` compare equal.
        endpoint: the server's base URL (``http://127.0.0.1:8090``); None on a status
            not made by an instance actor. Not compared (it names, it does not report).
        model: the model it serves (the registry name when managed, the spec's model when
            adopted), else None. Not compared.
    """

    state: InstanceState
    detail: str | None = None
    exit_code: int | None = None
    stop_reason: str | None = None
    pid: int | None = None
    uptime_s: float | None = None
    last_probe: str | None = None
    restarts: int = 0
    supervision: str | None = None
    ttft_s: float | None = None
    diagnosis: str | None = None
    last_lines: tuple[str, ...] = ()
    serving: bool = False
    signal: int | None = None
    stop_deadline: float | None = None
    since: float | None = attrs.field(default=None, eq=False)  # a date: not what it says
    endpoint: str | None = attrs.field(default=None, eq=False)  # who it is, not what it says
    model: str | None = attrs.field(default=None, eq=False)


@attrs.frozen
class SupervisorStatus:
    """The supervisor's own state, apart from any server's (`InferRuntime.supervisor_status`).

    Attributes:
        overloaded: whether its own event loop runs late now, so that deadlines give no
            verdict instead of judging servers (``_policy/lateness.py``).
        since: trio time the overload began (float seconds), else None.
        why: its first sign (``"GET /health: no verdict: ..."``, ``"event loop stalled
            900 ms"``), else None.
    """

    overloaded: bool = False
    since: float | None = None
    why: str | None = None
