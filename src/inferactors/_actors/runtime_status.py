"""`InferRuntime`'s status queries, a mixin: `RuntimeStatus`, and `InstanceHandle`.

A status is read from the runtime's status board (``status_board``), where each instance
actor publishes its whole view every time its loop handles a message; the supervisor
keeps the board with its instance table. So `RuntimeStatus.status` and
`RuntimeStatus.statuses` send no message, do no I/O and never wait for a busy actor: they
answer the last published view, which is at most one probe interval old (1 s while an
instance runs, less while it starts; an adopted server that is loaded but not started
shows what the load's probe found). ``uptime_s`` is computed when it
is read. A probe made now is `InferRuntime.health` (or ``deep_health``).
"""

from __future__ import annotations

from functools import partial

import attrs
import trio

from .._errors import InvalidConfig, UnknownInstance
from .._events import Event, StateChanged
from .._status import InstanceState, InstanceStatus, SupervisorStatus
from .messages import Subscribe, call
from .status_board import StatusBoard


@attrs.frozen
class InstanceHandle:
    """Names one loaded instance; returned by `InferRuntime.load` and `InferRuntime.adopt`."""

    runtime: str
    instance_id: str
    workload_id: str


class RuntimeStatus:
    """The status methods of `InferRuntime` (which provides ``id``, ``_supervisor`` and
    ``_board``)."""

    _supervisor: trio.MemorySendChannel[object]
    _board: StatusBoard

    @property
    def id(self) -> str:
        raise NotImplementedError  # `InferRuntime.id`

    async def status(self, handle: InstanceHandle) -> InstanceStatus:
        """The instance's last published status; never raises (an unknown handle is
        Unknown). No message, no I/O, no wait: it is the view the instance's actor published
        when it last handled anything, at most one probe interval old (1 s while running).
        For what a probe finds now, use `InferRuntime.health`."""
        try:
            iid = id_of(handle)
        except InvalidConfig as error:
            return InstanceStatus(InstanceState.UNKNOWN, str(error))
        return self._board.get(iid)

    async def statuses(self) -> dict[InstanceHandle, InstanceStatus]:
        """Every loaded instance's last published status at once, in load order; as
        `status`, no message and no I/O."""
        return {
            InstanceHandle(self.id, iid, role): status
            for iid, (role, status) in self._board.all().items()
        }

    async def supervisor_status(self) -> SupervisorStatus:
        """The supervisor's own state: whether its event loop is overloaded now (and since
        when, and why), so that deadlines give no verdict rather than judging servers
        (``_policy/lateness.py``). No message, no I/O; `SupervisorOverloaded` and
        `SupervisorCaughtUp` events say when it changes."""
        await trio.lowlevel.checkpoint()
        return self._board.supervisor

    async def instances(self) -> tuple[InstanceHandle, ...]:
        """Handles of every loaded instance, in load order (no message)."""
        return tuple(InstanceHandle(self.id, iid, role) for iid, role in self._board.ids().items())

    async def wait_state(self, handle: InstanceHandle, state: InstanceState) -> InstanceStatus:
        """Wait, without polling, until the instance reports ``state``; return that status.

        Put a deadline around it (``trio.fail_after``). Raises `UnknownInstance` if the
        instance is not (or no longer) loaded.
        """
        events = await self.subscribe()
        with events:
            while True:
                status = await self.status(handle)
                if status.state is state:
                    return status
                if status.state is InstanceState.UNKNOWN:
                    raise UnknownInstance(status.detail or id_of(handle))
                await _next_change(events, id_of(handle))

    async def subscribe(self, buffer: int = 256) -> trio.MemoryReceiveChannel[Event]:
        """A stream of every event from now on; a subscriber that falls ``buffer`` events
        behind loses the newest ones (the supervisor never waits for a subscriber)."""
        if buffer < 0:
            raise InvalidConfig(f"subscribe: buffer must not be negative, got {buffer}")
        return await call(self._supervisor, partial(Subscribe, buffer))


async def _next_change(events: trio.MemoryReceiveChannel[Event], iid: str) -> None:
    async for event in events:
        if isinstance(event, StateChanged) and event.instance_id == iid:
            return


def id_of(handle: object) -> str:
    """A caller's handle's instance id, refused in words if it is not one.

    Raises:
        InvalidConfig: ``handle`` is not an `InstanceHandle`.
    """
    if not isinstance(handle, InstanceHandle):
        raise InvalidConfig(f"handle: expected an InstanceHandle, got {type(handle).__name__}")
    return handle.instance_id
