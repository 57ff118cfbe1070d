"""What an instance actor makes of what its watchers report, and the tasks that watch.

The instance actor (``instance``) answers commands; `InstanceWatch` is its other half: it
starts the tasks that watch one process (exit watcher, monitor, exposure watch, readiness
timer, and the deep-health watchdog once the server is ready), ends them together, and
reacts to what they post back: a probe's report, an exposure beyond loopback, an expired
readiness timer, a failed deep-health check. A reaction that must end the process asks
for it through `InstanceWatch.stop_process`, which the actor uses for the operator's stop
too, so at most one stop is ever under way.

Like the actor, every method here is synchronous and runs inside the actor's loop: the
watch shares the actor's `InstanceBook` and is, with the actor, its only writer.
"""

from __future__ import annotations

import attrs
import trio

from ..._edges.bundle import ProbeTimed
from ..._edges.process import ManagedProcess
from ..._events import (
    DeepHealthFailed,
    DeepHealthPassed,
    ExposureDetected,
    ImpostorDetected,
    ModelTampered,
    StopReason,
)
from ..._flavor import InferFlavor
from ..._policy.admission import Plan
from ..._policy.status import map_ollama_report
from ..._status import InstanceState, InstanceStatus
from ..mailbox import Mailbox, ScopeGroup, scoped
from .book import InstanceBook
from .messages import (
    DeepHealthDone,
    PinChanged,
    Probed,
    ReadinessExpired,
    StartupFault,
    WatchdogResult,
)
from .pins import PinnedLaunch
from .work import InstanceWork

EXPOSURE_GRACE_S = 3.0
"""Grace for a server stopped for listening beyond loopback (seed-behaviour section 4)."""

HEALTH_KILL_GRACE_S = 3.0
"""Grace for a server killed by the deep-health watchdog."""

TAMPERED_GRACE_S = 3.0
"""Grace for a server stopped because a verified model file changed while it served."""

STARTUP_FAULT_GRACE_S = 0.5
"""Grace for a starting server that printed a fault it hangs on (issue 9: stopped within
1 s of the line: mlx_lm.server whose bind failed ignores SIGTERM and gets SIGKILL)."""


@attrs.define(eq=False)
class InstanceWatch:
    """The watching tasks of one instance and the actor's reactions to their results.

    Built by `InstanceActor.create` around the actor's own mailbox, workers and book.
    """

    instance_id: str
    plan: Plan
    _box: Mailbox
    _work: InstanceWork
    _book: InstanceBook
    _process_tasks: ScopeGroup | None = None
    _watch_tasks: ScopeGroup | None = None

    # The tasks.

    def start_process_tasks(self, process: ManagedProcess, pins: PinnedLaunch | None) -> None:
        """Watch a process that just started: its exit, probes, exposure, the verified files
        it serves (``pins``) and readiness."""
        self.cancel_process_tasks()
        group = self._process_tasks = ScopeGroup()
        self._box.finish(self._work.watch_exit, process)
        self._box.soon(self._work.monitor, process, group.new())
        self._box.soon(self._work.exposure_watch, process, group.new(), pins)
        self._box.soon(scoped, group.new(), watch_startup, process, self._work)
        timeout = self.plan.supervision.readiness_timeout_s
        if timeout is not None:
            self._box.soon(scoped, group.new(), self._work.readiness_timer, process, timeout)

    def cancel_process_tasks(self) -> None:
        """End the tasks watching the current process (it exited)."""
        if self._process_tasks is not None:
            self._process_tasks.cancel()
            self._process_tasks = None

    def forget_tasks(self) -> None:
        """The actor crashed: the mailbox cancelled the watching tasks; a restart (a new
        process, or a new watch of an adopted server) starts them afresh."""
        self.cancel_process_tasks()
        if self._watch_tasks is not None:
            self._watch_tasks.cancel()
            self._watch_tasks = None

    def watch_adopted(self) -> None:
        """Start probing an adopted server, once."""
        if self._watch_tasks is None:
            self._watch_tasks = ScopeGroup()
            self._book.ready_once = False  # its watchdog starts with this watch
            self._box.soon(self._work.monitor, None, self._watch_tasks.new())

    def stop_process(self, reason: StopReason, grace_s: float) -> None:
        """Stop the process for ``reason`` with ``grace_s`` seconds between TERM and KILL,
        unless there is none or a stop is already under way."""
        book = self._book
        if book.process is None or book.stop_reason is not None:
            return
        book.stop_reason = reason
        self._box.finish(self._work.stop, book.process, grace_s)

    # What the tasks report.

    def on_probed(self, message: Probed) -> None:
        """Apply a probe's report, or its exposure."""
        book = self._book
        if message.exposure is not None and not book.managed:
            self._on_adopted_exposure(message.exposure.describe())
        if message.exposure is not None and message.process is not None:
            self.on_exposure(message.process, message.exposure.describe())
        elif message.process is book.process and not (book.managed and book.process is None):
            self._apply_report(message)

    def on_exposure(self, process: ManagedProcess, detail: str) -> None:
        """Stop a managed server found listening beyond loopback; it stays stopped until
        reload (checklist 59)."""
        book = self._book
        if process is not book.process or book.exposed is not None:
            return
        book.exposed = detail
        book.wanted = False
        self._box.emit(ExposureDetected(self.instance_id, detail, trio.current_time()))
        self.stop_process(StopReason.EXPOSURE, EXPOSURE_GRACE_S)

    def on_pin_changed(self, message: PinChanged) -> None:
        """A verified file changed under the running server: what a tampered spawn does
        (`ModelTampered`, held down until re-registration or reload), and the server is
        stopped (stop reason ``tampered``: never restarted, never counted)."""
        book = self._book
        if message.process is not book.process or book.tampered is not None:
            return
        book.tampered = hold = message.hold
        book.wanted = False
        error = hold.error
        now = trio.current_time()
        self._box.emit(ModelTampered(self.instance_id, error.model, error.shard, error.why, now))
        self.stop_process(StopReason.TAMPERED, TAMPERED_GRACE_S)

    def on_startup_fault(self, message: StartupFault) -> None:
        """Stop a starting process that printed a fault it will not exit on (reason
        ``start-up failure``; its `ProcessExited` carries the diagnosis). A configuration
        error it shows while it lives (`InstanceBook.config_fault`: listening on the wrong
        address family, refusing our requests) stops it alike, from `_apply_report`."""
        if message.process is self._book.process and not self._book.ready_once:
            self.stop_process(StopReason.STARTUP_FAILURE, STARTUP_FAULT_GRACE_S)

    def on_readiness_expired(self, message: ReadinessExpired) -> None:
        """Stop a process that was not ready in time."""
        if message.process is self._book.process and not self._book.ready_once:
            self.stop_process(StopReason.READINESS_TIMEOUT, 0.0)

    def on_watchdog(self, message: WatchdogResult) -> None:
        """Count a deep-health result; stop the process once the failures reach the limit."""
        watchdog = self.plan.supervision.watchdog
        if message.process is not self._book.process or watchdog is None:
            return
        kill = self._book.note_watchdog(message.why, watchdog.failures)
        if message.ttft_s is not None:
            self._passed(message.ttft_s)
        if message.why is not None:
            failures, now = self._book.health_failures, trio.current_time()
            self._box.emit(DeepHealthFailed(self.instance_id, failures, message.why, now))
        if kill and self._book.process is not None:
            self.stop_process(StopReason.HEALTH_KILL, HEALTH_KILL_GRACE_S)

    def on_deep_health(self, message: DeepHealthDone) -> None:
        """A caller's deep health passed: publish its time to first token (issue 9 item 5)."""
        if message.process is self._book.process:
            self._passed(message.ttft_s)

    def status(self) -> InstanceStatus:
        """The instance's status now."""
        return self._book.status(trio.current_time())

    def _apply_report(self, message: Probed) -> None:
        book = self._book
        if book.process is not None and not book.process.running:
            return  # it just died: its exit is on the way and will say so
        port = self.plan.spec.port()
        impostor = book.note_identity(message.owner_ok, message.owner_pid, port)
        if impostor is not None:
            now = trio.current_time()
            self._box.emit(ImpostorDetected(self.instance_id, message.owner_pid, impostor, now))
        names, now = self.plan.listed_names, trio.current_time()
        book.note_report(message.report, names, message.first_token, now, message.stopped)
        self._work.edges.on_probe(ProbeTimed(self.instance_id, message.report.latency_s, now))
        spec = self.plan.spec
        if not book.managed and spec.runtime is InferFlavor.OLLAMA and spec.model:
            book.mapped = map_ollama_report(message.report, tag=spec.model, adopted=True)
        key_sent = self.plan.api_key is not None
        book.note_truth(message.report, message.confirmation, message.misbound, key_sent=key_sent)
        if book.config_fault(now) is not None:  # a config error while it lives: stop it
            self.stop_process(StopReason.STARTUP_FAILURE, STARTUP_FAULT_GRACE_S)
        if message.ttft_s is not None:
            self._passed(message.ttft_s)
        if book.ready or (not book.managed and book.mapped.state is InstanceState.RUNNING):
            self._on_ready(book.process)
        if book.note_health(message.report, trio.current_time()) is not None:
            self.stop_process(StopReason.HEALTH_KILL, HEALTH_KILL_GRACE_S)

    def _passed(self, ttft_s: float) -> None:
        """A deep health passed: publish its time to first token, note whether it was slow."""
        self._book.note_passed(ttft_s, self.plan.supervision.slow_threshold_s)
        self._box.emit(DeepHealthPassed(self.instance_id, ttft_s, trio.current_time()))

    def _on_ready(self, process: ManagedProcess | None) -> None:
        if self._book.ready_once:
            return
        self._book.ready_once = True
        if process is not None:
            process.lines.stop()  # Running: its output is no longer read line by line
        watchdog = self.plan.supervision.watchdog
        group = self._process_tasks if process is not None else self._watch_tasks
        if watchdog is not None and group is not None:
            self._box.soon(self._work.watchdog, process, watchdog, group.new())

    def _on_adopted_exposure(self, detail: str) -> None:
        if self._book.exposed != detail:
            self._book.exposed = detail
            note = f"{detail} (reported only: inferactors never signals an adopted server)"
            self._box.emit(ExposureDetected(self.instance_id, note, trio.current_time()))


async def watch_startup(process: ManagedProcess, work: InstanceWork) -> None:
    """Wait for ``process`` to print a fault it hangs on (`LineWatch.wait_fatal`), then
    tell the actor (`StartupFault`, through ``work.post``: a channel among a worker's
    arguments would be taken for a reply channel); cancelled with the process's tasks."""
    diagnosis = await process.lines.wait_fatal()
    try:
        await work.post.send(StartupFault(process, diagnosis))
    except (trio.ClosedResourceError, trio.BrokenResourceError):
        pass  # the actor is gone; its teardown stops the process
