"""When ``inferactors run`` stops on its own, and with which exit status (pure).

Each instance has a `Standing`:

- **starting**: not yet at its first settled state (loading, starting, Unknown);
- **supervised**: Running, Degraded, Exited and being restarted, stopped by an operator
  (who may start it again), or an adopted server that is down and retried under its
  policy;
- **down**: nothing will bring it back but a reload: refused at load or start, given up
  (restart budget or intensity spent, a configuration error), or held down after a stop
  for exposure or a tampered model.

A down instance is down for a `DownKind`: **config** when a restart of the supervisor
cannot fix it (a refusal at load or start: an unknown or tampered model, a port held by
another process, a bad flag, a program or directory it cannot use; the same start-up fault
twice; held down for exposure or tampering), else **failure** (a crash loop that spent its
budget, an adopted server that stayed away).

The fleet has settled once no instance is starting (systemd's ``READY=1``). `verdict`
says when the supervisor stops by itself: once a **required** instance (the run file's
default, ``required = false`` makes one optional) is down, or every instance is. The
status is `EXIT_CONFIG` (78, ``EX_CONFIG``) when a required instance that is down is down
for config (or, with none required down, every instance is down for config): restarting
the supervisor would only fail again, so the shipped systemd unit does not
(``RestartPreventExitStatus=2 78``). Otherwise `EXIT_NOTHING_LEFT` (1), which the unit
restarts. Only final facts count as down (a crash whose restart is not yet scheduled is
not), so a fleet never exits on a passing state.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence

import attrs

from .._config.supervision import RestartPolicy
from .._status import InstanceState, InstanceStatus
from .restart import CONFIG_ERROR
from .service_status import condition

EXIT_STOPPED = 0
"""Stopped by SIGINT or SIGTERM: every managed server was stopped cleanly."""
EXIT_NOTHING_LEFT = 1
"""Nothing left to supervise: every instance refused, given up or held down (so systemd's
``Restart=on-failure`` or Kubernetes restarts the supervisor), or start-up failed."""
EXIT_BAD_CONFIG = 2
"""The run file is invalid (unreadable, bad TOML, a bad value, no instances)."""
EXIT_CONFIG = 78
"""``EX_CONFIG`` (``sysexits.h``): what the supervisor found at run time cannot be fixed by
running it again (a required instance refused or held down for its configuration, a
tampered model, a port another process holds, a state directory it cannot use)."""

HELD_DOWN = frozenset({"exposure", "tampered"})
"""Stop reasons (`InstanceStatus.stop_reason`) that hold a server down until a reload."""


class Standing(enum.Enum):
    """Where one instance stands for the exit decision (module docstring)."""

    STARTING = "starting"
    SUPERVISED = "supervised"
    DOWN = "down"


def standing(
    status: InstanceStatus, refused: str | None = None, retrying: bool = False
) -> Standing:
    """The `Standing` of an instance with ``status``; ``refused``: why it was refused at
    load or start (else None); ``retrying``: an adopted server down at start is being
    retried under its policy."""
    if retrying:
        return Standing.SUPERVISED
    if refused is not None:
        return Standing.DOWN
    if (status.supervision or "").startswith("gave up"):
        return Standing.DOWN
    if status.state is InstanceState.EXITED and status.stop_reason in HELD_DOWN:
        return Standing.DOWN
    if condition(status) in ("starting", "loaded", "unknown"):
        return Standing.STARTING
    return Standing.SUPERVISED


def down_reason(status: InstanceStatus, refused: str | None = None) -> str:
    """Why an instance stands where it does, in words, for the nothing-left line: its
    refusal, its give-up, its held-down stop, else its state and detail."""
    if refused is not None:
        return f"refused: {refused}"
    if (status.supervision or "").startswith("gave up"):
        return status.supervision or ""
    if status.state is InstanceState.EXITED and status.stop_reason in HELD_DOWN:
        return f"held down after a stop for {status.stop_reason}"
    return f"{status.state.value}: {status.detail}" if status.detail else status.state.value


class DownKind(enum.Enum):
    """Why a down instance is down (module docstring)."""

    CONFIG = "config"
    FAILURE = "failure"


def down_kind(status: InstanceStatus, refused: str | None = None) -> DownKind:
    """The `DownKind` of an instance that is down with ``status`` (``refused``: why it was
    refused at load or start)."""
    if refused is not None:
        return DownKind.FAILURE if refused.startswith("gave up") else DownKind.CONFIG
    if (status.supervision or "").startswith(f"gave up: {CONFIG_ERROR}"):
        return DownKind.CONFIG
    if status.state is InstanceState.EXITED and status.stop_reason in HELD_DOWN:
        return DownKind.CONFIG
    return DownKind.FAILURE


@attrs.frozen
class Place:
    """One instance for the `verdict`: its standing, whether it is required, and, when
    down, why."""

    standing: Standing
    required: bool = True
    kind: DownKind = DownKind.FAILURE


def verdict(places: Sequence[Place]) -> int | None:
    """The exit status ``inferactors run`` stops with now, or None while it goes on
    (module docstring)."""
    down = [place for place in places if place.standing is Standing.DOWN]
    required = [place for place in down if place.required]
    if required:
        config = any(place.kind is DownKind.CONFIG for place in required)
        return EXIT_CONFIG if config else EXIT_NOTHING_LEFT
    if down and len(down) == len(places):
        config = all(place.kind is DownKind.CONFIG for place in down)
        return EXIT_CONFIG if config else EXIT_NOTHING_LEFT
    return None


def settled(standings: Iterable[Standing]) -> bool:
    """Whether every instance reached its first settled state (none is starting)."""
    return all(s is not Standing.STARTING for s in standings)


def nothing_left(standings: Iterable[Standing]) -> bool:
    """Whether there is nothing left to supervise: no instance, or every one down."""
    return all(s is Standing.DOWN for s in standings)


def adopted_retry_delay_s(policy: RestartPolicy, attempt: int) -> float | None:
    """Seconds before retry ``attempt`` (0-based) of an adopted server that did not answer
    at start: the restart policy's backoff (``delay_s``), None once ``max_restarts``
    retries were spent or when its restart type is temporary (never retried)."""
    if policy.restart_type.value == "temporary" or attempt >= policy.max_restarts:
        return None
    return policy.delay_s(attempt)
