"""`InferRuntime`, the facade; `serving.py` runs it (`open_runtime`, `serve_runtime`).

The facade holds no lock and no instance state: each method sends a command to the
supervisor actor (which routes instance commands to the instance's actor) and awaits the
reply, except the status queries (``runtime_status``), which read the status board the
actors publish to. Its loads (`admit`, `load`, `adopt`: planning and installing an actor)
are ``runtime_loading``, its output ``runtime_logs``, its ``running`` scope
``runtime_running``. A runtime drives one flavor in one mode (`InferConfig.managing`,
`InferConfig.adopted`) or every flavor in both modes (`InferConfig.all_flavors`: each load
names its mode, and is planned with its flavor's one-flavor config,
`InferConfig.for_instance`); all durations are float seconds.

Usage::

    async with open_runtime(config, node_id="laptop") as runtime:
        async with runtime.running(spec, timeout=120) as handle:
            print(runtime.status(handle))
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from functools import partial
from typing import NoReturn, TypeVar

import attrs
import trio

from .._config.config import ControlMode, InferConfig
from .._config.spec import InferenceSpec
from .._edges.bundle import Edges
from .._edges.capture import RunEvidence
from .._edges.orphan_report import ReapedOrphan
from .._errors import (
    InferactorsError,
    InvalidConfig,
    InvalidState,
    Unsupported,
)
from .._events import Event
from .._models.registry import ModelRegistry
from .._policy.admission import Plan
from .._policy.probe_report import CompletionResult, ServerReport
from .._stop_reasons import StopReason
from .capabilities import Capability, probe_capabilities
from .messages import (
    DeepHealth,
    GetHealth,
    InstanceCommand,
    PlanOf,
    ReplyTo,
    ResetRestarts,
    Route,
    Start,
    Stop,
    Unload,
    call,
)
from .runtime_loading import RuntimeLoading
from .runtime_logs import RuntimeLogs
from .runtime_running import RuntimeRunning
from .runtime_status import InstanceHandle as InstanceHandle
from .runtime_status import RuntimeStatus, id_of
from .status_board import StatusBoard

T = TypeVar("T")

DEFAULT_STOP_GRACE_S = 10.0
"""Grace between SIGTERM and SIGKILL when ``stop`` is not given one (llama-swap's default)."""

PROBING = 32
"""Loads (their admission) and adopted starts (their confirming probe) of one runtime that
run at once; more wait. A thousand at once would time out on their own CPU."""


class NetworkExposure(enum.StrEnum):
    """How far a runtime's servers may be reachable."""

    NONE = "none"
    LAN = "lan"
    EGRESS = "egress"


@attrs.define(eq=False)
class InferRuntime(RuntimeLoading, RuntimeLogs, RuntimeStatus, RuntimeRunning):
    """One flavor of inference server in one mode (adopted or managed), or every flavor in
    both (`InferConfig.all_flavors`).

    Get one from `open_runtime` or `serve_runtime`; it is valid while that runs.
    """

    config: InferConfig
    node_id: str
    _supervisor: trio.MemorySendChannel[object]
    _events: trio.MemorySendChannel[Event]
    registry: ModelRegistry | None  # where its models resolve (None when adopted)
    _edges: Edges
    reaped_orphans: tuple[ReapedOrphan, ...] = ()
    """What start-up found of servers an earlier life left behind in ``data_root``."""
    _capabilities: tuple[Capability, ...] = ()
    _board: StatusBoard = attrs.Factory(StatusBoard)  # the supervisor's: read by status()
    _probing: trio.CapacityLimiter = attrs.Factory(lambda: trio.CapacityLimiter(PROBING))
    _install_locks: dict[str, tuple[trio.Lock, int]] = attrs.Factory(dict)
    _installed: int = 0
    """How many instance actors this runtime made (`probe_schedule.probe_phase`)."""

    @property
    def id(self) -> str:
        """``infer.<x>`` when managed, ``infer.<x>.adopted`` when adopted, ``infer`` for
        every flavor."""
        return self.config.adapter_id

    @property
    def control_mode(self) -> ControlMode:
        """Managed or adopted: the mode of every instance of a one-flavor runtime, the
        default of a load in a runtime of every flavor (`mode_of` says an instance's)."""
        return self.config.mode

    @property
    def network_exposure(self) -> NetworkExposure:
        """NONE when it only manages (loopback enforced); LAN when it may adopt, whose
        server's bind we cannot choose."""
        only_managed = self.config.managed is not None and self.config.flavor is not None
        return NetworkExposure.NONE if only_managed else NetworkExposure.LAN

    def provides(self) -> tuple[Capability, ...]:
        """Capabilities found by the last `probe_capabilities`; empty before it runs."""
        return self._capabilities

    async def probe_capabilities(self) -> tuple[Capability, ...]:
        """Probe and remember what this runtime can offer."""
        self._capabilities = await probe_capabilities(self.config, self._edges.open_prober)
        return self._capabilities

    async def start(self, handle: InstanceHandle) -> None:
        """Start a managed server (returns once spawned), or confirm an adopted one answers
        (one probe, bounded by ``config.probe_timeout_s``). Concurrent starts share one outcome;
        a cancelled sole caller aborts it: stopped once spawned, Exited ``requested``, uncounted.

        Raises:
            InvalidState: already running, or stopped for exposure until reloaded.
            BackendError: port taken, program failed to start, adopted server not answering.
            UnknownInstance: no such instance.
        """
        await self._route(handle, Start)  # an adopted start's probe: `admission_limiter`

    async def stop(
        self,
        handle: InstanceHandle,
        grace_s: float = DEFAULT_STOP_GRACE_S,
        reason: StopReason = StopReason.REQUESTED,
    ) -> RunEvidence:
        """Stop a managed server: SIGTERM to its group, ``grace_s`` seconds, SIGKILL, reap.

        ``reason`` says why (``requested`` by an operator; the front door's ``ttl``,
        ``evicted``, ``reload``, ``shutdown``); none of them is restarted. Returns the
        run's evidence. A server that exited and is still wanted (its restart pending in
        backoff, or given up) is stopped at once: the pending restart is cancelled, the
        view says ``requested``, and the answer is its last exit's evidence. Raises
        `InvalidState` when it never ran or was stopped already, and `Unsupported` for an
        adopted server, which inferactors never signals.
        """
        grace = _grace(grace_s)
        return await self._route(handle, lambda reply: Stop(grace, reply, reason))

    async def restart(self, handle: InstanceHandle, grace_s: float = DEFAULT_STOP_GRACE_S) -> None:
        """Stop the server if it runs (a "not running" answer is fine), then start it.

        The restart budget is kept, as for a plain start.
        """
        try:
            await self.stop(handle, grace_s)
        except InvalidState:
            pass  # it was not running: starting it is all that is left to do
        await self.start(handle)

    async def reset_restarts(self, handle: InstanceHandle) -> None:
        """Refill the instance's restart budget (an operator's explicit start; item 56).

        Raises `UnknownInstance` when no such instance is loaded.
        """
        await call(self._supervisor, partial(ResetRestarts, id_of(handle)))

    async def unload(self, handle: InstanceHandle) -> None:
        """Forget the instance; a managed server is stopped (5 s grace) and its directory
        deleted. An adopted server is left untouched."""
        await call(self._supervisor, partial(Unload, id_of(handle)))

    async def console(self, handle: InstanceHandle) -> NoReturn:
        """Always raises `Unsupported`: inference servers have no console run."""
        raise Unsupported(f"{self.id} has no console run ({id_of(handle)})")

    async def health(self, handle: InstanceHandle) -> ServerReport:
        """One probe report of the instance's server: all its requests within one deadline of
        ``config.probe_timeout_s`` float seconds (what is late is unreachable or left empty)."""
        return await self._route(handle, GetHealth)

    async def deep_health(self, handle: InstanceHandle) -> CompletionResult:
        """One real token within ONE deadline, the instance's deep-health timeout (float s):
        sent even when ``/health`` hangs or fails, but never to make an adopted Ollama load a
        model or call a cloud host. A token is published (`DeepHealthPassed`, ``ttft_s``).

        Raises:
            DeepHealthTimeout: no answer in time.
            BackendError: loading, down (or an impostor holds it), or the completion failed.
        """
        return await self._route(handle, DeepHealth)

    async def spec_of(self, handle: InstanceHandle) -> InferenceSpec:
        """The spec the instance was loaded with."""
        return (await self._plan_of(handle)).spec

    async def endpoint(self, handle: InstanceHandle) -> str:
        """The server's base URL, for example ``http://127.0.0.1:8090``."""
        return (await self._plan_of(handle)).spec.base_url()

    async def api_key(self, handle: InstanceHandle) -> str | None:
        """The API key the instance's server wants (``serve.api_key_file``, read at
        admission; its probes send it), None when it wants none; for a request of our own to
        its server (a front door's grant, its ``/metrics``); never to be shown."""
        return (await self._plan_of(handle)).api_key

    async def served_model(self, handle: InstanceHandle) -> str | None:
        """The registry name when managed, the spec's model when adopted."""
        return (await self._plan_of(handle)).served_model

    async def stop_all(self, grace_s: float = DEFAULT_STOP_GRACE_S) -> None:
        """Stop every running managed server concurrently; nothing is unloaded (adopted
        servers are left alone)."""
        _grace(grace_s)
        if self.config.managed is None:
            return
        handles = await self.instances()
        async with trio.open_nursery() as nursery:
            for handle in handles:
                nursery.start_soon(self._stop_quietly, handle, grace_s)

    async def _stop_quietly(self, handle: InstanceHandle, grace_s: float) -> None:
        try:
            await self.stop(handle, grace_s)
        except InferactorsError:
            pass  # not running, or gone meanwhile: nothing to stop

    async def _plan_of(self, handle: InstanceHandle) -> Plan:
        return await call(self._supervisor, partial(PlanOf, id_of(handle)))

    async def _route(
        self, handle: InstanceHandle, make: Callable[[ReplyTo[T]], InstanceCommand]
    ) -> T:
        iid = id_of(handle)
        return await call(self._supervisor, lambda reply: Route(iid, make(reply)))


def _grace(grace_s: float) -> float:
    if not (math.isfinite(grace_s) and grace_s >= 0):
        raise InvalidConfig(f"grace_s must be a finite number of seconds >= 0, got {grace_s}")
    return grace_s
