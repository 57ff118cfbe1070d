"""An admission (or an adopted start) that gave no verdict because our own loop ran late
(`NoVerdict`) never ends an instance Exited: it stays Loaded ("admission deferred"), is
said once in the log, and is checked again, paced (``_policy/lateness.py``
`deferred_delay_s`), until a real verdict; no-verdicts spend none of its restart budget.
Before, at 1,000 adopted servers, healthy ones read Exited "not reachable: cannot tell ..."
and were given up under the restart policy.

MockClock; `members.keep` with a stand-in runtime whose ``load`` says no verdict N times.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import attrs
import trio
import trio.testing

from inferactors._actors.runtime import InferRuntime
from inferactors._actors.runtime_status import InstanceHandle
from inferactors._config.convert import load_run_config
from inferactors._errors import AdmissionRefused, NoVerdict
from inferactors._policy.lateness import DEFERRED_FIRST_S
from inferactors._policy.probe_report import CompletionResult
from inferactors._policy.reload_plan import placements
from inferactors._service.hosts import RuntimeHost, Say
from inferactors._service.members import Member, keep
from inferactors._status import InstanceState, InstanceStatus

RUN_FILE = """node_id = "n"
[[instances]]
mode = "adopted"
role = "chat"
runtime = "infer.llamacpp"
serve = { port = 20130 }
supervision = { restart = { max_restarts = 1, base_s = 0.2, cap_s = 0.4, jitter = 0.0 } }
"""


@attrs.define
class StandInRuntime:
    """``load`` raises ``errors`` in turn (recording when it was asked), then loads."""

    errors: list[Exception]
    loads: list[float] = attrs.Factory(list)
    registry: None = None
    id: str = "llamacpp"

    async def load(self, spec: object, supervision: object) -> InstanceHandle:
        await trio.lowlevel.checkpoint()
        self.loads.append(trio.current_time())
        if self.errors:
            raise self.errors.pop(0)
        return InstanceHandle("llamacpp", "chat-0-n", "chat")

    async def start(self, handle: InstanceHandle) -> None:
        await trio.lowlevel.checkpoint()

    def status(self, handle: InstanceHandle) -> InstanceStatus:
        return InstanceStatus(InstanceState.RUNNING, serving=True)

    async def deep_health(self, handle: InstanceHandle) -> CompletionResult:
        await trio.lowlevel.checkpoint()
        return CompletionResult(" a", 0.01, "length")

    async def unload(self, handle: InstanceHandle) -> None:
        await trio.lowlevel.checkpoint()


@attrs.define
class Record:
    """A `Keeper` that keeps every state the member showed and every line said."""

    states: list[InstanceState] = attrs.Factory(list)
    lines: list[tuple[str, int]] = attrs.Factory(list)
    say: Say = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.say = self._say

    def _say(self, message: str, *, instance: str | None = None, level: int = 0) -> None:
        self.lines.append((message, level))

    def index(self, member: Member) -> None:
        """Nothing to route."""

    def changed(self, member: Member) -> None:
        self.states.append(member.status.state)


def _member(tmp_path: Path, runtime: StandInRuntime) -> Member:
    path = tmp_path / "run.toml"
    path.write_text(RUN_FILE)
    placement = placements(load_run_config(path))["chat"]
    host = RuntimeHost(cast(InferRuntime, runtime), placement)
    return Member("chat", placement, host)


def _no_verdict() -> NoVerdict:
    return NoVerdict(
        "cannot tell whether http://127.0.0.1:20130 answers now: GET /health: no verdict: "
        "inferactors' event loop ran 4103 ms late (the supervisor is overloaded; "
        "the server may be fine); try again"
    )


async def _keep_until(member: Member, record: Record, state: InstanceState) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(keep, member, record)
        with trio.fail_after(120):
            while member.status.state is not state:  # noqa: ASYNC110  (its own cache)
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()


async def test_no_verdicts_at_admission_keep_it_loaded_and_it_is_checked_again_paced(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    runtime = StandInRuntime([_no_verdict() for _ in range(4)])  # more than max_restarts
    member, record = _member(tmp_path, runtime), Record()
    await _keep_until(member, record, InstanceState.RUNNING)
    assert InstanceState.EXITED not in record.states
    assert InstanceState.LOADED in record.states
    assert member.refused is None
    assert len(runtime.loads) == 5  # four no-verdicts, then the verdict; never given up
    gaps = [
        later - earlier for earlier, later in zip(runtime.loads, runtime.loads[1:], strict=False)
    ]
    assert all(gap >= DEFERRED_FIRST_S for gap in gaps)
    assert gaps == sorted(gaps)  # paced: each wait at least as long as the one before
    deferred = [line for line, _ in record.lines if "admission deferred" in line]
    assert len(deferred) == 1  # said once
    assert "chat: started (llamacpp)" in [line for line, _ in record.lines]


async def test_while_deferred_the_status_says_so_and_a_real_refusal_still_counts(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    refused = AdmissionRefused("no llamacpp server answering at http://127.0.0.1:20130")
    runtime = StandInRuntime([_no_verdict(), refused])
    member, record = _member(tmp_path, runtime), Record()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(keep, member, record)
        await trio.sleep(0.5)
        shown = member.status
        await trio.sleep(DEFERRED_FIRST_S * 2)
        nursery.cancel_scope.cancel()
    assert shown.state is InstanceState.LOADED
    assert (shown.detail or "").startswith("admission deferred: cannot tell whether")
    assert "checking again in" in (shown.supervision or "")
    deferred_at = record.states.index(InstanceState.LOADED)
    assert InstanceState.EXITED in record.states[deferred_at:]  # a verdict: not there
