"""How an instance stands, in words an operator can act on (pure).

`display_state` is the one mapping from what the supervisor knows of an instance (its
status, its mode, a refusal, a stop under way) to the `DisplayState` that ``inferactors
status``, the control API's ``display_state`` and the web page show. `status_line` is the
supervisor's one line for a service manager (``3 of 4 running; 1 restarting``): the
systemd notifier (``_service/lifecycle.py``) sends it as ``STATUS=`` whenever it changes.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable

from .._status import InstanceState, InstanceStatus


class DisplayState(enum.Enum):
    """What an operator sees of an instance, and what each calls for.

    The instance's `InstanceState` stays the library's fact; this is its reading for a
    person, derived by `display_state`.
    """

    STARTING = "starting"
    """Being loaded or started; not ready yet (wait)."""
    RUNNING = "running"
    """Ready: it serves."""
    DEGRADED = "degraded"
    """Up, but not well (slow, ``/health`` failing, its model not listed): see DETAIL."""
    BACKOFF = "backoff"
    """It failed and a restart is pending (the restart policy's delay)."""
    STOPPING = "stopping"
    """A stop is under way (an operator's, a reload's or the scheduler's)."""
    STOPPED = "stopped"
    """Stopped on purpose (an operator, a reload, a shutdown) or ended cleanly: start it."""
    IDLE = "idle"
    """Not running, and a request starts it (an on-demand instance, an Ollama model not
    resident)."""
    FATAL = "fatal"
    """Down until someone acts: the supervisor gave up, a configuration error, refused at
    load, or held down (exposure, a tampered model): fix, then start or reload."""
    GONE = "gone"
    """An adopted server that does not answer (inferactors never starts it)."""
    UNKNOWN = "unknown"
    """Not loaded in any runtime (the runtime closed)."""


_HELD = frozenset({"exposure", "tampered", "config-error"})
"""Stop reasons (`InstanceStatus.stop_reason`) that hold a server down until someone acts."""
_STOPPED_ON_PURPOSE = frozenset({"requested", "reload", "shutdown", "unload"})
_IDLED = frozenset({"ttl", "evicted"})


def display_state(
    status: InstanceStatus,
    *,
    adopted: bool = False,
    refused: str | None = None,
    retrying: bool = False,
    on_demand: bool = False,
    stopping: bool = False,
) -> DisplayState:
    """The `DisplayState` of an instance (first rule that matches wins).

    Args:
        status: its last status.
        adopted: somebody else runs it; inferactors only watches.
        refused: why it was refused at load or start (None: it was not).
        retrying: an adopted server that did not answer at start, retried under its policy.
        on_demand: requests start it, idleness stops it.
        stopping: a stop of it is under way (the fleet's, a reload's, the scheduler's);
            a status with a ``stop_deadline`` (its runtime's stop waits for the process)
            is stopping too.

    Refused, or given up (``supervision`` says ``gave up``), or held down (stopped for
    exposure, a tampered model, the same start-up fault twice) is FATAL; an adopted
    server retried or not answering is GONE; a stop under way is STOPPING; a pending
    restart is BACKOFF; then by state: Running is RUNNING; Degraded is STARTING while it
    is starting or loading, else DEGRADED; Loaded is IDLE when on demand (or an Ollama
    model not resident) and not being loaded, else STARTING; Exited is STOPPED after a
    stop on purpose or a clean exit (status 0), IDLE after the scheduler stopped an
    on-demand instance or a failure of one (a crash while idle: the next request starts
    it), else FATAL (a failure nothing will restart); Unknown is UNKNOWN.
    """
    supervision = status.supervision or ""
    state = status.state
    if refused is not None:
        return DisplayState.FATAL
    if retrying:
        return DisplayState.GONE
    if supervision.startswith("gave up"):
        return DisplayState.FATAL
    if state is InstanceState.EXITED and status.stop_reason in _HELD:
        return DisplayState.FATAL
    if (stopping or status.stop_deadline is not None) and state is not InstanceState.UNKNOWN:
        return DisplayState.STOPPING
    if supervision.startswith("restarting"):
        return DisplayState.BACKOFF
    if adopted and state is InstanceState.EXITED:
        return DisplayState.GONE
    return _by_state(status, on_demand)


_PASSING = frozenset({DisplayState.STARTING, DisplayState.BACKOFF, DisplayState.STOPPING})


def settled(shown: DisplayState) -> bool:
    """Whether a start has come to an end an operator can act on: running, or a failure
    that no waiting will change (degraded, fatal, gone, stopped, idle, unknown); not while
    it is starting, in backoff (a restart may yet bring it up) or stopping."""
    return shown not in _PASSING


def _by_state(status: InstanceStatus, on_demand: bool) -> DisplayState:
    state = status.state
    if state is InstanceState.RUNNING:
        return DisplayState.RUNNING
    if state is InstanceState.DEGRADED:
        return DisplayState.STARTING if _starting(status.detail) else DisplayState.DEGRADED
    if state is InstanceState.LOADED:
        detail = status.detail or ""
        idle = on_demand or detail.startswith("model not resident")
        return DisplayState.IDLE if idle and not _starting(detail) else DisplayState.STARTING
    if state is InstanceState.EXITED:
        reason = status.stop_reason
        if reason in _IDLED:
            return DisplayState.IDLE if on_demand else DisplayState.STOPPED
        clean = reason in (None, "crash") and status.exit_code == 0
        if reason in _STOPPED_ON_PURPOSE or clean:
            return DisplayState.STOPPED
        # on demand, nothing restarts a crashed server, and nothing needs to: the next
        # request starts it (its crash stays in its status's detail and exit code)
        return DisplayState.IDLE if on_demand else DisplayState.FATAL
    return DisplayState.UNKNOWN


_ORDER = ("restarting", "starting", "degraded", "gave up", "exited", "loaded", "refused",
          "unknown")  # fmt: skip


def condition(status: InstanceStatus, refused: bool = False) -> str:
    """One word (or two) for an instance: ``running``, ``restarting``, ``starting``,
    ``degraded``, ``gave up``, ``exited``, ``loaded``, ``refused`` or ``unknown``."""
    supervision = status.supervision or ""
    if refused:
        return "refused"
    if status.state is InstanceState.RUNNING:
        return "running"
    if supervision.startswith("restarting"):
        return "restarting"
    if supervision.startswith("gave up"):
        return "gave up"
    if status.state is InstanceState.DEGRADED:
        return "starting" if _starting(status.detail) else "degraded"
    word: str = status.state.value
    return word


def _starting(detail: str | None) -> bool:
    return detail is not None and detail.startswith(("starting", "loading"))


def status_line(instances: Iterable[tuple[InstanceStatus, bool]]) -> str:
    """``"R of N running"`` and then each other condition's count, in a fixed order
    (``"3 of 4 running; 1 restarting"``), from (status, refused) pairs; ``"no instances"``
    when there are none."""
    counts = Counter(condition(status, refused) for status, refused in instances)
    total = sum(counts.values())
    if total == 0:
        return "no instances"
    parts = [f"{counts['running']} of {total} running"]
    parts.extend(f"{counts[word]} {word}" for word in _ORDER if counts[word])
    return "; ".join(parts)
