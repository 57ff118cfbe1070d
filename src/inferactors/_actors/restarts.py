"""The supervisor's restarts (OTP restart types and intensity): every loaded instance's
restart budget and its pending restart.

`Restarts` keeps each instance's `RestartBudget` (``_policy/restart.py`` decides) and the
cancel scope of the restart that waits for it. The supervisor (``supervisor.py``, which
owns the instance table and is the only caller) hands it every event it handles: a
`StateChanged` refills or spends the budget; a `ProcessExited`, or an adopted instance's
`InstanceCrashed`, is decided. A decided restart waits in its own task, then goes through
the supervisor's inbox as an instance command like an operator's, and its outcome comes
back the same way (`RestartDone`): a failed restart is decided again as a crash. Every
decision is published as an event and shown as a note on the instance. Every method but
the waiting task is synchronous.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import assert_never

import attrs
import trio

from .._config.supervision import RestartPolicy
from .._errors import InferactorsError, InvalidState, PinMismatch, UnknownInstance
from .._events import (
    Event,
    GaveUp,
    InstanceCrashed,
    ProcessExited,
    RestartFailed,
    RestartScheduled,
    StateChanged,
    instance_of,
)
from .._policy.restart import GiveUp, NoRestart, RestartBudget
from .._policy.restart import Restart as RestartDecision
from .._status import InstanceState
from .._stop_reasons import Diagnosis, StopReason
from .messages import Restart, RestartDone, Route, call


@attrs.define(eq=False)
class Restarts:
    """The restart budgets and pending restarts of one supervisor's instances.

    Attributes:
        random: values in [0, 1) for the restart jitter.
        inbox: the supervisor's inbox, where a restart is routed once its delay is over.
        publish: passes an event to the supervisor's subscribers.
        show: shows a note on a loaded instance (its id, the note or None to clear it, the
            attempts so far, whether it gave up): on the status board and to its actor.
        adopted: whether a loaded instance is adopted.
        nursery: the supervisor's nursery, where a restart waits.
    """

    _random: Callable[[], float]
    _inbox: trio.MemorySendChannel[object]
    _publish: Callable[[Event], None]
    _show: Callable[[str, str | None, int, bool], None]
    _adopted: Callable[[str], bool]
    _nursery: Callable[[], trio.Nursery]
    _budgets: dict[str, RestartBudget] = attrs.Factory(dict)
    _pending: dict[str, trio.CancelScope] = attrs.Factory(dict)

    def add(self, iid: str, policy: RestartPolicy) -> None:
        """A full budget for the instance ``iid``, just loaded."""
        self._budgets[iid] = RestartBudget(policy)

    def forget(self, iid: str) -> None:
        """The instance ``iid`` is gone: its budget dropped, its pending restart cancelled."""
        self._budgets.pop(iid, None)
        self.cancel_pending(iid)

    def pending(self, iid: str) -> bool:
        """Whether a restart of ``iid`` is waiting."""
        return iid in self._pending

    def cancel_pending(self, iid: str) -> None:
        """Cancel the restart of ``iid`` that is waiting, if any."""
        scope = self._pending.pop(iid, None)
        if scope is not None:
            scope.cancel()

    def reset(self, iid: str) -> bool:
        """Refill the budget of ``iid`` (an operator's start or restart) and clear its
        note; False when ``iid`` has no budget (not loaded)."""
        budget = self._budgets.get(iid)
        if budget is None:
            return False
        self._budgets[iid] = budget.reset()
        self.note(iid, None)
        return True

    def on_event(self, event: Event) -> None:
        """An event the supervisor handles (published already): a `StateChanged` refills
        the budget if the instance was stable, then counts it running or not; an exit, or
        an adopted instance's crash, is decided."""
        iid = instance_of(event)
        budget = None if iid is None else self._budgets.get(iid)
        if iid is None or budget is None:
            return
        if isinstance(event, StateChanged):
            budget = budget.refill_if_stable(event.at)  # up until now: stable counts
            if event.new is InstanceState.RUNNING or event.serving:  # Degraded but serving
                budget = budget.note_running(event.at)
            else:
                budget = budget.note_not_running()
            self._budgets[iid] = budget
        elif isinstance(event, ProcessExited):
            exit_code, signal, diagnosis = event.exit_code, event.signal, event.diagnosis
            self._decide(
                event.instance_id, event.reason, exit_code, signal, diagnosis, event.last_lines
            )
        elif isinstance(event, InstanceCrashed) and self._adopted(event.instance_id):
            self._decide(event.instance_id, StopReason.ERROR, None, None)  # watch it again

    def on_done(self, done: RestartDone) -> None:
        """A routed restart's outcome: done, or moot (stopped, unloaded or held down
        meanwhile) clears the note; any other failure is published and decided as a
        crash."""
        self._pending.pop(done.instance_id, None)
        if done.instance_id not in self._budgets:
            return
        if done.error is None:
            self.note(done.instance_id, None)
            return
        if isinstance(done.error, InvalidState | UnknownInstance):
            self.note(done.instance_id, None)  # stopped or unloaded meanwhile
            return
        if isinstance(done.error, PinMismatch):  # held down by its actor: not a crash
            self.note(done.instance_id, None)
            return
        now = trio.current_time()
        self._publish(RestartFailed(done.instance_id, done.attempt, str(done.error), now))
        self._decide(done.instance_id, StopReason.CRASH, None, None)

    def note(self, iid: str, note: str | None, *, gave_up: bool = False) -> None:
        """Show ``note`` (None: clear it) on ``iid`` with its attempts so far; nothing
        when it has no budget (not loaded)."""
        budget = self._budgets.get(iid)
        if budget is None:
            return
        self._show(iid, note, budget.attempts, gave_up)

    def _decide(
        self,
        iid: str,
        reason: StopReason,
        exit_code: int | None,
        signal: int | None,
        diagnosis: Diagnosis | None = None,
        last_lines: tuple[str, ...] = (),
    ) -> None:
        """Apply the restart policy to an exit; the same start-up failure twice in a row
        (the same diagnosis, or the same status and last line) gives up at once
        (``config-error``, `RestartBudget.decide`)."""
        now, jitter = trio.current_time(), self._random()
        budget, decision = self._budgets[iid].decide(
            reason=reason,
            exit_code=exit_code,
            signal=signal,
            now=now,
            random=jitter,
            diagnosis=diagnosis,
            last_lines=last_lines,
        )
        self._budgets[iid] = budget
        match decision:
            case RestartDecision():
                self._publish(RestartScheduled(iid, decision.attempt, decision.delay_s, now))
                self.note(
                    iid, f"restarting in {decision.delay_s:.1f} s (attempt {decision.attempt})"
                )
                self._schedule(iid, decision)
            case GiveUp():
                self._publish(GaveUp(iid, decision.attempts, decision.why, now))
                self.note(iid, f"gave up: {decision.why}", gave_up=True)
            case NoRestart():
                self.note(iid, None)
            case _:
                assert_never(decision)

    def _schedule(self, iid: str, decision: RestartDecision) -> None:
        self.cancel_pending(iid)
        scope = trio.CancelScope()
        self._pending[iid] = scope
        self._nursery().start_soon(self._restart_later, iid, decision, scope)

    async def _restart_later(
        self, iid: str, decision: RestartDecision, scope: trio.CancelScope
    ) -> None:
        with scope:
            await trio.sleep(decision.delay_s)
            error: InferactorsError | None = None
            try:
                await call(self._inbox, partial(_routed_restart, iid, decision.attempt))
            except InferactorsError as failure:
                error = failure
            await self._inbox.send(RestartDone(iid, decision.attempt, error))


def _routed_restart(iid: str, attempt: int, reply: object) -> Route:
    return Route(iid, Restart(attempt, reply))  # type: ignore[arg-type]
