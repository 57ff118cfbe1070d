"""How a managed server is supervised: OTP's restart types and the restart policy, the
deep-health watchdog, and the per-instance `Supervision` whose unset fields take the
runtime's defaults (`ManagedConfig.restart`, ``readiness_timeout_s``, ...). Pure values with
``validate()`` methods; all durations are float seconds.
"""

from __future__ import annotations

import enum
import math

import attrs

from .._errors import InvalidConfig
from .field_checks import check_positive


class RestartType(enum.StrEnum):
    """OTP's child restart types: which exits of a managed server are restarted.

    ``permanent`` restarts after any exit it did not ask for, ``transient`` only after an
    abnormal one (a non-zero status, a signal, a readiness timeout or a health kill), and
    ``temporary`` never. An operator's stop is never restarted.
    """

    PERMANENT = "permanent"
    TRANSIENT = "transient"
    TEMPORARY = "temporary"


@attrs.frozen
class RestartPolicy:
    """How often and how fast a crashed managed server is restarted.

    Attributes:
        max_restarts: Restarts allowed before giving up (the budget), refilled once the
            server stays up for ``stable_after_s``.
        base_s: Delay before the first restart, seconds.
        cap_s: Longest delay, seconds.
        stable_after_s: Seconds a server must stay up before the budget is refilled.
        restart_type: OTP's permanent, transient or temporary.
        intensity: OTP's MaxR: at most this many restarts within ``period_s`` (a sliding
            window on trio's clock), whatever the budget says.
        period_s: OTP's MaxT, seconds.
        jitter: Fraction of each delay that may be taken off at random (0 to 1), so many
            servers that crash together do not restart in lockstep.
    """

    max_restarts: int = 5
    base_s: float = 2.0
    cap_s: float = 60.0
    stable_after_s: float = 60.0
    restart_type: RestartType = RestartType.PERMANENT
    intensity: int = 10
    period_s: float = 600.0
    jitter: float = 0.1

    def delay_s(self, n: int) -> float:
        """Seconds to wait before restart number ``n`` (0-based).

        ``min(base_s * 2**min(n, 16), cap_s)``; with base 2 s and cap 10 s that gives
        2, 4, 8, 10, 10.
        """
        return min(self.base_s * (1 << min(max(n, 0), 16)), self.cap_s)

    def validate(self, field: str = "restart") -> None:
        """Raise `InvalidConfig` naming ``field.<name>`` for a negative budget, a
        non-positive or non-finite base, a cap below the base or a negative stable time."""
        if self.max_restarts < 0:
            raise InvalidConfig(f"{field}.max_restarts must not be negative")
        check_positive(f"{field}.base_s", self.base_s)
        check_positive(f"{field}.cap_s", self.cap_s)
        if self.cap_s < self.base_s:
            raise InvalidConfig(f"{field}.cap_s must not be below {field}.base_s")
        if not (math.isfinite(self.stable_after_s) and self.stable_after_s >= 0):
            raise InvalidConfig(f"{field}.stable_after_s must be a finite number >= 0")
        if self.intensity < 0:
            raise InvalidConfig(f"{field}.intensity must not be negative")
        check_positive(f"{field}.period_s", self.period_s)
        if not 0.0 <= self.jitter <= 1.0:
            raise InvalidConfig(f"{field}.jitter must be between 0 and 1")


MIN_WATCHDOG_INTERVAL_S = 0.1
"""The shortest `Watchdog.interval_s` accepted, float seconds: each check is a completion
request, and a shorter interval would spend the server on our checks."""
MIN_WATCHDOG_TIMEOUT_S = 0.25
"""The shortest `Watchdog.timeout_s` accepted, float seconds: the lateness our own event
loop is allowed around a deadline (``LATE_S`` in ``_policy/lateness.py``); a shorter one
could be spent whole by our own loop and kill a healthy server in a loop."""


@attrs.frozen
class Watchdog:
    """The deep-health watchdog of one instance.

    Every ``interval_s`` seconds while the server is up, ask it for one token with a
    ``timeout_s`` deadline; after ``failures`` failures in a row report it unhealthy and,
    when managed, kill it (stop reason "health kill") so the restart policy takes over.
    """

    interval_s: float = 30.0
    timeout_s: float = 30.0
    failures: int = 3

    def validate(self, field: str = "watchdog") -> None:
        """Raise `InvalidConfig` naming the field for non-positive values and for an
        interval or a deadline too short to honour (`MIN_WATCHDOG_INTERVAL_S`,
        `MIN_WATCHDOG_TIMEOUT_S`)."""
        check_positive(f"{field}.interval_s", self.interval_s)
        check_positive(f"{field}.timeout_s", self.timeout_s)
        for name, value, least in (
            ("interval_s", self.interval_s, MIN_WATCHDOG_INTERVAL_S),
            ("timeout_s", self.timeout_s, MIN_WATCHDOG_TIMEOUT_S),
        ):
            if value < least:
                raise InvalidConfig(
                    f"{field}.{name} = {value:g} is too short to honour: a deep-health check "
                    f"cannot be judged in less than {least:g} s (a healthy server would be "
                    "killed over and over); use at least that"
                )
        if self.failures < 1:
            raise InvalidConfig(f"{field}.failures must be at least 1")


SLOW_AFTER_S = 10.0
"""Default `Supervision.slow_after_s`: a first token slower than 10 s is Degraded (slow)."""


@attrs.frozen
class Supervision:
    """Per-instance supervision settings; None fields take the runtime's defaults.

    Attributes:
        restart: the restart policy (default: ``ManagedConfig.restart``).
        readiness_timeout_s: seconds a started server may take to answer Up before it is
            killed and counted as a failure (default: ``ManagedConfig.readiness_timeout_s``).
        watchdog: the deep-health watchdog, off when None.
        deep_timeout_s: seconds one deep health may take (the probe and the one-token
            completion together): readiness's first token, a `deep_health` call, and the
            completion that checks a server whose ``/health`` failed (default:
            ``InferConfig.deep_timeout_s``). Separate from ``readiness_timeout_s``; the
            watchdog's checks use ``watchdog.timeout_s``.
        slow_after_s: a deep health whose first token takes longer than this many seconds
            leaves the server Degraded "slow: ..." until one is quick again (default
            `SLOW_AFTER_S`, 10 s).
    """

    restart: RestartPolicy | None = None
    readiness_timeout_s: float | None = None
    watchdog: Watchdog | None = None
    deep_timeout_s: float | None = None
    slow_after_s: float | None = None

    @property
    def slow_threshold_s(self) -> float:
        """``slow_after_s``, or `SLOW_AFTER_S` when unset."""
        return SLOW_AFTER_S if self.slow_after_s is None else self.slow_after_s

    def validate(self, field: str = "supervision") -> None:
        """Raise `InvalidConfig` naming the field for a bad value."""
        if self.restart is not None:
            self.restart.validate(f"{field}.restart")
        if self.readiness_timeout_s is not None:
            check_positive(f"{field}.readiness_timeout_s", self.readiness_timeout_s)
        if self.watchdog is not None:
            self.watchdog.validate(f"{field}.watchdog")
        for name in ("deep_timeout_s", "slow_after_s"):
            value = getattr(self, name)
            if value is not None:
                check_positive(f"{field}.{name}", value)
