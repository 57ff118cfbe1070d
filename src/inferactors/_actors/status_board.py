"""The status board: every instance's last published status, read without a message.

Each instance actor owns one `StatusSlot` and writes its whole view into it whenever the
loop has handled a message (a command, a probe's result, an exit: every ``report``), a
plain attribute assignment, so the board is never older than the actor's own view. The
supervisor attaches the slot to the runtime's `StatusBoard` when it accepts the load and
detaches it at the unload (or when the actor dies), in the same synchronous step that
changes its instance table, so the board and the table never disagree. The supervisor
also writes its own word (``supervision``, ``restarts``) straight into the slot when it
decides, before the actor hears of it, so a reader woken by `RestartScheduled` or
`GaveUp` already sees it.

Reading (`StatusBoard.get`, `StatusBoard.all`) takes no lock and sends no message: the
actors and the readers share one trio thread. ``uptime_s`` is computed at read time from
the trio clock, so it moves on between publications.
"""

from __future__ import annotations

import attrs
import trio

from .._config.config import ControlMode
from .._errors import BackendError, UnknownInstance
from .._policy.restart import CONFIG_ERROR
from .._status import InstanceState, InstanceStatus, SupervisorStatus

_GAVE_UP_CONFIG = f"gave up: {CONFIG_ERROR}"


@attrs.define(eq=False)
class StatusSlot:
    """One instance's place on the board; its actor writes it, anyone reads it."""

    role: str = ""
    """The instance's workload id (its spec's role), for the handles of `StatusBoard.all`."""
    mode: ControlMode = ControlMode.MANAGED
    """Whether the instance is managed or adopted (a runtime of every flavor holds both)."""
    status: InstanceStatus = InstanceStatus(InstanceState.LOADED)  # noqa: RUF009  (frozen)
    at: float = 0.0
    """Trio time of the last publication that carried an uptime."""
    supervision: str | None = None
    restarts: int = 0
    since: float | None = None
    """Trio time of the first publication of the state shown now (its ``since``)."""

    def publish(self, status: InstanceStatus) -> None:
        """Record the actor's view now (no event: `Mailbox.report` emits those); a new
        state (or the first publication) dates ``since``."""
        if self.since is None or status.state is not self.status.state:
            self.since = trio.current_time()
        self.status = status
        if status.uptime_s is not None:
            self.at = trio.current_time()

    def annotate(self, supervision: str | None, restarts: int) -> None:
        """Record the supervisor's word, which is never older than the actor's copy."""
        self.supervision, self.restarts = supervision, restarts

    def read(self, now: float) -> InstanceStatus:
        """The status as of trio time ``now``: live uptime, the supervisor's word."""
        status = self.status
        uptime = status.uptime_s
        if uptime is not None:
            uptime += now - self.at
        stop_reason = status.stop_reason
        if status.state is InstanceState.EXITED and (self.supervision or "").startswith(
            _GAVE_UP_CONFIG
        ):
            stop_reason = CONFIG_ERROR  # the same failure twice: fix it (as the actor says)
        return attrs.evolve(
            status,
            uptime_s=uptime,
            supervision=self.supervision,
            restarts=self.restarts,
            stop_reason=stop_reason,
            since=self.since,
        )


@attrs.define(eq=False)
class StatusBoard:
    """Every loaded instance's slot, by instance id, in load order."""

    _slots: dict[str, StatusSlot] = attrs.Factory(dict)
    _closed: bool = False
    supervisor: SupervisorStatus = SupervisorStatus()  # noqa: RUF009  (frozen)
    """The supervisor's own state (overloaded or not), written by the supervisor."""

    def attach(self, instance_id: str, slot: StatusSlot) -> None:
        """Show ``slot`` under ``instance_id`` (the supervisor accepted its load)."""
        self._slots[instance_id] = slot

    def detach(self, instance_id: str) -> None:
        """Forget ``instance_id`` (unloaded, or its actor died); its slot is left to it."""
        self._slots.pop(instance_id, None)

    def annotate(self, instance_id: str, supervision: str | None, restarts: int) -> None:
        """Record the supervisor's word on ``instance_id``, if it is loaded."""
        slot = self._slots.get(instance_id)
        if slot is not None:
            slot.annotate(supervision, restarts)

    def close(self) -> None:
        """The runtime ended: every read is Unknown from now on."""
        self._closed = True
        self._slots.clear()

    def get(self, instance_id: str) -> InstanceStatus:
        """The instance's last published status; Unknown (saying why) when not loaded."""
        slot = self._slots.get(instance_id)
        if slot is None:
            return self._unknown(instance_id)
        return slot.read(trio.current_time())

    def all(self) -> dict[str, tuple[str, InstanceStatus]]:
        """Every loaded instance's role and status, by instance id, in load order."""
        now = trio.current_time()
        return {iid: (slot.role, slot.read(now)) for iid, slot in self._slots.items()}

    def mode_of(self, instance_id: str) -> ControlMode:
        """The control mode of loaded instance ``instance_id``.

        Raises:
            UnknownInstance: it is not loaded (or the runtime is closed).
        """
        slot = self._slots.get(instance_id)
        if slot is None:
            raise UnknownInstance(self._unknown(instance_id).detail or instance_id)
        return slot.mode

    def ids(self) -> dict[str, str]:
        """Every loaded instance's role, by instance id, in load order."""
        return {iid: slot.role for iid, slot in self._slots.items()}

    def _unknown(self, instance_id: str) -> InstanceStatus:
        if self._closed:
            why: Exception = BackendError("the runtime is closed")
        else:
            why = UnknownInstance(f"no instance {instance_id} is loaded")
        return InstanceStatus(InstanceState.UNKNOWN, str(why))
