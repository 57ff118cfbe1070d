"""Whether ``inferactors run`` has anything left to supervise, and its exit status (pure).

Each instance has a `Standing`:

- **starting**: not yet at its first settled state (loading, starting, Unknown);
- **supervised**: Running, Degraded, Exited and being restarted, stopped by an operator
  (who may start it again), or an adopted server that is down and retried under its
  policy;
- **down**: nothing will bring it back but a reload: refused at load or start, given up
  (restart budget or intensity spent, a configuration error), or held down after a stop
  for exposure or a tampered model.

The fleet has settled once no instance is starting (systemd's ``READY=1``); nothing is left
to supervise once every instance is down. Only final facts count as down (a crash whose
restart is not yet scheduled is not), so a fleet never exits on a passing state.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from .._config.config import RestartPolicy
from .._status import InstanceState, InstanceStatus
from .service_status import condition

EXIT_STOPPED = 0
"""Stopped by SIGINT or SIGTERM: every managed server was stopped cleanly."""
EXIT_NOTHING_LEFT = 1
"""Nothing left to supervise: every instance refused, given up or held down (so systemd's
``Restart=on-failure`` or Kubernetes restarts the supervisor), or start-up failed."""
EXIT_BAD_CONFIG = 2
"""The run file is invalid (unreadable, bad TOML, a bad value, no instances)."""

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
