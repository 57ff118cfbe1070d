"""Admission's probes of a server (an adopted one, the Ollama daemon, an adopted start that
could not reuse the load's report): at most `ADMISSION_PROBES` of one trio run in flight at
once (`admission_limiter`), and made again, each later than the one before, while our own
late loop leaves a probe without a verdict (`probe_for_verdict`): a late probe is neither a
refusal nor a pass. Split from ``admission``; the instance actor's adopted start
(``instance/probing.py``) probes through it too."""

from __future__ import annotations

import trio

from .._edges.probe import ProberFactory, probe_once
from .._flavor import InferFlavor
from .._policy.lateness import LATE_S
from .._policy.probe_report import ServerReport

ADMISSION_RECHECKS = 3
"""Probes admission makes again while its probe gives no verdict because our own loop ran
late (``_policy/lateness.py``): a late probe is neither a refusal nor a pass. The n-th
re-check waits n x ``LATE_S`` first, so an overloaded loop catches up rather than gets
more probes to run."""


ADMISSION_PROBES = 32
"""Admission probes (`probe_for_verdict`: a load's, an adopted start's that could not reuse
the load's report) of one trio run in flight at once; more wait their turn. A thousand
at once would time out on their own CPU. Only the probes are bounded: the rest of a load
or a start (the supervisor's and the actor's round trips) never holds a turn."""

_ADMISSION_LIMIT: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar(
    "inferactors_admission_probes"
)


def admission_limiter() -> trio.CapacityLimiter:
    """This trio run's bound on admission probes (`ADMISSION_PROBES`)."""
    try:
        return _ADMISSION_LIMIT.get()
    except LookupError:
        limiter = trio.CapacityLimiter(ADMISSION_PROBES)
        _ADMISSION_LIMIT.set(limiter)
        return limiter


async def probe_for_verdict(
    open_prober: ProberFactory, base: str, timeout_s: float, flavor: InferFlavor
) -> ServerReport:
    """One probe of ``base`` (`probe_once`), made again up to `ADMISSION_RECHECKS` times,
    each later than the one before, while it gives no verdict (`ServerReport.no_verdict`).
    Each probe waits for a turn (`admission_limiter`); the waits between them hold none.
    The last report is returned whatever it says; callers raise `NoVerdict` for a
    no-verdict one ("cannot tell now"), never refuse it as a server that is not there."""
    limiter = admission_limiter()
    async with limiter:
        report = await probe_once(open_prober, base, timeout_s, flavor)
    for attempt in range(1, ADMISSION_RECHECKS + 1):
        if not report.no_verdict:
            break
        await trio.sleep(attempt * LATE_S)
        async with limiter:
            report = await probe_once(open_prober, base, timeout_s, flavor)
    return report
