"""The instance actor's workers: every piece of I/O an instance does.

Each worker runs as a task in the actor's nursery, reads only the immutable plan and
config, and posts its result to the actor's inbox (``_instance_msgs``), so the actor's loop
stays the only writer of the instance's state. Workers that change no state (health and
deep health) answer their caller directly.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import attrs
import trio

from .._config.binding import spec_host
from .._config.config import InferConfig, Watchdog
from .._edges.bundle import Edges
from .._edges.netscan import NetScanner
from .._edges.probe import Prober, ProberFactory, probe_once
from .._edges.process import ManagedProcess
from .._errors import BackendError, DeepHealthTimeout, InferactorsError
from .._flavor import InferFlavor
from .._models.registry import ModelRegistry
from .._policy.admission import Plan
from .._policy.exposure import Exposure
from .._policy.launch import Launch
from .._policy.matching import completion_model
from .._policy.probe_parse import CompletionResult, ServerReport, Unreachable, Up
from .._policy.status import map_report
from .._status import InstanceState, InstanceStatus
from .identity import ensure_ours, listener_owner
from .instance_msgs import (
    Confirmed,
    Exited,
    ExposureFound,
    Internal,
    PinChanged,
    Probed,
    ReadinessExpired,
    ShutdownDone,
    Spawned,
    SpawnFailed,
    Stopped,
    WatchdogResult,
)
from .instance_pin import PinHold, PinnedLaunch, pin_spawn
from .messages import ReplyTo, answer, refuse

FIRST_PROBE_S = 0.01
"""The monitor's first delay after a spawn; it doubles up to `STARTUP_PROBE_CAP_S`."""

STARTUP_PROBE_CAP_S = 0.1
"""Longest delay between probes of a server that is not up yet."""

RUNNING_PROBE_S = 1.0
"""Delay between probes of a server that is up."""

RECORD_REFRESH_S = 1.0
"""Delay between refreshes of a running server's record (its process group's members)."""

EXPOSURE_CHECK_S = 0.2
"""Delay between exposure scans of a running managed server: with a scan (~6 ms) and the
3 s-grace stop's first signal, a listener on 0.0.0.0 is stopped within 250 ms (issue 3)."""


@attrs.frozen
class InstanceWork:
    """The I/O of one instance; ``post`` is the actor's inbox; ``registry`` checks the
    model's pins at every spawn (None: nothing is pinned, for a bare actor)."""

    plan: Plan
    config: InferConfig
    edges: Edges
    post: trio.MemorySendChannel[object]
    registry: ModelRegistry | None = None

    @property
    def open_prober(self) -> ProberFactory:
        return self.edges.open_prober

    @property
    def net(self) -> NetScanner:
        return self.edges.net

    @property
    def _flavor(self) -> InferFlavor:
        return self.plan.spec.runtime

    async def _post(self, message: Internal) -> None:
        try:
            await self.post.send(message)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # the actor is gone; its teardown answered everyone

    # Process lifecycle.

    async def spawn(
        self, nursery: trio.Nursery, reply: ReplyTo[None], held: PinHold | None = None
    ) -> None:
        """Start the managed server unless its model fails its pins (checked at every spawn,
        issue 8; ``held``: the instance's hold, see `instance_pin`) or its port is taken
        (checklist items 47, 54). The server opens the verified descriptors; they stay open
        here until it is reaped, so the exposure watch can re-check them (`exposure_watch`).
        """
        launch = self.plan.launch
        assert launch is not None, "spawn is only for managed process plans"
        try:
            pinned = await pin_spawn(self.edges.file_work, self.registry, self.plan, held)
        except (InferactorsError, OSError) as error:
            await self._post(SpawnFailed(_start_error(launch, error), reply))
            return
        if isinstance(pinned, PinHold):
            await self._post(SpawnFailed(pinned.error, reply, pinned))
            return
        with pinned:  # open for the server's whole life: closed once it is reaped
            try:
                process = await self._start(nursery, pinned.launch)
            except (InferactorsError, OSError) as error:
                await self._post(SpawnFailed(_start_error(launch, error), reply))
                return
            try:
                await self._record(process, pinned.launch)
            finally:  # even when recording raises: the actor must know the process to stop it
                await self._post(Spawned(process, reply, pinned))
            await process.wait_exited()

    async def _start(self, nursery: trio.Nursery, launch: Launch) -> ManagedProcess:
        spec = self.plan.spec
        if await self.edges.port_in_use(spec_host(spec), spec.port()):
            raise BackendError(
                f"{spec.base_url()} is already taken by something else; not starting over it"
            )
        files, run_as = self.plan.weight_files, self.plan.run_as
        await self.edges.containment.prepare(launch, run_as, files)
        spawn = self.edges.open_process
        return await ManagedProcess.spawn(nursery, launch, open_process=spawn, run_as=run_as)

    async def _record(self, process: ManagedProcess, launch: Launch) -> None:
        """Write ``server.json`` (with the argv executed, ``launch``) so a later life can reap
        this server if we die (FC-13)."""
        await self.edges.containment.record(launch, process.pid, self.plan.spec.port())

    async def watch_exit(self, process: ManagedProcess) -> None:
        """Await the process's exit and report it the moment it happens; then drop its
        record (``server.json``, kept for orphan reaping while it ran)."""
        evidence = await process.wait_exited()
        await self._post(Exited(process, evidence))
        if self.plan.launch is not None:
            await self.edges.containment.forget(self.plan.launch, process.pid)

    async def stop(self, process: ManagedProcess, grace_s: float) -> None:
        """TERM the group, wait ``grace_s`` seconds, KILL the group, reap (checklist 48)."""
        evidence = await process.terminate(grace_s)
        await self._post(Stopped(process, evidence))

    async def readiness_timer(self, process: ManagedProcess, timeout_s: float) -> None:
        """Tell the actor when the readiness deadline of ``process`` passes."""
        await trio.sleep_until(process.started_at + timeout_s)
        await self._post(ReadinessExpired(process, timeout_s))

    async def shutdown(
        self,
        process: ManagedProcess | None,
        grace_s: float,
        instance_dir: Path | None,
        reply: ReplyTo[None],
    ) -> None:
        """Unload: stop a running server, delete the instance directory, end the actor."""
        if process is not None and process.running:
            evidence = await process.terminate(grace_s)
            await self._post(Exited(process, evidence))
        if instance_dir is not None:
            await trio.to_thread.run_sync(shutil.rmtree, instance_dir, True)  # errors ignored
        await self._post(ShutdownDone(reply))

    # Probing, identity and exposure.

    async def probe_for(
        self, process: ManagedProcess | None, reply: ReplyTo[InstanceStatus]
    ) -> None:
        """Probe once for a status request; a running managed server is also scanned for
        exposure (checked on every status call) and its listener's identity."""
        exposure = await self._scan(process)
        report = await self._probe()
        owner_ok, owner_pid = await self._identity(process, report)
        stopped = self._stopped(process, report)
        await self._post(
            Probed(report, process, reply, owner_ok, owner_pid, exposure, None, stopped)
        )

    async def monitor(self, process: ManagedProcess | None, scope: trio.CancelScope) -> None:
        """Probe until cancelled: fast until the server is up, then every second.

        A managed server counts as ready only once it also answered one real token: its
        ``/health`` can say 200 while completions hang or fail (FC-03, FC-07). That first
        token is asked once per process, when the probe first finds it up and listing our
        model; an adopted server is never sent one (it only ever receives GETs).
        """
        delay = FIRST_PROBE_S
        token_ok = process is None  # adopted: no first token
        prober = self.open_prober(self.plan.spec.base_url(), self.config.probe_timeout_s)
        with scope:
            try:
                while True:
                    report = await prober.report(self._flavor)
                    owner_ok, owner_pid = await self._identity(process, report)
                    token: str | None = None
                    if not token_ok and owner_ok is not False and self._lists_our_model(report):
                        token = await self._first_token()  # only from a listener that is ours
                        token_ok = token == ""
                    seen = await self._adopted_exposure(process, report)
                    stopped = self._stopped(process, report)
                    probed = Probed(
                        report, process, None, owner_ok, owner_pid, seen, token, stopped
                    )
                    await self._post(probed)
                    up = isinstance(report.health, Up) and token_ok
                    delay = RUNNING_PROBE_S if up else min(delay * 2, STARTUP_PROBE_CAP_S)
                    await trio.sleep(delay)
            finally:
                with trio.move_on_after(1.0, shield=True):
                    await prober.aclose()

    def _stopped(self, process: ManagedProcess | None, report: ServerReport) -> bool:
        """Whether our server, which did not answer, is stopped by a signal (``/proc``)."""
        if process is None or not isinstance(report.health, Unreachable):
            return False
        found = self.edges.process_table.identify(process.pid)
        return found is not None and found.stopped

    def _lists_our_model(self, report: ServerReport) -> bool:
        mapped = map_report(report, model=self.plan.listed_names, alive=True, adopted=False)
        return mapped.state is InstanceState.RUNNING

    async def _first_token(self) -> str:
        """``""`` when one token came back, else why not."""
        try:
            await self.one_token(self.config.deep_timeout_s)
        except InferactorsError as error:
            return str(error) or type(error).__name__
        return ""

    async def exposure_watch(
        self, process: ManagedProcess, scope: trio.CancelScope, pins: PinnedLaunch | None = None
    ) -> None:
        """Scan the server every `EXPOSURE_CHECK_S` until it is found exposed or cancelled;
        every `RECORD_REFRESH_S`, re-check the verified files it serves (``pins``: an
        in-place write changes their stamp; `PinnedLaunch.changed`) and bring its record's
        group members up to date (issue 8 item 8: a forking wrapper's server is found again
        after a supervisor SIGKILL)."""
        refresh_at = trio.current_time()
        with scope:
            while True:
                exposure = await self._scan(process)
                if exposure is not None:
                    await self._post(ExposureFound(process, exposure))
                    return
                if trio.current_time() >= refresh_at and process.running:
                    refresh_at = trio.current_time() + RECORD_REFRESH_S
                    hold = pins.changed() if pins is not None else None
                    if hold is not None:
                        await self._post(PinChanged(process, hold))
                        return
                    process.track_descendants()  # a `setsid` wrapper's server: by pid
                    await self._refresh_record(process)
                await trio.sleep(EXPOSURE_CHECK_S)

    async def _refresh_record(self, process: ManagedProcess) -> None:
        if self.plan.launch is not None:
            await self.edges.containment.refresh(self.plan.launch, process.pid)

    async def _adopted_exposure(
        self, process: ManagedProcess | None, report: ServerReport
    ) -> Exposure | None:
        """An adopted server's exposure, found through whoever listens on its port; it is
        only ever reported, never acted on (FC-15)."""
        if process is not None or not isinstance(report.health, Up):
            return None
        spec = self.plan.spec
        owner = await self.net.port_owner(str(spec.bind_ip()), spec.port())
        return None if owner is None else await self.net.scan(owner, spec.port())

    async def _scan(self, process: ManagedProcess | None) -> Exposure | None:
        if process is None or not process.running:
            return None
        return await self.net.scan(process.pid, self.plan.spec.port())

    async def _identity(
        self, process: ManagedProcess | None, report: ServerReport
    ) -> tuple[bool | None, int | None]:
        if process is None or not isinstance(report.health, Up):
            return None, None
        return await listener_owner(self.net, self.plan.spec, process)

    async def confirm_adopted(self, reply: ReplyTo[None]) -> None:
        """An adopted start only checks that the server answers (checklist item 21)."""
        report = await self._probe()
        if isinstance(report.health, Unreachable):
            refuse(
                reply,
                BackendError(
                    f"adopted server is not answering ({report.health.why}); "
                    "inferactors does not start adopted servers"
                ),
            )
            return
        await self._post(Confirmed(reply))

    # Health.

    async def health(self, process: ManagedProcess | None, reply: ReplyTo[ServerReport]) -> None:
        """Answer one probe report; a managed server that is not running is not probed, so
        nothing goes to whoever holds its port now (issue 8 item 6)."""
        if self.plan.launch is not None and (process is None or not process.running):
            answer(reply, ServerReport(Unreachable("the server is not running; nothing was sent")))
            return
        answer(reply, await self._probe())

    async def deep_health(
        self, process: ManagedProcess | None, reply: ReplyTo[CompletionResult]
    ) -> None:
        """Ask the server for one real token (checklist item 62; FC-07, FC-09), once its
        port is proven to be ``process``'s (`ensure_ours`): nothing goes to an impostor."""
        try:
            await self.ensure_ours(process)
            result = await self.one_token(self.config.deep_timeout_s)
        except InferactorsError as error:
            refuse(reply, error)
        else:
            answer(reply, result)

    async def watchdog(
        self, process: ManagedProcess | None, watchdog: Watchdog, scope: trio.CancelScope
    ) -> None:
        """Every ``interval_s``, one token within ``timeout_s``; report each result."""
        with scope:
            while True:
                await trio.sleep(watchdog.interval_s)
                why: str | None = None
                try:
                    await self.ensure_ours(process)
                    await self.one_token(watchdog.timeout_s)
                except InferactorsError as error:
                    why = str(error)
                await self._post(WatchdogResult(process, why))

    async def ensure_ours(self, process: ManagedProcess | None) -> None:
        """`identity.ensure_ours` for a managed server; an adopted one is not ours to check."""
        if self.plan.launch is not None:
            await ensure_ours(self.net, self.plan.spec, process)

    async def one_token(self, timeout_s: float) -> CompletionResult:
        """One real token with a fresh client and ONE ``timeout_s`` deadline for the whole
        call: the probe that finds the server up and the completion together.

        Raises:
            DeepHealthTimeout: no answer in time.
            BackendError: the server is not up or the completion failed.
        """
        prober = self.open_prober(self.plan.spec.base_url(), timeout_s)
        try:
            with trio.move_on_after(timeout_s):
                return await self._one_token(prober)
            raise DeepHealthTimeout(f"deep health: no complete answer within {timeout_s:g} s")
        finally:
            with trio.move_on_after(1.0, shield=True):
                await prober.aclose()

    async def _one_token(self, prober: Prober) -> CompletionResult:
        report = await prober.report(self._flavor)
        if not isinstance(report.health, Up):
            raise BackendError(f"deep health: the server is not up ({_words(report)})")
        model = completion_model(self._flavor, report.models, self.plan.served_model)
        try:
            return await prober.tiny_completion(model)
        except BackendError as error:
            if str(error).startswith("deep health"):
                raise
            raise type(error)(f"deep health: {error}") from error

    async def _probe(self) -> ServerReport:
        base = self.plan.spec.base_url()
        return await probe_once(self.open_prober, base, self.config.probe_timeout_s, self._flavor)


def _start_error(launch: Launch, error: InferactorsError | OSError) -> InferactorsError:
    if isinstance(error, InferactorsError):
        return error
    return BackendError(f"cannot start {launch.program}: {error}")


def _words(report: ServerReport) -> str:
    health = report.health
    why = getattr(health, "why", None)
    return f"{type(health).__name__.lower()}: {why}" if why else type(health).__name__.lower()
