"""How a rule of the instance actor stops the current process (pure; no trio, no I/O):
`stop_process`, which keeps the reason of the first stop under way, and the grace between
SIGTERM and SIGKILL each kind of stop gets (float seconds)."""

from __future__ import annotations

import attrs

from ..._stop_reasons import StopReason
from .effects import Effects, Terminate
from .state import State

CRASH_GRACE_S = 3.0
"""Grace for a server stopped because its instance crashed (as for a health kill)."""

ABANDONED_GRACE_S = 5.0
"""SIGTERM grace for the server of a start every caller gave up on."""

EXPOSURE_GRACE_S = 3.0
"""Grace for a server stopped for listening beyond loopback."""

HEALTH_KILL_GRACE_S = 3.0
"""Grace for a server killed by the deep-health watchdog or for staying unhealthy."""

TAMPERED_GRACE_S = 3.0
"""Grace for a server stopped because a verified model file changed while it served."""

STARTUP_FAULT_GRACE_S = 0.5
"""Grace for a starting server that printed a fault it hangs on, or shows a configuration
error while it lives: stopped within 1 s of the line (mlx_lm.server whose bind failed
ignores SIGTERM and gets SIGKILL)."""


def stop_process(state: State, reason: StopReason, grace_s: float, out: Effects) -> State:
    """Stop the process for ``reason`` with ``grace_s`` seconds between TERM and KILL,
    unless there is none or a stop is already under way (whose reason is kept)."""
    if state.process is None or state.stop_reason is not None:
        return state
    out.append(Terminate(state.process, grace_s))
    return attrs.evolve(state, stop_reason=reason)
