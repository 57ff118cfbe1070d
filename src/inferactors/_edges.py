"""The I/O edges of a runtime, in one swappable bundle.

Every piece of the outside world the actor tree touches goes through one of these: the
HTTP probe client, the socket tables and exposure connects, the process spawner, the
occupied-port check, and the random source of restart jitter. Tests swap any of them
(`inferactors.testing.FakeProcesses` with trio's ``MockClock``, ``httpx.MockTransport``
behind `http_prober_factory`), and the supervision logic cannot tell.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

import attrs
import httpx

from ._netcheck import port_in_use
from ._netscan import NetScanner, SystemNetScanner
from ._plan import ProberFactory
from ._probe import ProbeClient, Prober
from ._process import OpenProcess, open_child_process

PortCheck = Callable[[str, int], Awaitable[bool]]
"""``await check(host, port)``: whether something accepts TCP connections there."""


def http_prober_factory(transport: httpx.AsyncBaseTransport | None = None) -> ProberFactory:
    """The HTTP edge: `ProbeClient` over ``transport`` (httpx's default when None)."""

    def open_prober(base_url: str, timeout_s: float) -> Prober:
        return ProbeClient.open(base_url, timeout_s=timeout_s, transport=transport)

    return open_prober


@attrs.frozen
class Edges:
    """The I/O edges of one runtime; the defaults are the real ones.

    Attributes:
        open_prober: opens an HTTP prober for a base URL and a timeout in seconds.
        net: socket tables, listener owners and exposure connects.
        open_process: starts a server process (own session, piped output).
        port_in_use: the TCP-connect check of an occupied port.
        random: values in [0, 1) for restart jitter.
    """

    open_prober: ProberFactory = attrs.field(factory=http_prober_factory)
    net: NetScanner = attrs.field(factory=SystemNetScanner)
    open_process: OpenProcess = open_child_process
    port_in_use: PortCheck = port_in_use
    random: Callable[[], float] = random.random
