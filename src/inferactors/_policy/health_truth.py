"""What a health probe really says about a server that was running (pure; no I/O).

A server's ``/health`` is a claim, a token is the truth.

- **Confirmation.** When ``/health`` fails on a server that was Running (a timeout, a
  reset, a refused connection, an HTTP error), the monitor asks for one token
  (`worth_confirming`). If it comes back, the server is Degraded, not unhealthy, with a
  detail that says both (`confirmed_status`: "health endpoint not answering (timeout);
  completions work") and it is not killed by the health-kill rule. A server that says
  itself it is dead (mlx_lm.server's ``{"status": "unavailable"}``, `Unhealthy.dead`) is
  not asked: its completions fail too.
- **Slowness.** A deep health whose first token took longer than the instance's
  ``slow_after_s`` is Degraded "slow: ..." (`slow_detail`).
- **Address family.** A probe refused on 127.0.0.1 while the port listens on ``::1`` only
  (or the reverse) is a configuration error, said at once (`misbound`).
- **API key.** A server that answers 401 or 403 wants an API key we do not have, or
  refuses ours: a configuration error, said with the server's words (`refused_detail`).
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from .._status import InstanceState, InstanceStatus
from .exposure import Listener, covers, endpoint, parse_address
from .probe_report import Health, Unhealthy, Unreachable


@attrs.frozen
class Confirmation:
    """The one completion sent because ``/health`` failed on a server that was Running.

    Attributes:
        at: trio time it was sent (float seconds).
        pending: True while it is under way.
        ttft_s: its time to first token when it worked, float seconds; else None.
        why: why it failed, or None (it worked, or is pending).
    """

    at: float
    pending: bool = False
    ttft_s: float | None = None
    why: str | None = None

    @property
    def works(self) -> bool:
        """Whether the completion came back."""
        return not self.pending and self.why is None


def worth_confirming(health: Health) -> bool:
    """Whether a failed ``/health`` of a server that was Running calls for one completion:
    no answer (`Unreachable`: timeout, reset, refused) or an error answer (`Unhealthy`)
    other than a server that says it is dead (`Unhealthy.dead`)."""
    if isinstance(health, Unreachable):
        return True
    return isinstance(health, Unhealthy) and not health.dead


def health_failure(health: Health) -> str:
    """How ``/health`` failed, in a few words: ``"not answering (timeout)"``,
    ``"not answering (<transport error>)"`` or ``"failing (<why>)"``."""
    if isinstance(health, Unreachable):
        timed_out = "no complete reply within" in health.why
        return f"not answering ({'timeout' if timed_out else health.why})"
    why = health.why if isinstance(health, Unhealthy) else type(health).__name__.lower()
    return f"failing ({why})"


def confirmed_status(health: Health, confirmation: Confirmation | None) -> InstanceStatus | None:
    """The status of a server whose ``/health`` failed while a confirming completion is
    under way or came back: Degraded, saying both; None when there is nothing to confirm
    or the completion failed too (the ordinary mapping then applies)."""
    if confirmation is None or not worth_confirming(health):
        return None
    said = f"health endpoint {health_failure(health)}"
    if confirmation.pending:
        return InstanceStatus(InstanceState.DEGRADED, f"{said}; checking with one completion")
    if confirmation.works:
        return InstanceStatus(InstanceState.DEGRADED, f"{said}; completions work")
    return None


def slow_detail(ttft_s: float, slow_after_s: float) -> str | None:
    """``"slow: first token in 12.3 s (threshold 10.0 s)"`` when ``ttft_s`` (float seconds)
    is over ``slow_after_s``, else None."""
    if ttft_s <= slow_after_s:
        return None
    return f"slow: first token in {ttft_s:.1f} s (threshold {slow_after_s:.1f} s)"


def misbound(host: str, port: int, listeners: Iterable[Listener]) -> str | None:
    """The configuration error when ``port`` listens only on the other address family.

    ``listeners`` are the sockets listening on ``port``. When none of them takes
    connections to ``host`` (`exposure.covers`) but one is bound to an address of the other
    family, say so with the fix: ``listening on [::1]:8090, not 127.0.0.1:8090: set
    serve.host = "::1"``. None otherwise (nothing listens: still starting; or something
    does that covers ``host``).
    """
    on_port = [item for item in listeners if item.port == port]
    if any(covers(item.address, host) for item in on_port):
        return None
    host_ip = parse_address(host)
    if host_ip is None:
        return None
    other = sorted(
        item.address
        for item in on_port
        if (bound := parse_address(item.address)) is not None and bound.version != host_ip.version
    )
    if not other:
        return None
    where = ", ".join(endpoint(address, port) for address in dict.fromkeys(other))
    return (
        f"listening on {where}, not {endpoint(host, port)}: "
        f'set serve.host = "{parse_address(other[0])}"'
    )


def refused_detail(refused: str, *, key_sent: bool) -> str:
    """The configuration error of a server that refused our request (``refused``: ``"HTTP
    401: Invalid API Key"``, `probe_parse.refusal`): ``the server refuses our requests
    (HTTP 401: Invalid API Key): set serve.api_key_file``, or, when we sent a key, ``...:
    check the key in serve.api_key_file``."""
    fix = "check the key in serve.api_key_file" if key_sent else "set serve.api_key_file"
    return f"the server refuses our requests ({refused}): {fix}"
