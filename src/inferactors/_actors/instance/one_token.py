"""One real token from the server: the completion that is the truth of a server's health,
behind readiness's first token, the check of a failed ``/health``, deep health on demand
and the watchdog (all in ``probing.py``, which asks through `ask_one_token`).

The whole call has ONE deadline. A probe first, for at most `PRE_PROBE_SHARE` of it, only
names our model from the ids the server lists; when ``/health`` hangs, fails or resets, the
completion is sent all the same. A deadline our own late loop ate is no verdict
(`NoVerdict`, ``_policy/lateness.py``), never a failure of the server. Split from
``probing``.
"""

from __future__ import annotations

import trio

from ..._config.config import InferConfig
from ..._edges.loop_lag import no_verdict
from ..._edges.probe import Prober, ProberFactory
from ..._errors import BackendError, DeepHealthTimeout, NoVerdict
from ..._policy.admission import Plan
from ..._policy.health_truth import worth_confirming
from ..._policy.matching import completion_model
from ..._policy.probe_report import CompletionResult, ServerReport, serving
from ..ollama.adopted import guard_adopted_ollama

PRE_PROBE_SHARE = 0.25
"""Share of a one-token check's deadline that its probe (to name our model) may take; a
``/health`` that hangs gives up the rest to the completion."""


async def ask_one_token(
    plan: Plan,
    config: InferConfig,
    open_prober: ProberFactory,
    timeout_s: float,
    *,
    listed: tuple[str, ...] | None = None,
) -> CompletionResult:
    """One real token from ``plan``'s server with a fresh client (``open_prober``) and ONE
    ``timeout_s`` deadline for the whole call. The completion is the truth: a probe first,
    for at most `PRE_PROBE_SHARE` of the deadline (and ``config.probe_timeout_s``), only
    names our model from the ids it lists; when ``/health`` hangs, fails or resets, the
    completion is sent all the same. With ``listed`` (the ids the server listed when its
    ``/health`` last worked) there is no probe.

    Raises:
        DeepHealthTimeout: no answer in time.
        NoVerdict: the deadline fired, but our own late loop ate its budget
            (``_policy/lateness.py``): nothing is known about the server; never a
            failure of it (the monitor and the watchdog ask again).
        BackendError: the server says it is loading (or, mlx_lm.server, dead), or the
            completion failed (the message gives the server's words).
    """
    prober = open_prober(plan.spec.base_url(), timeout_s)
    started = trio.current_time()
    try:
        with trio.move_on_at(started + timeout_s):
            await guard_adopted_ollama(plan, timeout_s)  # loads nothing, calls no cloud
            if listed is None:
                within_s = min(timeout_s * PRE_PROBE_SHARE, config.probe_timeout_s)
                listed = await _listed(prober, plan, within_s)
            return await _one_token(prober, plan, listed)
        late = no_verdict("deep health", started, started + timeout_s)
        if late is not None:
            raise NoVerdict(late)
        raise DeepHealthTimeout(f"deep health: no complete answer within {timeout_s:g} s")
    finally:
        with trio.move_on_after(1.0, shield=True):
            await prober.aclose()


async def _listed(prober: Prober, plan: Plan, within_s: float) -> tuple[str, ...]:
    """The ids a probe lists, within ``within_s``; ``()`` when ``/health`` did not say it
    serves in time (hung, failed, reset, refused).

    Raises:
        BackendError: the server says it is loading, or that it can never serve.
    """
    with trio.move_on_after(within_s):
        report = await prober.report(plan.spec.runtime)
        if serving(report.health):
            return report.models
        if not worth_confirming(report.health):  # Loading, or dead
            raise BackendError(f"deep health: the server is not up ({_words(report)})")
    return ()


async def _one_token(prober: Prober, plan: Plan, listed: tuple[str, ...]) -> CompletionResult:
    model = completion_model(plan.spec.runtime, listed, plan.served_model)
    try:
        return await prober.tiny_completion(model)
    except BackendError as error:
        if str(error).startswith("deep health"):
            raise
        raise type(error)(f"deep health: {error}") from error


def _words(report: ServerReport) -> str:
    health = report.health
    why = getattr(health, "why", None)
    return f"{type(health).__name__.lower()}: {why}" if why else type(health).__name__.lower()
