"""Running a runtime: `open_runtime` for ``async with``, `serve_runtime` for a host's nursery.

The supervisor actor runs in a cancel scope shielded from outside cancellation, so that
when the host cancels, the managed servers are still stopped through ordinary messages —
SIGTERM to each process group, a grace period, SIGKILL — and only then is the supervisor
itself cancelled (tractor's teardown rule: graceful request, bounded wait, hard kill).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import attrs
import trio

from .._config.config import InferConfig
from .._config.ids import check_node_id
from .._edges.bundle import Edges
from .._edges.loop_lag import measure_loop_lag
from .._edges.orphan_report import ReapedOrphan
from .._edges.orphans import reap_orphans
from .._edges.probe import ProberFactory
from .._edges.state_lock import StateLock, acquire_state_lock
from .._models.registry import ModelRegistry
from .registry_open import open_registry
from .runtime import DEFAULT_STOP_GRACE_S, InferRuntime
from .supervisor import Supervisor

CLEANUP_MARGIN_S = 5.0
"""Time allowed beyond the stop grace for the whole shutdown, so it can never hang."""


@asynccontextmanager
async def open_runtime(
    config: InferConfig,
    *,
    node_id: str = "local",
    edges: Edges | None = None,
    open_prober: ProberFactory | None = None,
    stop_grace_s: float = DEFAULT_STOP_GRACE_S,
) -> AsyncIterator[InferRuntime]:
    """Run a runtime for the duration of an ``async with`` block.

    Start-up checks the config and ``node_id``, takes the lock of a managed runtime's
    ``data_root`` (one state directory, one supervisor: another process holding it is
    refused at once; runtimes of one process share it; released on exit), opens the model
    registry, and reaps the servers an earlier life left in ``data_root``
    (`InferRuntime.reaped_orphans`). On exit every running managed server is stopped
    (SIGTERM, ``stop_grace_s`` seconds, SIGKILL), even when the block raised or was
    cancelled; adopted servers are left alone. ``edges`` swaps the I/O edges (`Edges`);
    ``open_prober`` alone replaces just the HTTP edge. The event loop's stalls are measured
    from the start unless ``edges.measure_loop_lag`` is False (`loop_lag.measure_loop_lag`).

    Raises:
        InvalidConfig: the config or ``node_id`` is malformed, or the registry file is.
        InvalidState: another supervisor process holds ``data_root``; the message names
            its pid.
        BackendError: ``data_root`` or its lock file cannot be made.
        Whatever the block raises, unwrapped (not inside an exception group).
    """
    config.validate()
    check_node_id(node_id)
    lock = await _lock_state(config)
    try:
        chosen = _edges(edges, open_prober)
        if chosen.measure_loop_lag:
            measure_loop_lag()  # a deadline our own loop ate gives no verdict
        runtime, supervisor = await _prepare(config, node_id, chosen)
        scope = trio.CancelScope(shield=True)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(_shielded, scope, supervisor.serve)
                try:
                    yield runtime
                finally:
                    with trio.move_on_after(stop_grace_s + CLEANUP_MARGIN_S, shield=True):
                        await runtime.stop_all(stop_grace_s)
                    scope.cancel()
        except BaseExceptionGroup as group:
            raise _single(group) from None
    finally:
        if lock is not None:
            lock.release()


async def serve_runtime(
    config: InferConfig,
    *,
    node_id: str = "local",
    edges: Edges | None = None,
    stop_grace_s: float = DEFAULT_STOP_GRACE_S,
    task_status: trio.TaskStatus[InferRuntime] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run a runtime until cancelled, for hosts that own a nursery::

        runtime = await nursery.start(serve_runtime, config)

    ``task_status.started`` receives the `InferRuntime` once it accepts commands. When
    cancelled, each running managed server gets SIGTERM and, after ``stop_grace_s``
    seconds, SIGKILL. Raises what `open_runtime` raises.
    """
    async with open_runtime(
        config, node_id=node_id, edges=edges, stop_grace_s=stop_grace_s
    ) as runtime:
        task_status.started(runtime)
        await trio.sleep_forever()


async def _lock_state(config: InferConfig) -> StateLock | None:
    """Lock ``data_root``, made private when it is new: 0700, or 0711 when servers run as
    another user (they must reach their own 0700 directories in it; nothing lists it)."""
    if config.managed is None:
        return None
    mode = 0o711 if config.managed.run_as else 0o700
    return await trio.to_thread.run_sync(acquire_state_lock, config.managed.data_root, mode)


async def _prepare(
    config: InferConfig, node_id: str, edges: Edges
) -> tuple[InferRuntime, Supervisor]:
    config.validate()
    check_node_id(node_id)
    registry: ModelRegistry | None = None
    reaped: tuple[ReapedOrphan, ...] = ()
    if config.managed is not None:
        registry = await trio.to_thread.run_sync(open_registry, config.managed)
        data_root = config.managed.data_root
        reaped = tuple(await trio.to_thread.run_sync(reap_orphans, data_root))
    supervisor = Supervisor.create(random=edges.random)
    runtime = InferRuntime(
        config,
        node_id,
        supervisor.inbox,
        supervisor.events,
        registry,
        edges,
        reaped,
        board=supervisor.board,
    )
    return runtime, supervisor


async def _shielded(
    scope: trio.CancelScope,
    serve: Callable[..., Awaitable[None]],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    with scope:
        await serve(task_status=task_status)


def _edges(edges: Edges | None, open_prober: ProberFactory | None) -> Edges:
    chosen = edges or Edges()
    return chosen if open_prober is None else attrs.evolve(chosen, open_prober=open_prober)


def _single(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception inside (nested) single-member groups, else the group itself."""
    inner: BaseException = group
    while isinstance(inner, BaseExceptionGroup) and len(inner.exceptions) == 1:
        inner = inner.exceptions[0]
    return inner
