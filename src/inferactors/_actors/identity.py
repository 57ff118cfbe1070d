"""Is the listener on a managed server's port still ours?

The instance's workers (``instance/probing.py``) ask before they trust a reply (the monitor's
identity check) and before they send anything that matters (`ensure_ours`, right before
each deep health and each watchdog token), so nothing goes to whoever holds the port after
our server is gone.
"""

from __future__ import annotations

from .._config.spec import InferenceSpec
from .._edges.netscan import NetScanner
from .._edges.process import ManagedProcess
from .._errors import BackendError
from .._policy.health_truth import misbound
from .._policy.probe_report import ServerReport, Unreachable


async def listener_owner(
    net: NetScanner, spec: InferenceSpec, process: ManagedProcess
) -> tuple[bool, int | None]:
    """Whether the listener on ``spec``'s port belongs to ``process``'s group, and its pid.

    Our own tree holding the exact binding settles it (the kernel routes to it); else the
    socket table's owner must be in our group, or be a descendant that left it (a ``setsid``
    wrapper's server). A descendant outside the group is ours for identity,
    but it is tracked by pid from then on (`ManagedProcess.track_descendants`, so a stop
    reaches it) and the status says so. A table that names nobody (no permission to see)
    contradicts nothing: ``(True, None)``. Identity is settled once per listener: the
    runtime's socket table (`SystemNetScanner`) remembers which process holds each listening
    socket's inode, so while the same socket holds the port this costs a share of one
    per-port kernel dump (under 1 ms); a new socket on the port is looked up again.
    """
    host, port = str(spec.bind_ip()), spec.port()
    ours = await net.tree_owner(process.pid, host, port)
    if ours is not None:
        if not net.owned_by(ours, process.pgid):
            process.track_descendants()
        return True, ours
    owner = await net.port_owner(host, port)
    if owner is None:
        return True, None
    return net.owned_by(owner, process.pgid) or owner in process.escaped, owner


async def ensure_ours(net: NetScanner, spec: InferenceSpec, process: ManagedProcess | None) -> None:
    """Refuse to send a managed server anything unless ``process`` runs and owns its port.

    Raises:
        BackendError: the server is not running, or an impostor holds its port (the
            message names its pid); in both cases nothing was sent.
    """
    where = spec.base_url()
    if process is None or not process.running:
        raise BackendError(f"deep health: the server is not running; nothing sent to {where}")
    ours, owner = await listener_owner(net, spec, process)
    if not ours:
        raise BackendError(
            f"deep health refused: an impostor (process {owner}) holds {where}, not our "
            f"server (process group {process.pgid}); nothing was sent"
        )


async def wrong_family(net: NetScanner, spec: InferenceSpec, report: ServerReport) -> str | None:
    """When ``report`` is a refused probe and ``spec``'s port listens only on the other
    address family (``::1`` while we probe 127.0.0.1, or the reverse), that configuration
    error in words (`health_truth.misbound`); else None. Reads the socket table (a
    per-port kernel dump, under 1 ms) only for a refusal, never for a timeout, nor for a
    probe that gave no verdict because our own loop ran late (``_policy/lateness.py``)."""
    health = report.health
    timed_out = isinstance(health, Unreachable) and "no complete reply" in health.why
    if not isinstance(health, Unreachable) or report.no_verdict or timed_out:
        return None
    listeners = await net.listeners_on(spec.port())
    return misbound(str(spec.bind_ip()), spec.port(), listeners)
