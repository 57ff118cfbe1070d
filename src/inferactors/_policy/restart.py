"""Restart decisions (pure; no I/O, no clock: the caller passes ``now``).

Two limits apply together, and the first one spent gives up:

* the reference's **budget**:
  ``max_restarts`` restarts, with delay ``min(base_s * 2**n, cap_s)`` before restart ``n``
  (0-based), refilled only after the server stayed up for ``stable_after_s``; a plain start
  keeps it, ``reset_restarts`` refills it;
* OTP's **restart intensity**: at most ``intensity`` restarts within any ``period_s``
  seconds, counted in a sliding window whose edge is included (a restart exactly
  ``period_s`` old still counts, as OTP's supervisor counts it).

Which exits are restarted at all follows OTP's restart type (permanent, transient,
temporary); an operator's stop, an unload and an exposure stop never are.

A **configuration error** is no crash loop: a start-up failure whose output was
diagnosed (reason ``start-up failure``) with the same fault kind as the exit just before it
gives up at once, ``config-error: <kind>: <the server's line>``; restarting would only say
it again. The first such failure is restarted as usual (a port taken for a moment frees
itself), and any other exit in between clears the memory. A fault seen while the server
lived (`AT_ONCE`: listening on the wrong address family, refusing our requests for want of
an API key) is a configuration error the first time: ``config-error: <our words>``.
A start-up failure no rule classifies (a process never seen up that exited on its own, not
killed by a signal) is one too when it comes twice in a row with the same exit status and
the same last line of output:
``config-error: the same failure twice at start: exit status 1: <the server's last line>``.

Every give-up says how the server last ended: ``"; last: <kind>: <line>"`` when its output
was diagnosed, else ``"; last: exit status 1: <its last line>"`` (`LastExit`), when
anything is known of it (an adopted server that stopped answering has no exit status).

Jitter takes a random fraction (at most ``jitter``) off each delay; the random source is
the caller's, so tests pass a constant.
"""

from __future__ import annotations

import attrs

from .._config.supervision import RestartPolicy, RestartType
from .._stop_reasons import Diagnosis, FaultKind, StopReason

_NEVER_RESTARTED = frozenset(
    {
        StopReason.REQUESTED,
        StopReason.TTL,
        StopReason.EVICTED,
        StopReason.RELOAD,
        StopReason.UNLOAD,
        StopReason.SHUTDOWN,
        StopReason.EXPOSURE,
        StopReason.TAMPERED,
    }
)
_ALWAYS_ABNORMAL = frozenset(
    {
        StopReason.READINESS_TIMEOUT,
        StopReason.HEALTH_KILL,
        StopReason.ERROR,
        StopReason.STARTUP_FAILURE,
    }
)
CONFIG_ERROR = "config-error"
"""How `GiveUp.why` starts when the same start-up failure came twice in a row."""

AT_ONCE = frozenset({FaultKind.WRONG_ADDRESS_FAMILY, FaultKind.REFUSES_REQUESTS})
"""Start-up faults that give up the first time: seen in what the living server does, they
are its configuration, and a restart would only meet them again."""


@attrs.frozen
class LastExit:
    """How a process ended, in its own words: its exit status or signal and its last
    non-empty output line (None when it printed nothing)."""

    exit_code: int | None
    signal: int | None
    line: str | None

    def describe(self) -> str:
        """``"exit status 1: error: something is wrong"``, ``"signal 9"``, ...; the line
        left out when there was none."""
        if self.signal is not None:
            status = f"signal {self.signal}"
        elif self.exit_code is not None:
            status = f"exit status {self.exit_code}"
        else:
            status = "no exit status"
        return status if self.line is None else f"{status}: {self.line}"


@attrs.frozen
class Restart:
    """Restart after ``delay_s`` seconds; this is restart number ``attempt`` (1-based)."""

    attempt: int
    delay_s: float


@attrs.frozen
class GiveUp:
    """Stop restarting: ``attempts`` restarts were made; ``why`` says which limit was hit."""

    attempts: int
    why: str


@attrs.frozen
class NoRestart:
    """This exit is not restarted (an operator stop, or the restart type says so)."""

    why: str


Decision = Restart | GiveUp | NoRestart


def is_abnormal(reason: StopReason, exit_code: int | None, signal: int | None) -> bool:
    """An exit OTP would call abnormal: a signal, a non-zero status, or our own kill."""
    if reason in _ALWAYS_ABNORMAL:
        return True
    return signal is not None or (exit_code is not None and exit_code != 0)


@attrs.frozen
class RestartBudget:
    """The restart state of one instance; every method returns a new value.

    Attributes:
        policy: the limits.
        attempts: restarts since the budget was last refilled.
        window: times (trio seconds) of the restarts still inside the intensity window.
        running_since: when the current process was last seen up, else None.
        last_fault: the diagnosis of the last exit when it was a start-up failure, else None.
        last_start_crash: the last exit when it was an unclassified crash of a process
            never seen up, else None.
        seen_up: whether the current process was seen up (since the last exit).
    """

    policy: RestartPolicy
    attempts: int = 0
    window: tuple[float, ...] = ()
    running_since: float | None = None
    last_fault: Diagnosis | None = None
    last_start_crash: LastExit | None = None
    seen_up: bool = False

    def decide(
        self,
        *,
        reason: StopReason,
        exit_code: int | None,
        signal: int | None,
        now: float,
        random: float = 0.0,
        diagnosis: Diagnosis | None = None,
        last_lines: tuple[str, ...] = (),
    ) -> tuple[RestartBudget, Decision]:
        """Decide what to do about an exit observed at ``now``.

        ``random`` is a number in [0, 1) from the caller's random source, used for jitter.
        ``diagnosis`` is what the server's output said (`ProcessExited.diagnosis`): with
        reason ``start-up failure`` and the same kind as the previous exit's, or a kind in
        `AT_ONCE`, the answer is `GiveUp` with ``why`` ``"config-error: <kind>: <line>"``
        (`Diagnosis.describe`). ``last_lines`` are the server's last output lines
        (`ProcessExited.last_lines`): an undiagnosed crash of a process never seen up, with
        the same status and last line as the exit before it, gives up at once too
        (``"config-error: the same failure twice at start: <LastExit>"``). On any other
        give-up ``why`` ends with ``"; last: <kind>: <line>"``, or ``"; last: <LastExit>"``
        when the output was not diagnosed.
        """
        ended = LastExit(exit_code, signal, last_lines[-1] if last_lines else None)
        budget = self._refilled_if_stable(now)._without_running()
        previous, previous_crash = budget.last_fault, budget.last_start_crash
        fault = diagnosis if reason is StopReason.STARTUP_FAILURE else None
        start_crash = _start_crash(reason, diagnosis, ended, seen_up=budget.seen_up)
        budget = attrs.evolve(budget, last_fault=fault, last_start_crash=start_crash, seen_up=False)
        again = previous is not None and fault is not None and previous.kind is fault.kind
        if fault is not None and (again or fault.kind in AT_ONCE):
            return budget, GiveUp(budget.attempts, f"{CONFIG_ERROR}: {fault.describe()}")
        if start_crash is not None and start_crash == previous_crash:
            why = f"{CONFIG_ERROR}: the same failure twice at start: {start_crash.describe()}"
            return budget, GiveUp(budget.attempts, why)
        skip = budget._skip_reason(reason, exit_code, signal)
        if skip is not None:
            return budget, NoRestart(skip)
        # a restart exactly period_s old still counts, as in OTP's supervisor (R >= Now - Period)
        window = tuple(t for t in budget.window if now - t <= self.policy.period_s)
        budget = attrs.evolve(budget, window=window)
        limit = budget._limit_reached()
        if limit is not None:
            last = diagnosis.describe() if diagnosis is not None else ended.describe()
            known = diagnosis is not None or ended != LastExit(None, None, None)
            return budget, GiveUp(budget.attempts, f"{limit}; last: {last}" if known else limit)
        delay = self.policy.delay_s(budget.attempts) * (1.0 - self.policy.jitter * random)
        after = attrs.evolve(budget, attempts=budget.attempts + 1, window=(*window, now))
        return after, Restart(after.attempts, delay)

    def note_running(self, now: float) -> RestartBudget:
        """The server was seen up at ``now`` (kept if it already was): Running, or Degraded
        while its completions work (`InstanceStatus.serving`)."""
        if self.running_since is not None:
            return self
        return attrs.evolve(self, running_since=now, seen_up=True)

    def note_not_running(self) -> RestartBudget:
        """The server is no longer up."""
        return self._without_running()

    def refill_if_stable(self, now: float) -> RestartBudget:
        """Refill the budget if the server has been up for ``stable_after_s`` (item 57)."""
        return self._refilled_if_stable(now)

    def reset(self) -> RestartBudget:
        """Refill the budget, clear the window and forget the last start-up failure
        (``reset_restarts``; item 56)."""
        return attrs.evolve(self, attempts=0, window=(), last_fault=None, last_start_crash=None)

    def _refilled_if_stable(self, now: float) -> RestartBudget:
        since = self.running_since
        if since is not None and now - since >= self.policy.stable_after_s:
            return attrs.evolve(self, attempts=0)
        return self

    def _without_running(self) -> RestartBudget:
        return attrs.evolve(self, running_since=None)

    def _skip_reason(
        self, reason: StopReason, exit_code: int | None, signal: int | None
    ) -> str | None:
        if reason in _NEVER_RESTARTED:
            return f"stopped ({reason.value}); not a fault"
        kind = self.policy.restart_type
        if kind is RestartType.TEMPORARY:
            return "restart type is temporary"
        if kind is RestartType.TRANSIENT and not is_abnormal(reason, exit_code, signal):
            return "restart type is transient and the exit was normal"
        return None

    def _limit_reached(self) -> str | None:
        policy = self.policy
        if self.attempts >= policy.max_restarts:
            return f"restart budget spent ({self.attempts} of {policy.max_restarts})"
        if len(self.window) >= policy.intensity:
            return (
                f"restart intensity exceeded ({len(self.window)} restarts within "
                f"{policy.period_s:g} s)"
            )
        return None


def _start_crash(
    reason: StopReason, diagnosis: Diagnosis | None, ended: LastExit, *, seen_up: bool
) -> LastExit | None:
    """``ended`` when it is a crash no rule classified, of a process never seen up, that
    exited on its own (a signal comes from outside: the OOM killer, an operator) and said
    something (a last line to compare); else None."""
    if reason is not StopReason.CRASH or diagnosis is not None or seen_up:
        return None
    return ended if ended.line is not None and ended.signal is None else None
