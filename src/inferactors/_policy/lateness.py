"""Our own lateness is never a verdict: when a deadline that fired says nothing about a server.

A deadline (a probe's timeout, a connect's 300 ms, a model list read) judges the server only
if our own event loop gave the server the whole budget. When the loop ran late (too many
instances for the CPU, a spawn storm, a blocked thread holding the GIL), the timeout fired
late or the loop did not run for part of the window, and a timeout then says nothing: it
gives **no verdict**, fails neither open nor closed, and the caller checks again promptly.

The facts come from the edge (``_edges/loop_lag.py`` measures them around each deadline);
the rules are here, pure:

- `Lateness`: how late the timeout fired and how long the loop stalled inside the window;
  `gives_no_verdict` when together they pass `LATE_S`.
- `connect_reach`: what an exposure connect says. An accepted connect is a fact whatever our
  lag (reachable); a refusal is a fact (not reachable); silence is never "reachable": on
  loopback (where nothing is lost in transit, so silence is a full accept queue or a
  filter, not an answer) or when our loop was late it is no verdict, elsewhere on time it is
  "not reachable" (a filtered address).
- `OverloadWatch`: when the supervisor itself is overloaded (some deadline lost its verdict,
  or the loop stalled past `LATE_S`) and when it has caught up (`CALM_S` without either),
  so the overload is reported once, as the supervisor's state, never as the servers'.

Durations are float seconds, times are the runtime's clock (trio time).
"""

from __future__ import annotations

import enum

import attrs

from .probe_report import Health, ServerReport, Unreachable

LATE_S = 0.25
"""Our own lateness around a deadline beyond which the deadline gives no verdict (float
seconds): a quarter second of a probe's or a connect's budget lost to our own loop. At
1,000 adopted servers on 2 cores, healthy servers were otherwise reported exited."""

CALM_S = 5.0
"""How long without any lost verdict or long stall before an overloaded supervisor counts
as caught up again (float seconds)."""


@attrs.frozen
class Lateness:
    """How late our own event loop ran around one deadline.

    Attributes:
        fired_late_s: how long after the deadline the timeout was handled (0 when on time).
        stalled_s: how long, between the start of the wait and its deadline, our loop did
            not run (a blocked loop: nothing was sent or read meanwhile).
    """

    fired_late_s: float = 0.0
    stalled_s: float = 0.0

    @property
    def ours_s(self) -> float:
        """The server's budget lost to us: the lateness of the timeout plus the stalls."""
        return max(0.0, self.fired_late_s) + max(0.0, self.stalled_s)

    def describe(self) -> str:
        """``"inferactors' event loop ran 840 ms late"`` (one phrase, for a ``why``)."""
        return f"inferactors' event loop ran {self.ours_s * 1000:.0f} ms late"


def gives_no_verdict(lateness: Lateness, *, limit_s: float = LATE_S) -> bool:
    """Whether a deadline that fired with ``lateness`` says nothing about the server: more
    than ``limit_s`` of its budget was lost to our own loop."""
    return lateness.ours_s > limit_s


def no_verdict_why(request: str, lateness: Lateness) -> str:
    """The words of a deadline that gave no verdict: ``"GET /health: no verdict:
    inferactors' event loop ran 840 ms late (the supervisor is overloaded; the server may
    be fine)"``."""
    return (
        f"{request}: no verdict: {lateness.describe()} "
        "(the supervisor is overloaded; the server may be fine)"
    )


def timed_out_why(request: str, given_s: float, timeout_s: float) -> str:
    """The words of a request that judged the server by timing out: ``"GET /health: no
    complete reply within 2 s"`` when it had the probe's whole ``timeout_s`` (or more:
    stretched), else ``"GET /v1/models: no complete reply within the 0.5 s left of the
    probe's 2 s"``: a later request of one probe gets only what the earlier ones left of
    its one deadline (``given_s``, float seconds), and its words must not blame it for
    the whole."""
    if given_s >= timeout_s - 0.1:  # the whole budget but for a moment: said plainly
        return f"{request}: no complete reply within {timeout_s:g} s"
    left = f"the {max(0.0, given_s):.1f} s left of the probe's {timeout_s:g} s"
    return f"{request}: no complete reply within {left}"


class ConnectResult(enum.Enum):
    """What one TCP connect did."""

    ACCEPTED = "accepted"
    REFUSED = "refused"
    """Refused, unreachable network, or any other error: an answer."""
    SILENT = "silent"
    """No answer within its timeout."""


class Reach(enum.Enum):
    """What an exposure connect says about one address."""

    REACHABLE = "reachable"
    NOT_REACHABLE = "not reachable"
    NO_VERDICT = "no verdict"


def connect_reach(result: ConnectResult, lateness: Lateness, *, loopback: bool) -> Reach:
    """What a connect to an address says (module notes): accepted is reachable whatever our
    lateness; refused is not; silence is no verdict on ``loopback`` or when our loop was
    late (`gives_no_verdict`), else not reachable. Silence is never reachable."""
    match result:
        case ConnectResult.ACCEPTED:
            return Reach.REACHABLE
        case ConnectResult.REFUSED:
            return Reach.NOT_REACHABLE
        case ConnectResult.SILENT:
            if loopback or gives_no_verdict(lateness):
                return Reach.NO_VERDICT
            return Reach.NOT_REACHABLE


def no_verdict_report(
    why: str, latency_s: float = 0.0, health: Health | None = None
) -> ServerReport:
    """The report of a probe whose request lost its deadline to our own late loop: it gives
    no verdict on the server (`ServerReport.no_verdict`), neither up nor down, and no
    "models problem" either. When ``/health`` (or Ollama's version) answered first
    (``health``) and only the model list was late, the report keeps what was seen: that
    ``health``, and ``why`` as ``models_no_verdict``; else its health is `Unreachable`
    with ``overloaded`` set and ``why`` the request's no-verdict words. The caller checks
    again soon."""
    if health is not None:
        return ServerReport(health, latency_s=latency_s, models_no_verdict=why)
    return ServerReport(Unreachable(why, overloaded=True), latency_s=latency_s)


@attrs.frozen
class Overload:
    """The supervisor is overloaded: since trio time ``since`` (for a stall, when the loop
    stopped running, not when it ran again); ``why`` is the first sign
    (``"GET /health: no verdict: ..."`` or ``"event loop stalled 900 ms"``)."""

    since: float
    why: str


@attrs.frozen
class CaughtUp:
    """The supervisor caught up at trio time ``at`` after ``lasted_s`` seconds overloaded
    (from `Overload.since`: a stall that began the overload counts whole);
    ``no_verdicts`` deadlines gave no verdict meanwhile and the longest stall was
    ``worst_stall_s``."""

    at: float
    lasted_s: float
    no_verdicts: int
    worst_stall_s: float


@attrs.define
class OverloadWatch:
    """Whether the supervisor is overloaded now (see the module notes): a deadline that gave
    no verdict, or a stall of the loop longer than `LATE_S`, starts an overload (reported
    once); `CALM_S` without either ends it (reported once).

    ``no_verdicts_total`` counts every deadline that gave no verdict, for the metric.
    """

    calm_s: float = CALM_S
    current: Overload | None = None
    last_sign_at: float = 0.0
    no_verdicts: int = 0
    no_verdicts_total: int = 0
    worst_stall_s: float = 0.0

    def lost_verdict(self, at: float, why: str) -> Overload | None:
        """A deadline gave no verdict at ``at``; the new `Overload` when this starts one."""
        self.no_verdicts += 1
        self.no_verdicts_total += 1
        return self._sign(at, why)

    def stalled(self, at: float, stall_s: float) -> Overload | None:
        """The loop did not run for ``stall_s`` seconds, up to ``at``; the new `Overload`
        when this starts one (a stall up to `LATE_S` is no sign)."""
        if stall_s <= LATE_S:
            return None
        self.worst_stall_s = max(self.worst_stall_s, stall_s)
        return self._sign(at, f"event loop stalled {stall_s * 1000:.0f} ms", began=at - stall_s)

    def calm(self, at: float) -> CaughtUp | None:
        """`CaughtUp` when an overload ends at ``at`` (`calm_s` since its last sign)."""
        current = self.current
        if current is None or at - self.last_sign_at < self.calm_s:
            return None
        done = CaughtUp(at, at - current.since, self.no_verdicts, self.worst_stall_s)
        self.current, self.no_verdicts, self.worst_stall_s = None, 0, 0.0
        return done

    def calm_at(self) -> float | None:
        """When the current overload ends if no further sign comes (None: not overloaded)."""
        return None if self.current is None else self.last_sign_at + self.calm_s

    def _sign(self, at: float, why: str, *, began: float | None = None) -> Overload | None:
        """A sign at ``at``; an overload it starts began at ``began`` (a stall: when the
        loop stopped running, so `CaughtUp.lasted_s` counts the stall itself)."""
        self.last_sign_at = max(self.last_sign_at, at)
        if self.current is not None:
            return None
        self.current = Overload(at if began is None else began, why)
        return self.current


# A bound on going without a verdict.

JUDGE_AFTER_TIMEOUTS = 3.0
"""After this many probe timeouts (``timeout_s`` each) of trio time in which every probe of
a server gave no verdict, its probes are stretched (`VerdictBound.stretch_s`): a server
that does not answer is then judged on a fair budget, not never."""

MAX_STRETCH = 4.0
"""A stretched probe waits at most this many probe timeouts beyond its own (float factor)."""

NO_VERDICT_BOUND_S = 24.0
"""The bound itself (float seconds of trio time): once no probe of a server has given a
verdict for this long since its last verdict, the next probe to end is judged whatever our
lateness (`VerdictBound.judge_anyway`). Stretched probes never wait past it: a stretched
deadline ends at the bound at the latest (`VerdictBound.stretch_s`), so the judgement
comes at most one probe interval and one probe timeout after the bound."""

SAY_NO_VERDICT_S = 4.0
"""A server whose probes gave no verdict for this long (float seconds) says so in its
status (`no_verdict_words`), in steps of this many seconds, instead of its last answer."""


def no_verdict_words(lasted_s: float, last: str | None) -> str | None:
    """The words of a status whose probes gave no verdict for ``lasted_s`` seconds, or None
    under `SAY_NO_VERDICT_S`: ``"no verdict for over 12 s: the supervisor is overloaded
    (last answer: server up)"``. The seconds are whole steps of `SAY_NO_VERDICT_S`, so the
    words change a few times per overload, not at every probe."""
    if lasted_s < SAY_NO_VERDICT_S:
        return None
    steps = int(lasted_s // SAY_NO_VERDICT_S) * SAY_NO_VERDICT_S
    said = f"no verdict for over {steps:.0f} s: the supervisor is overloaded"
    return f"{said} (last answer: {last})" if last else said


def judges_timeout(
    elapsed_s: float, lateness: Lateness, budget_s: float, *, limit_s: float = LATE_S
) -> bool:
    """Whether a request with no reply by its deadline judges the server (it timed out):
    our loop lost at most ``limit_s`` of it (`gives_no_verdict`), or the time it ran
    (``elapsed_s``, float seconds) minus what our loop lost meanwhile still reaches the
    server's budget ``budget_s`` with ``limit_s`` to spare: the server had its whole
    budget with our loop running. A late probe is never thrown away whole. Only a deadline
    stretched past ``budget_s`` (`VerdictBound`) can pass the second test: on an
    unstretched one, the time run less our lateness is the budget less the stalls."""
    if not gives_no_verdict(lateness, limit_s=limit_s):
        return True
    return elapsed_s - lateness.ours_s >= budget_s + limit_s


@attrs.define
class VerdictBound:
    """How long one server's probes have gone without a verdict, and what to do about it.

    Without a bound, a server that really hangs while our loop runs late reads as it last
    did for as long as the overload lasts (every timeout lost part of its budget). So,
    counting trio time since the server's last verdict:

    - for `JUDGE_AFTER_TIMEOUTS` x ``timeout_s`` the no-verdicts are let be (a brief
      overload delays a verdict, nothing more);
    - then each probe's deadline is stretched by the lateness measured on the probes that
      gave no verdict (at least ``timeout_s``, at most `MAX_STRETCH` x ``timeout_s``, never
      past the bound), and judged by `judges_timeout` against the probe's own
      ``timeout_s``: a hung server times out on a fair budget, a healthy one answers long
      before the stretched deadline;
    - once `NO_VERDICT_BOUND_S` passed without any verdict, the next probe to end is
      judged whatever our lateness (`judge_anyway`).

    ``verdict_at`` is the trio time of the last verdict (None: none yet); ``since`` the
    start of the run of no-verdicts (the last verdict, else the start of the first probe
    that gave none; None: the last probe judged); ``lost_s`` the most our loop lost on one
    of them (float seconds).
    """

    timeout_s: float
    bound_s: float = NO_VERDICT_BOUND_S
    verdict_at: float | None = None
    since: float | None = None
    lost_s: float = 0.0

    def judged(self, at: float) -> None:
        """A probe gave a verdict at ``at``: the run of no-verdicts is over."""
        self.verdict_at, self.since, self.lost_s = at, None, 0.0

    def lost(self, started: float, lost_s: float) -> None:
        """A probe begun at ``started`` gave no verdict; our loop lost ``lost_s`` of it."""
        if self.since is None:
            self.since = started if self.verdict_at is None else self.verdict_at
        self.lost_s = max(self.lost_s, lost_s)

    def lasted_s(self, now: float) -> float:
        """How long, at ``now``, no probe has given a verdict (0: the last one did)."""
        return 0.0 if self.since is None else max(0.0, now - self.since)

    def stretch_s(self, now: float) -> float:
        """How far past its own timeout the deadline of a probe begun at ``now`` goes (0:
        not stretched): never past the bound, where the probe is judged anyway."""
        if self.since is None or now - self.since < JUDGE_AFTER_TIMEOUTS * self.timeout_s:
            return 0.0
        stretch = min(MAX_STRETCH * self.timeout_s, max(self.timeout_s, self.lost_s))
        room = self.since + self.bound_s - (now + self.timeout_s)
        return max(0.0, min(stretch, room))

    def judge_anyway(self, now: float) -> bool:
        """Whether a no-verdict probe ending at ``now`` is judged all the same: none gave a
        verdict for `NO_VERDICT_BOUND_S` (``bound_s``)."""
        return self.since is not None and now - self.since >= self.bound_s


def judged_anyway(report: ServerReport, lasted_s: float, bound_s: float) -> ServerReport:
    """A no-verdict ``report`` judged at the bound (`VerdictBound.judge_anyway`), with its
    words and how long no probe gave a verdict: a late ``/health`` is Unreachable (no
    longer marked overloaded); a late model list after a health that answered is an
    unreadable list (``models_problem``), the health as it answered."""
    why = report.no_verdict_why or "no reply"
    judged = f"{why}; judged: no verdict for {lasted_s:.0f} s (the bound is {bound_s:g} s)"
    if report.models_no_verdict is not None:
        problem = f"model list unreadable: {judged}"
        return attrs.evolve(report, models_no_verdict=None, models_problem=problem)
    return attrs.evolve(report, health=Unreachable(judged))


# Admission without a verdict.

DEFERRED_FIRST_S = 1.0
"""The first re-check of an admission (or an adopted start) that gave no verdict waits this
long (float seconds), doubling with each further no-verdict up to `DEFERRED_MAX_S`."""

DEFERRED_MAX_S = 16.0
"""The longest wait between re-checks of an admission without a verdict (float seconds)."""


def deferred_delay_s(tries: int, phase: float) -> float:
    """Seconds before re-check ``tries`` (0-based) of an admission that gave no verdict:
    `DEFERRED_FIRST_S` doubling to `DEFERRED_MAX_S`, spread by ``phase`` in [0, 1) (the
    instance's own, ``probe_schedule.phase_of``) over up to half as much again, so a
    thousand deferred admissions do not come back together. Never counted as a retry of
    the server: no verdict says nothing about it, and it is re-checked until one comes."""
    base = min(DEFERRED_MAX_S, DEFERRED_FIRST_S * 2.0 ** min(tries, 16))
    return base * (1.0 + 0.5 * min(max(phase, 0.0), 1.0))
