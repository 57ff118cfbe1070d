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

from .._config.config import ControlMode
from .._errors import InstanceDown, InvalidConfig, UnknownInstance
from .._events import Event, EventsLost, GaveUp, StateChanged
from .._policy.fleet_exit import HELD_DOWN, down_reason
from .._status import InstanceState, InstanceStatus, SupervisorStatus
from .messages import Subscribe, call
from .status_board import StatusBoard


@attrs.frozen
class InstanceHandle:
    """Names one loaded instance; returned by `InferRuntime.load` and `InferRuntime.adopt`.

    Attributes:
        runtime: the id of the runtime that loaded it (`InferRuntime.id`).
        instance_id: ``"{role}-{8 hex}-{node_id}"`` (``_config/ids.py``).
        workload_id: its spec's role (also `role`).
    """

    runtime: str
    instance_id: str
    workload_id: str

    @property
    def role(self) -> str:
        """Its spec's role (``"chat"``): the name a person reads."""
        return self.workload_id


class RuntimeStatus:
    """The status methods of `InferRuntime` (which provides ``id``, ``_supervisor`` and
    ``_board``)."""

    _supervisor: trio.MemorySendChannel[object]
    _board: StatusBoard

    @property
    def id(self) -> str:
        raise NotImplementedError  # `InferRuntime.id`

    def status(self, handle: InstanceHandle) -> InstanceStatus:
        """The instance's last published status; never raises (an unknown handle is
        Unknown). No message, no I/O, no wait: it is the view the instance's actor published
        when it last handled anything, at most one probe interval old (1 s while running).
        For what a probe finds now, use `InferRuntime.health`."""
        try:
            iid = id_of(handle)
        except InvalidConfig as error:
            return InstanceStatus(InstanceState.UNKNOWN, str(error))
        return self._board.get(iid)

    def statuses(self) -> dict[InstanceHandle, InstanceStatus]:
        """Every loaded instance's last published status at once, by handle, in load
        order; as `status`, no message and no I/O."""
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

    def mode_of(self, handle: InstanceHandle) -> ControlMode:
        """Whether the instance is managed or adopted (no message, no I/O).

        Raises:
            UnknownInstance: it is not loaded.
            InvalidConfig: ``handle`` is not an `InstanceHandle`.
        """
        return self._board.mode_of(id_of(handle))

    async def instances(self) -> tuple[InstanceHandle, ...]:
        """Handles of every loaded instance, in load order (no message)."""
        return tuple(InstanceHandle(self.id, iid, role) for iid, role in self._board.ids().items())

    async def wait_state(self, handle: InstanceHandle, state: InstanceState) -> InstanceStatus:
        """Wait, without polling, until the instance reports ``state``; return that status.

        Put a deadline around it (``trio.fail_after``): a server may take long to load.
        It wakes on the instance's `StateChanged` and `GaveUp` events (and on
        `EventsLost`) and reads the status board each time.

        Raises:
            InstanceDown: at once, when the instance can no longer get there without an
                operator: it is Exited and its supervisor gave up (a crash loop, the same
                start-up failure twice: ``config-error``) or it is held down after a stop
                for exposure or a tampered model. ``why`` says which.
            UnknownInstance: the instance is not (or no longer) loaded.
        """
        iid = id_of(handle)
        events = await self.subscribe()
        with events:
            while True:
                status = self.status(handle)
                if status.state is state:
                    return status
                if status.state is InstanceState.UNKNOWN:
                    raise UnknownInstance(status.detail or iid)
                why = down_for_good(status)
                if why is not None:
                    raise InstanceDown(f"{iid} will not become {state}: {why}", why)
                await _next_news(events, iid)

    async def subscribe(self, buffer: int = 256) -> trio.MemoryReceiveChannel[Event]:
        """A stream of every event from now on, until the runtime ends (the stream then
        ends) or the caller closes it.

        The supervisor never waits for a subscriber: one whose ``buffer`` is full loses
        the newest events, and is told so by an `EventsLost` event (how many were lost) in
        its stream, where they would have been, as soon as there is room again.

        Raises:
            InvalidConfig: ``buffer`` is negative.
        """
        if buffer < 0:
            raise InvalidConfig(f"subscribe: buffer must not be negative, got {buffer}")
        return await call(self._supervisor, partial(Subscribe, buffer))


def down_for_good(status: InstanceStatus) -> str | None:
    """Why an instance with ``status`` stays down until an operator acts (reload, start
    after a fix), or None while it may still move on its own: it is Exited and its
    supervisor gave up, or it is held down after a stop for exposure or tampering. A stale
    "gave up" note on an instance started again (starting, running) does not count."""
    if status.state is not InstanceState.EXITED:
        return None
    gave_up = (status.supervision or "").startswith("gave up")
    if gave_up or status.stop_reason in HELD_DOWN:
        return down_reason(status)
    return None


async def _next_news(events: trio.MemoryReceiveChannel[Event], iid: str) -> None:
    """Until ``iid``'s state changes or its supervisor gives up on it (the give-up is
    decided after the exit's state change), or a marker says events were lost."""
    async for event in events:
        if isinstance(event, EventsLost):
            return
        if isinstance(event, StateChanged | GaveUp) and event.instance_id == iid:
            return


def id_of(handle: object) -> str:
    """A caller's handle's instance id, refused in words if it is not one.

    Raises:
        InvalidConfig: ``handle`` is not an `InstanceHandle`.
    """
    if not isinstance(handle, InstanceHandle):
        raise InvalidConfig(f"handle: expected an InstanceHandle, got {type(handle).__name__}")
    return handle.instance_id
