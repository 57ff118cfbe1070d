"""The instance's probing workers: the monitor, readiness's first token, the completion
that checks a failed ``/health``, health and deep health on demand, and the watchdog.

They only ask the server (HTTP GETs, one-token completions) and the socket tables, and post
what they found to the actor's inbox (``messages.py``) or answer their caller directly; they
change no state (the actor's rules, ``step.py``, apply their results). The one-token
completion they ask for is ``one_token.py``'s `ask_one_token`. `ProbeLook`
(``probe_look.py``) is what the monitor of one process remembers between its probes (read
with the runtime's clock; the schedule's arithmetic is ``_policy.probe_schedule``).
"""

from __future__ import annotations

import attrs
import trio

from ..._config.config import InferConfig
from ..._config.supervision import Watchdog
from ..._edges.bundle import Edges
from ..._edges.loop_lag import lateness
from ..._edges.netscan import NetScanner
from ..._edges.probe import Prober, ProberFactory, probe_once
from ..._edges.probe_auth import with_api_key
from ..._edges.process import ManagedProcess
from ..._errors import (
    BackendError,
    InferactorsError,
    NoVerdict,
    RequestRefused,
)
from ..._flavor import InferFlavor
from ..._policy.admission import Plan
from ..._policy.exposure import Exposure
from ..._policy.health_truth import Confirmation
from ..._policy.lateness import LATE_S, VerdictBound, judged_anyway
from ..._policy.probe_report import CompletionResult, ServerReport, Unreachable, serving
from ..._policy.probe_schedule import (
    FIRST_PROBE_S,
    LINE_PROBE_S,
    RUNNING_PROBE_S,
    next_probe_at,
    phase_of,
)
from ..._policy.status import map_report
from ..._status import InstanceState
from ..admission_probes import probe_for_verdict
from ..identity import ensure_ours, listener_owner, wrong_family
from ..mailbox import post
from ..messages import ReplyTo, answer, refuse
from .messages import Confirmed, DeepHealthDone, Internal, Probed, WatchdogResult
from .one_token import ask_one_token
from .probe_look import ProbeLook

ADMISSION_REUSE_S = RUNNING_PROBE_S
"""An adopted server's admission report stands for the start's check and the monitor's
first probe while it is at most this old (float seconds): as old as a running server's
status may be anyway. At 1,000 adopted servers this is two probes of three saved at each
admission, when the CPU is shortest."""


@attrs.frozen
class Probing:
    """The probing workers of one instance; ``post`` is the actor's inbox; ``admitted_at``
    is the trio time of the admission's report of an adopted server (`Plan.admitted`;
    None: none); ``tick_phase`` places its running probes on the runtime's grid."""

    plan: Plan
    config: InferConfig
    edges: Edges
    post: trio.MemorySendChannel[object]
    admitted_at: float | None = None
    tick_phase: float = 0.0
    """The phase of the probe ticks (`probe_schedule.probe_phase`)."""

    def admission_report(self) -> ServerReport | None:
        """The admission's report of an adopted server while it is at most
        `ADMISSION_REUSE_S` old (the start's check and the monitor's first probe take it
        instead of probing again), else None."""
        report, at = self.plan.admitted, self.admitted_at
        if report is None or at is None or trio.current_time() - at > ADMISSION_REUSE_S:
            return None
        return report

    @property
    def open_prober(self) -> ProberFactory:
        return with_api_key(self.edges.open_prober, self.plan.api_key)

    @property
    def net(self) -> NetScanner:
        return self.edges.net

    @property
    def _flavor(self) -> InferFlavor:
        return self.plan.spec.runtime

    async def _post(self, message: Internal) -> None:
        """Post ``message`` to the actor: at once when its inbox has room (the actor's loop
        never waits, so it nearly always has: no pass through the scheduler per probe),
        else waiting for room; nothing when the actor is gone."""
        try:
            self.post.send_nowait(message)
        except trio.WouldBlock:
            await post(self.post, message)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # the actor is gone: its teardown answered everyone

    # Probing, identity and exposure.

    async def monitor(self, process: ManagedProcess | None, scope: trio.CancelScope) -> None:
        """Probe until cancelled: fast until the server is up, then every second on the
        instance's own phase (``_policy.probe_schedule``), over one kept-alive connection.

        A managed server's readiness line (``_policy.ready_lines``: listening, model loaded)
        wakes the monitor to probe at once, then every few ms, doubling; a server that prints
        nothing is probed on the timed schedule alone.

        A managed server counts as ready only once it also answered one real token: its
        ``/health`` can say 200 while completions hang or fail. That first
        token is asked once per process, when the probe first finds it up and listing our
        model, within the instance's deep-health timeout; an adopted server is never sent
        one (it only ever receives GETs). Once ready, a managed server whose ``/health``
        fails is checked with one completion (`_confirm`), at most every `CONFIRM_EVERY_S`.
        While the server has never answered, a refused probe looks for a listener on the
        other address family, at most every `MISBOUND_SCAN_S` (a server that answered and
        went away is not looked for: it was where we probe).

        An adopted server's first probe is the admission's report while it is fresh
        (`admission_report`).

        A probe that gives no verdict (`ServerReport.no_verdict`: one of its requests lost
        its deadline to our own late loop, ``_policy/lateness.py``) is not judged and the
        schedule stays as it was: the next probe made on time judges. It is posted all
        the same, saying how long no probe gave a verdict, so that a Running status says
        so once that lasts (``SAY_NO_VERDICT_S``) rather than its last answer. The wait is
        bounded (`VerdictBound`), counting trio time since the last verdict: after 3 probe
        timeouts the probes' deadlines are stretched by the lateness measured (never past
        the bound), and judged on the probe's own timeout minus our lateness; once
        ``NO_VERDICT_BOUND_S`` (24 s) passed, the next probe to end is judged whatever our
        lateness. An overload is the supervisor's own state (`SupervisorOverloaded`),
        never a server's.
        """
        base_url = self.plan.spec.base_url()
        delay, phase = FIRST_PROBE_S, self.tick_phase
        exposure_phase = phase_of(base_url)  # spread over `ADOPTED_EXPOSURE_S`
        look = ProbeLook(
            token_ok=process is None, exposure_phase=exposure_phase
        )  # adopted: no token
        prober = self.open_prober(base_url, self.config.probe_timeout_s)
        fresh = self.admission_report() if process is None else None
        bound = VerdictBound(self.config.probe_timeout_s)
        with scope:
            try:
                while True:
                    lines_seen = 0 if process is None else process.lines.ready_count
                    report = fresh or await _bounded_probe(prober, self._flavor, bound)
                    if fresh is not None:
                        bound.judged(trio.current_time())
                    fresh = None
                    if not report.no_verdict:  # else our own loop was late: no verdict
                        await self._judge(process, report, look)
                        delay = look.next_delay(report, delay)
                    else:  # said in the status once it lasts (`no_verdict_words`)
                        lasted = bound.lasted_s(trio.current_time())
                        await self._post(Probed(report, process, no_verdict_for_s=lasted))
                    at = next_probe_at(trio.current_time(), delay, phase)
                    if await _pause(process, at, lines_seen):
                        delay = LINE_PROBE_S  # a line: probe now, then 2x, 4x ... this
                    look.stalled = look.stalled or trio.current_time() - at > LATE_S
            finally:
                with trio.move_on_after(1.0, shield=True):
                    await prober.aclose()

    async def _judge(
        self, process: ManagedProcess | None, report: ServerReport, look: ProbeLook
    ) -> None:
        """Post what one monitor probe found and, when due, confirm a failed ``/health``."""
        due = look.confirm_due(process, report) and not self._stopped(process, report)
        if due:  # the probe's own report already says a check is under way
            look.confirmation = Confirmation(trio.current_time(), pending=True)
        await self._post(await self._look(process, report, look))
        if due:
            await self._confirm(process, report, look)

    async def _look(
        self, process: ManagedProcess | None, report: ServerReport, look: ProbeLook
    ) -> Probed:
        """What one monitor probe found: identity, first token, exposure, address family."""
        owner_ok, owner_pid = await self._identity(process, report)
        exposed = await self._exposure_first(process, report, look)
        if exposed is not None:  # stopped before it is ever announced Running
            return Probed(report, process, owner_ok, owner_pid, exposed)
        token: str | None = None
        ttft_s: float | None = None
        if not look.token_ok and owner_ok is not False and self._lists_our_model(report):
            token, ttft_s, refused = await self._first_token(report.models)  # ours only
            look.token_ok = token == ""
            report = attrs.evolve(report, refused=report.refused or refused)
        look.note(report)
        seen = await self._adopted_exposure(process, report, look)
        stopped = self._stopped(process, report)
        if look.scan_due(report):
            look.misbound = await self._misbound(report) or ""
        misbound = look.misbound
        probed = Probed(report, process, owner_ok, owner_pid, seen, token, stopped)
        confirmation = None if serving(report.health) else look.confirmation
        return attrs.evolve(probed, confirmation=confirmation, ttft_s=ttft_s, misbound=misbound)

    async def _confirm(
        self, process: ManagedProcess | None, report: ServerReport, look: ProbeLook
    ) -> None:
        """``/health`` failed on a server that was Running: ask for one token, within the
        deep-health timeout, to tell a broken health endpoint from a broken server. The
        probe's report said the check is under way; this posts how it went. A check whose
        deadline our own late loop ate (`NoVerdict`) posts nothing: it stays under way
        until the next probe's check, never a failure."""
        started = trio.current_time()
        try:
            await self.ensure_ours(process)
            result = await self.one_token(self.deep_timeout_s, listed=look.models)
        except NoVerdict:  # our own late loop: no verdict; the next failed probe asks again
            look.confirmation = None
            return
        except InferactorsError as error:
            look.confirmation = Confirmation(started, why=str(error) or type(error).__name__)
            ttft_s = None
        else:
            look.confirmation = Confirmation(started, ttft_s=result.latency_s)
            ttft_s = result.latency_s
        confirmed = Probed(report, process, confirmation=look.confirmation, ttft_s=ttft_s)
        await self._post(confirmed)

    async def _misbound(self, report: ServerReport) -> str | None:
        """The configuration error when our probe was refused because the port listens only
        on the other address family (`identity.wrong_family`), else None."""
        return await wrong_family(self.net, self.plan.spec, report)

    def _stopped(self, process: ManagedProcess | None, report: ServerReport) -> bool:
        """Whether our server, which did not answer, is stopped by a signal (``/proc``)."""
        if process is None or not isinstance(report.health, Unreachable):
            return False
        found = self.edges.process_table.identify(process.pid)
        return found is not None and found.stopped

    def _lists_our_model(self, report: ServerReport) -> bool:
        mapped = map_report(report, model=self.plan.listed_names, alive=True, adopted=False)
        return mapped.state is InstanceState.RUNNING

    async def _first_token(
        self, listed: tuple[str, ...]
    ) -> tuple[str | None, float | None, str | None]:
        """``("", ttft_s, None)`` when one token came back within the instance's deep-health
        timeout (`deep_timeout_s`), else ``(why not, None, refused)``: ``refused`` the status
        and words of a 401 or 403 (`RequestRefused`), else None; ``(None, None, None)`` when
        our own late loop ate the deadline (`NoVerdict`: not a failure; the next probe asks
        again). ``listed``: the ids the monitor's probe just read, so the check asks at
        once, without a probe of its own."""
        try:
            result = await self.one_token(self.deep_timeout_s, listed=listed)
        except NoVerdict:
            return None, None, None
        except RequestRefused as error:
            return str(error), None, error.refused
        except InferactorsError as error:
            return str(error) or type(error).__name__, None, None
        return "", result.latency_s, None

    @property
    def deep_timeout_s(self) -> float:
        """The instance's deep-health timeout (``Supervision.deep_timeout_s``), float
        seconds, or the runtime's ``InferConfig.deep_timeout_s`` when it has none."""
        return self.plan.supervision.deep_timeout_s or self.config.deep_timeout_s

    async def _exposure_first(
        self, process: ManagedProcess | None, report: ServerReport, look: ProbeLook
    ) -> Exposure | None:
        """A managed server that serves is scanned for listeners beyond loopback before it
        can be announced Running (every probe until it is ready), and again first after our
        loop stalled (`ProbeLook.stalled`): the exposure watch's tick may come later than
        the probe that would say Running."""
        if process is None or not serving(report.health):
            return None
        if look.ready and not look.stalled:
            return None
        look.stalled = False
        return await self.net.scan(process.pid, self.plan.spec.port())

    async def _adopted_exposure(
        self, process: ManagedProcess | None, report: ServerReport, look: ProbeLook
    ) -> Exposure | None:
        """An adopted server's exposure, from the listeners on its port, checked at most every
        `ADOPTED_EXPOSURE_S` (the last finding stands between checks); it is only ever
        reported, never acted on."""
        if process is not None or not serving(report.health):
            return None
        if look.exposure_due():
            look.exposure = await self.net.port_exposure(self.plan.spec.port())
        return look.exposure

    async def _identity(
        self, process: ManagedProcess | None, report: ServerReport
    ) -> tuple[bool | None, int | None]:
        if process is None or not serving(report.health):
            return None, None
        return await listener_owner(self.net, self.plan.spec, process)

    async def confirm_adopted(self, reply: ReplyTo[None]) -> None:
        """An adopted start only checks that the server answers: the admission's report
        while it is fresh (`admission_report`), else a probe, made again while our own late
        loop leaves it without a verdict (`probe_for_verdict`). One that listens only on the
        other address family is refused saying so; one we cannot tell about now (still no
        verdict) is refused as such (`NoVerdict`), never as a server that is not there."""
        report = self.admission_report()
        if report is None:
            base, timeout_s = self.plan.spec.base_url(), self.config.probe_timeout_s
            report = await probe_for_verdict(self.open_prober, base, timeout_s, self._flavor)
        if report.no_verdict:
            why = report.no_verdict_why or ""
            base = self.plan.spec.base_url()
            refuse(reply, NoVerdict(f"cannot tell whether {base} answers now: {why}; try again"))
            return
        if isinstance(report.health, Unreachable):
            why = await self._misbound(report) or report.health.why
            refuse(
                reply,
                BackendError(
                    f"adopted server is not answering ({why}); "
                    "inferactors does not start adopted servers"
                ),
            )
            return
        await self._post(Confirmed(reply))

    # Health.

    async def health(self, process: ManagedProcess | None, reply: ReplyTo[ServerReport]) -> None:
        """Answer one probe report; a managed server that is not running is not probed, so
        nothing goes to whoever holds its port now."""
        if self.plan.launch is not None and (process is None or not process.running):
            answer(reply, ServerReport(Unreachable("the server is not running; nothing was sent")))
            return
        answer(reply, await self._probe())

    async def deep_health(
        self, process: ManagedProcess | None, reply: ReplyTo[CompletionResult]
    ) -> None:
        """Ask the server for one real token, once its
        port is proven to be ``process``'s (`ensure_ours`): nothing goes to an impostor.
        A token that came back is published (`DeepHealthPassed`, ``InstanceStatus.ttft_s``)
        before the caller is answered."""
        try:
            await self.ensure_ours(process)
            result = await self.one_token(self.deep_timeout_s)
        except InferactorsError as error:
            refuse(reply, error)
        else:
            await self._post(DeepHealthDone(process, result.latency_s))
            answer(reply, result)

    async def watchdog(
        self, process: ManagedProcess | None, watchdog: Watchdog, scope: trio.CancelScope
    ) -> None:
        """Every ``interval_s``, one token within ``timeout_s``; report each result (with
        its time to first token when it passed; one whose deadline our own late loop ate,
        `NoVerdict`, as no verdict: never counted as a failure)."""
        with scope:
            while True:
                await trio.sleep(watchdog.interval_s)
                try:
                    await self.ensure_ours(process)
                    result = await self.one_token(watchdog.timeout_s)
                except NoVerdict as error:
                    await self._post(WatchdogResult(process, str(error), no_verdict=True))
                except InferactorsError as error:
                    await self._post(WatchdogResult(process, str(error)))
                else:
                    await self._post(WatchdogResult(process, None, result.latency_s))

    async def ensure_ours(self, process: ManagedProcess | None) -> None:
        """`identity.ensure_ours` for a managed server; an adopted one is not ours to check."""
        if self.plan.launch is not None:
            await ensure_ours(self.net, self.plan.spec, process)

    async def one_token(
        self, timeout_s: float, *, listed: tuple[str, ...] | None = None
    ) -> CompletionResult:
        """One real token from this instance's server within ONE ``timeout_s`` deadline
        (`one_token.ask_one_token`: the probe that names our model, unless ``listed``
        gives its ids; the errors it raises: `DeepHealthTimeout`, `NoVerdict`,
        `BackendError`)."""
        return await ask_one_token(
            self.plan, self.config, self.open_prober, timeout_s, listed=listed
        )

    async def _probe(self) -> ServerReport:
        base = self.plan.spec.base_url()
        return await probe_once(self.open_prober, base, self.config.probe_timeout_s, self._flavor)


async def _bounded_probe(prober: Prober, flavor: InferFlavor, bound: VerdictBound) -> ServerReport:
    """One monitor probe under ``bound`` (`VerdictBound`): stretched once the server's
    probes long gave no verdict (never past the bound); a no-verdict one judged all the
    same once `NO_VERDICT_BOUND_S` passed since the server's last verdict."""
    started = trio.current_time()
    report = await prober.report(flavor, stretch_s=bound.stretch_s(started))
    now = trio.current_time()
    if not report.no_verdict:
        bound.judged(now)
        return report
    bound.lost(started, lateness(started, now).ours_s)
    if not bound.judge_anyway(now):
        return report
    judged = judged_anyway(report, bound.lasted_s(now), bound.bound_s)
    bound.judged(now)
    return judged


async def _pause(process: ManagedProcess | None, at: float, lines_seen: int) -> bool:
    """Sleep until trio time ``at``; True as soon as ``process`` printed a readiness line
    beyond the first ``lines_seen`` (`LineWatch.wait_ready`), False at ``at``."""
    if process is None:
        await trio.sleep_until(at)
        return False
    with trio.move_on_at(at):
        await process.lines.wait_ready(lines_seen)
        return True
    return False
