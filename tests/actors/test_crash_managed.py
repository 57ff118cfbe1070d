"""A crash inside one managed instance stays inside it (issue 8, item 1; OTP's one_for_one).

Real processes, run as the unprivileged account: a bug injected through the edges (the
prober of one port raises) crashes that instance alone: the event names the exception, its
server's process group is stopped gracefully (SIGTERM) and gone, and the supervisor
restarts it under its policy, counted in its budget, while a sibling keeps Running with the
same pid and the facade keeps answering. Nesting bombs from a real server on every endpoint
we read (``/health``, ``/v1/models``, the first token's completion) never end the runtime:
the instance crashes (naming RecursionError) and restarts, or takes the reply as a bad one
(Degraded).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from actors.crash_support import (
    BOMB_HELPER,
    BugSwitch,
    Recorder,
    another_port,
)
from actors.managed_support import Lab, chat, ready, server_program, wait_gone
from inferactors import (
    BackendError,
    Event,
    InstanceCrashed,
    InstanceState,
    ProcessExited,
    ProcessStarted,
    RestartPolicy,
    RestartScheduled,
    StopReason,
    Supervision,
    open_runtime,
)
from proc_checks import group_alive
from support import Unprivileged

RESTARTING = Supervision(restart=RestartPolicy(max_restarts=3, base_s=0.05, cap_s=0.2, jitter=0.0))


def exit_of(iid: str, pid: int) -> Callable[[Event], bool]:
    def match(event: Event) -> bool:
        return isinstance(event, ProcessExited) and (event.instance_id, event.pid) == (iid, pid)

    return match


async def test_a_worker_bug_crashes_only_its_managed_instance_which_restarts(
    lab: Lab, free_port: int
) -> None:
    bugs = BugSwitch()
    async with open_runtime(lab.config(), open_prober=bugs.factory()) as runtime:
        recorder = Recorder(await runtime.subscribe(4096))
        target = await runtime.load(chat(free_port), RESTARTING)
        sibling = await runtime.load(chat(another_port(), role="embed"))
        for handle in (target, sibling):
            await runtime.start(handle)
            await ready(runtime, handle)
        old, sibling_pid = (runtime.status(target)).pid, (runtime.status(sibling)).pid
        assert old is not None
        assert sibling_pid is not None

        bugs.arm(free_port, lambda: ValueError("injected bug"))
        crash = await recorder.crash_of(target.instance_id)
        assert (crash.error_type, crash.message) == ("ValueError", "injected bug")
        assert crash.where == "worker monitor"
        exited = await recorder.until(exit_of(target.instance_id, old))
        assert isinstance(exited, ProcessExited)
        assert (exited.reason, exited.signal) == (StopReason.ERROR, signal.SIGTERM)
        await wait_gone(old)
        assert not group_alive(old), "the crashed instance's process group outlived it"

        scheduled = await recorder.until(lambda e: isinstance(e, RestartScheduled))
        assert isinstance(scheduled, RestartScheduled)
        assert (scheduled.instance_id, scheduled.attempt) == (target.instance_id, 1)
        await recorder.until(
            lambda e: (
                isinstance(e, ProcessStarted)
                and (e.instance_id, e.pid != old) == (target.instance_id, True)
            )
        )
        await ready(runtime, target)
        status = runtime.status(target)
        assert status.pid not in (None, old)
        assert status.restarts == 1, "the crash was not counted in the restart budget"

        still = runtime.status(sibling)
        assert (still.state, still.pid) == (InstanceState.RUNNING, sibling_pid)
        touched = [e for e in recorder.of(sibling.instance_id) if not _startup(e)]
        assert touched == [], f"the sibling was disturbed: {touched}"
        assert set(await runtime.instances()) == {target, sibling}


def _startup(event: Event) -> bool:
    return not isinstance(event, InstanceCrashed | ProcessExited | RestartScheduled)


async def test_a_caller_of_a_crashed_managed_worker_is_answered_with_the_crash(
    lab: Lab, free_port: int
) -> None:
    bugs = BugSwitch()
    async with open_runtime(lab.config(), open_prober=bugs.factory()) as runtime:
        recorder = Recorder(await runtime.subscribe(4096))
        handle = await runtime.load(chat(free_port), RESTARTING)
        await runtime.start(handle)
        await ready(runtime, handle)
        old = (runtime.status(handle)).pid
        assert old is not None
        bugs.arm(free_port, lambda: KeyError("missing"))
        with pytest.raises(BackendError) as answered:
            await runtime.health(handle)
        assert str(answered.value) == (
            f"{handle.instance_id} crashed in worker health (KeyError: 'missing')"
        )
        await recorder.until(exit_of(handle.instance_id, old))
        await ready(runtime, handle)  # restarted
        assert (runtime.status(handle)).pid != old


@pytest.mark.parametrize("path", ["/health", "/v1/models", "/v1/chat/completions"])
async def test_a_nesting_bomb_from_a_managed_server_never_ends_the_runtime(
    lab: Lab, free_port: int, unprivileged: Unprivileged, server_dir: Path, path: str
) -> None:
    program = server_program(unprivileged, server_dir / "bomb-bin" / "bomb_server", BOMB_HELPER)
    config = lab.config(program, f"{path}@{free_port}")
    async with open_runtime(config) as runtime:
        recorder = Recorder(await runtime.subscribe(4096))
        sibling = await runtime.load(chat(another_port(), role="embed"))
        await runtime.start(sibling)
        await ready(runtime, sibling)
        sibling_pid = (runtime.status(sibling)).pid
        target = await runtime.load(chat(free_port), RESTARTING)
        await runtime.start(target)
        await _after_a_bomb(lab.data_root / target.instance_id / "requests")

        status = runtime.status(target)
        assert status.state is not InstanceState.RUNNING, status
        crashes = [e for e in recorder.of(target.instance_id) if isinstance(e, InstanceCrashed)]
        assert all(crash.error_type == "RecursionError" for crash in crashes), crashes
        if crashes:  # crashed rather than refused as a bad reply: its server was stopped
            stopped = await recorder.until(
                lambda e: isinstance(e, ProcessExited) and e.instance_id == target.instance_id
            )
            assert isinstance(stopped, ProcessExited)
            assert stopped.reason is StopReason.ERROR
        still = runtime.status(sibling)
        assert (still.state, still.pid) == (InstanceState.RUNNING, sibling_pid)
        assert set(await runtime.instances()) == {sibling, target}


async def _after_a_bomb(requests: Path) -> None:
    """Wait until the server got a request after its first bomb: by then the bomb's reply
    was read and parsed (the worker that read it went on, or a restarted server is asked)."""
    log = trio.Path(requests)
    with trio.fail_after(30):
        while True:
            lines = (await log.read_text()).splitlines() if await log.exists() else []
            bombs = [index for index, line in enumerate(lines) if line.startswith("BOMB ")]
            if bombs and len(lines) > bombs[0] + 1:
                return
            await trio.sleep(0.02)
