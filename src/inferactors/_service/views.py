"""What the `Fleet` shows of itself: `InstanceView`, `ReloadResult` and `LifecycleNote`.

Plain frozen values (no I/O), shared by the control API, the CLI and the systemd notifier.
"""

from __future__ import annotations

import enum

import attrs

from .._actors.front_door_msgs import ResidencyView
from .._policy.service_status import DisplayState, display_state
from .._status import InstanceStatus


def _shown(view: InstanceView) -> DisplayState:
    """The display state of a view built without one: from its status, mode and refusal."""
    return display_state(view.status, adopted=view.mode == "adopted", refused=view.refused)


@attrs.frozen
class InstanceView:
    """One instance as the supervisor last saw it: one row of ``inferactors status``.

    Attributes:
        name: the instance's name, its ``role`` in the run file (unique per run file).
        flavor: the flavor's id (``"infer.llamacpp"``, ...).
        mode: ``"managed"`` or ``"adopted"``.
        instance_id: the runtime's id for it, or None when it was refused at load.
        status: the last known status (cached from events; producing it does no I/O).
        refused: why it was refused at load or start, in words, else None.
        residency: what the scheduler shows of it (resident bytes declared, estimated
            and measured; requests in flight and queued; TTL left; its last stop's reason),
            None when no scheduler runs or it is not scheduled.
        signed_by: who signed its model, as the registry last verified it (the trust anchor
            and the signer: ``"ops: key sha256:74e77a506e308a1f..."``), read at each load;
            None for an unsigned model, an adopted server or before its first load.
        endpoint: the server's base URL (``"http://127.0.0.1:8090"``).
        model: the registry name of its model (or Ollama's tag), None when it names none.
        stop_deadline_at: while a stop waits for its process to exit, the wall-clock time
            (unix seconds) at which it is killed (SIGKILL) if still running
            (``status.stop_deadline`` read on the wall clock); else None.
        display_state: how it stands for an operator (``_policy/service_status.py``):
            starting, running, degraded, backoff, stopping, stopped, idle, fatal, gone or
            unknown; derived from the rest (and from a stop under way, an adopted server
            retried, an on-demand instance). Derived from ``status``, ``mode`` and
            ``refused`` when not given (an ``attrs.evolve`` that changes them must give it).
    """

    name: str
    flavor: str
    mode: str
    instance_id: str | None
    status: InstanceStatus
    refused: str | None = None
    residency: ResidencyView | None = None
    signed_by: str | None = None
    endpoint: str | None = None
    model: str | None = None
    stop_deadline_at: float | None = None
    display_state: DisplayState = attrs.field(default=attrs.Factory(_shown, takes_self=True))


@attrs.frozen
class ReadyView:
    """One instance as ``/readyz`` sees it (``_policy/readiness.py``).

    Attributes:
        name: the instance's name.
        ready: whether it takes requests, changed only after probes in a row agree.
        required: whether ``/readyz`` (all of them) waits for it (``required`` in the run
            file, the default); an optional one is shown, never waited for.
        state: its state now (``running``, ``degraded``, ...).
        reason: why it is not ready, in words; None when ready.
    """

    name: str
    ready: bool
    required: bool
    state: str
    reason: str | None = None


@attrs.frozen
class ReloadResult:
    """What one reload did, by instance name (each tuple sorted).

    Attributes:
        added: new in the run file: loaded and started.
        removed: gone from the run file: stopped and unloaded.
        changed: their own effective settings changed (their spec, supervision or mode,
            or a runtime setting that reaches them: ``node_id``, probe timeouts, a
            ``[managed]`` setting their process or supervision takes;
            ``_policy/reload_plan.py``): drained, unloaded, loaded again with the new
            settings and started.
        unchanged: left running as they were (same process), whatever else changed.
        revived: unchanged but held down (stopped for exposure or a tampered model, a
            configuration error, given up, refused at load): loaded again and started.
        refused: ``(name, reason)`` of each added, changed or revived instance that was
            then refused at its load or start (also listed in its class above), sorted
            by name; a reload with any refused failed in part (``inferactors reload``
            exits 1).
        tampered: ``(name, reason)`` of each unchanged instance whose model no longer
            verifies against the trust anchors as the reload re-read them: held down as
            ``tampered`` (its server stopped), sorted by name; the reload itself succeeded.
    """

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    revived: tuple[str, ...] = ()
    refused: tuple[tuple[str, str], ...] = ()
    tampered: tuple[tuple[str, str], ...] = ()


class Lifecycle(enum.StrEnum):
    """The supervisor's own milestones, for a service manager (systemd's notify protocol)."""

    SETTLED = "settled"
    """Every instance reached its first settled state (`Fleet.settled` is set)."""
    RELOADING = "reloading"
    """A reload began (before its run file is read: a refused reload also ends in
    RELOADED)."""
    RELOADED = "reloaded"
    """A reload ended, applied (``detail`` sums it up) or refused (``failed`` is set and
    ``detail`` says why)."""
    STOPPING = "stopping"
    """The fleet is closing: every managed server is being stopped."""


@attrs.frozen
class LifecycleNote:
    """One milestone: its kind, a one-line status text for people, and the trio time;
    ``failed``: a reload that was refused (nothing changed) or whose instances were
    refused at their load or start."""

    kind: Lifecycle
    detail: str
    at: float
    failed: bool = False
