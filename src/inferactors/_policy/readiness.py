"""Whether an instance is ready to take requests, as ``/readyz`` answers (pure): `Readiness`.

What a kubelet or a load balancer acts on must not flap with one slow probe: a saturated
engine whose ``/health`` is late is still serving. So:

- an instance serves (`serves`) when it is Running (a busy server is Running: "busy: no
  free slot"), or Degraded while its completions still work (`InstanceStatus.serving`:
  slow, or its ``/health`` failing while a real token came back);
- while its server lives (Degraded, Unknown), its readiness turns to not ready only after
  `UNREADY_AFTER` observations in a row say it does not serve, and back to ready after
  `READY_AFTER` in a row say it does (Kubernetes' own ``failureThreshold`` and
  ``successThreshold`` defaults). An observation is one probe of the instance, or one
  fresh reading of its status. A server that is gone (Exited: crashed, stopped, given
  up; Loaded: not started) is not ready at once: there is no probe left to wait for;
- the reason is the status in words (``"degraded: loading model"``), for the 503's body.

Before its first observation an instance is not ready ("starting").
"""

from __future__ import annotations

import attrs

from .._status import InstanceState, InstanceStatus

UNREADY_AFTER = 3
"""Observations in a row of an instance not serving before it reads not ready."""
READY_AFTER = 1
"""Observations in a row of an instance serving before it reads ready again."""


def serves(status: InstanceStatus) -> bool:
    """Whether ``status`` says the server takes requests (module docstring)."""
    return status.state is InstanceState.RUNNING or status.serving


def reason(status: InstanceStatus) -> str:
    """Why an instance with ``status`` is not ready, in words: ``"degraded: loading model"``."""
    words = status.state.value
    if status.detail:
        words = f"{words}: {status.detail}"
    if status.supervision:
        words = f"{words} ({status.supervision})"
    return words


@attrs.define
class Readiness:
    """One instance's readiness, changed only by observations in a row (module docstring).

    Attributes:
        ready: what ``/readyz`` says now.
        why: the reason it is not ready (None when ready).
    """

    ready: bool = False
    why: str | None = "starting"
    _streak: int = 0

    def observe(self, status: InstanceStatus) -> bool:
        """One observation of ``status``; whether readiness changed."""
        now = serves(status)
        if now == self.ready:
            self._streak = 0
            if not now:
                self.why = reason(status)
            return False
        self._streak += 1
        gone = status.state in (InstanceState.EXITED, InstanceState.LOADED)
        if not gone and self._streak < (READY_AFTER if now else UNREADY_AFTER):
            return False
        self.ready, self._streak = now, 0
        self.why = None if now else reason(status)
        return True

    def down(self, why: str) -> None:
        """Not ready at once: the instance is gone (refused, unloaded, given up)."""
        self.ready, self.why, self._streak = False, why, 0
