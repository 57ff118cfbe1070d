"""`InferRuntime.running`: one instance for the length of an ``async with`` block, a mixin.

Load, start and wait for Running on the way in; stop and unload on the way out, whatever
ends the block (its end, an exception, a cancellation), shielded and bounded so that the
way out never hangs. Durations are float seconds (trio's clock).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import trio

from .._config.config import ControlMode
from .._config.field_checks import check_positive
from .._config.spec import InferenceSpec
from .._config.supervision import Supervision
from .._edges.capture import RunEvidence
from .._errors import InferactorsError, StartTimeout
from .._status import InstanceState, InstanceStatus
from .._stop_reasons import StopReason
from .runtime_status import InstanceHandle

DEFAULT_GRACE_S = 10.0
"""Grace between SIGTERM and SIGKILL when `running` is given none (as ``stop``)."""

LEAVE_MARGIN_S = 5.0
"""Time allowed beyond the grace for the whole way out (stop and unload)."""


class RuntimeRunning:
    """The `running` scope of `InferRuntime` (which provides the methods declared here)."""

    async def load(
        self,
        spec: InferenceSpec,
        supervision: Supervision | None = None,
        *,
        mode: ControlMode | None = None,
    ) -> InstanceHandle:
        raise NotImplementedError  # `InferRuntime.load`

    async def start(self, handle: InstanceHandle) -> None:
        raise NotImplementedError  # `InferRuntime.start`

    async def stop(
        self, handle: InstanceHandle, grace_s: float = ..., reason: StopReason = ...
    ) -> RunEvidence:
        raise NotImplementedError  # `InferRuntime.stop`

    async def unload(self, handle: InstanceHandle) -> None:
        raise NotImplementedError  # `InferRuntime.unload`

    async def wait_state(self, handle: InstanceHandle, state: InstanceState) -> InstanceStatus:
        raise NotImplementedError  # `RuntimeStatus.wait_state`

    def status(self, handle: InstanceHandle) -> InstanceStatus:
        raise NotImplementedError  # `RuntimeStatus.status`

    def mode_of(self, handle: InstanceHandle) -> ControlMode:
        raise NotImplementedError  # `RuntimeStatus.mode_of`

    @contextlib.asynccontextmanager
    async def running(
        self,
        spec: InferenceSpec,
        *,
        timeout: float,  # noqa: ASYNC109  (it bounds the way in only, not the block)
        supervision: Supervision | None = None,
        mode: ControlMode | None = None,
        grace_s: float = DEFAULT_GRACE_S,
    ) -> AsyncIterator[InstanceHandle]:
        """Load ``spec`` (in ``mode``, with ``supervision``, as `InferRuntime.load`), start
        it, and yield its handle once it is Running, within ``timeout`` seconds from the
        start; on leaving the block, stop its server (SIGTERM, ``grace_s`` seconds, SIGKILL;
        an adopted server is never signalled) and unload it::

            async with runtime.running(spec, timeout=120) as handle:
                print(runtime.status(handle))

        The way out is shielded from cancellation and bounded (``grace_s`` plus
        `LEAVE_MARGIN_S`): a cancelled or failing block still stops and unloads, and a
        failure on the way in (a refusal, a timeout) unloads what was loaded.

        Raises:
            InvalidConfig: ``timeout`` or ``grace_s`` is not a positive number of seconds,
                or as `InferRuntime.load`.
            StartTimeout: not Running within ``timeout`` (its last status in the message).
            InstanceDown: it gave up or is held down before it was Running.
            Whatever `InferRuntime.load` and `InferRuntime.start` raise, and whatever the
            block raises.
        """
        check_positive("timeout", timeout)
        check_positive("grace_s", grace_s)
        handle = await self.load(spec, supervision, mode=mode)
        try:
            await self._until_running(handle, timeout)
            yield handle
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(grace_s + LEAVE_MARGIN_S):
                await self._leave(handle, grace_s)

    async def _until_running(self, handle: InstanceHandle, within_s: float) -> None:
        with trio.move_on_after(within_s):
            await self.start(handle)
            await self.wait_state(handle, InstanceState.RUNNING)
            return
        status = self.status(handle)
        said = f": {status.detail}" if status.detail else ""
        raise StartTimeout(
            f"{handle.role} ({handle.instance_id}) was not running within {within_s:g} s; "
            f"it was {status.state}{said}"
        )

    async def _leave(self, handle: InstanceHandle, grace_s: float) -> None:
        """Stop a managed server with ``grace_s`` (none running: nothing to stop), then
        unload the instance (gone already: nothing to unload)."""
        try:
            if self.mode_of(handle) is ControlMode.MANAGED:
                await self.stop(handle, grace_s)
        except InferactorsError:
            pass  # not running (never started, exited, stopping) or gone: nothing to stop
        try:
            await self.unload(handle)
        except InferactorsError:
            pass  # unloaded meanwhile, or the runtime closed: nothing left to unload
