"""Tests of the kill steps at exact times: `ManagedProcess` driving a fake child under
MockClock, which obeys or ignores each signal as told, so the SIGTERM, the grace, the
SIGKILL, the output drain and the reap bound can be checked to the second.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from edges.process_support import Launch
from inferactors._edges.process import OUTPUT_DRAIN_S, REAP_BOUND_S, ManagedProcess
from inferactors._edges.spawn import OpenProcess
from inferactors._policy.privilege import RunAs

pytestmark = pytest.mark.usefixtures("no_leaked_processes")


@attrs.define(eq=False)
class FakeChild:
    """A child that obeys or ignores signals as told, and records them with their times."""

    ignores: frozenset[int] = frozenset()
    keeps_pipes_open: bool = False
    pid: int = 4242
    signals: list[tuple[float, int]] = attrs.field(factory=list)
    returncode: int | None = None
    exited: trio.Event = attrs.field(factory=trio.Event)
    out_pair: tuple[trio.testing.MemorySendStream, trio.testing.MemoryReceiveStream] = attrs.field(
        factory=trio.testing.memory_stream_one_way_pair
    )
    err_pair: tuple[trio.testing.MemorySendStream, trio.testing.MemoryReceiveStream] = attrs.field(
        factory=trio.testing.memory_stream_one_way_pair
    )

    @property
    def stdout(self) -> trio.abc.ReceiveStream:
        return self.out_pair[1]

    @property
    def stderr(self) -> trio.abc.ReceiveStream:
        return self.err_pair[1]

    async def wait_exiting(self) -> None:
        await self.exited.wait()

    def reap(self) -> int:
        assert self.returncode is not None
        return self.returncode

    def signal_group(self, signum: int) -> bool:
        self.signals.append((trio.current_time(), signum))
        if signum not in self.ignores and signum != signal.SIGCONT:  # SIGCONT only resumes
            self.die(-signum)
        return True

    def group_alive(self) -> bool:
        return False  # a leader alone: the forking wrapper is tests/edges/test_fork_wrapper_stop

    def die(self, returncode: int) -> None:
        if self.exited.is_set():
            return
        self.returncode = returncode
        self.exited.set()
        if not self.keeps_pipes_open:
            self.out_pair[0].close()
            self.err_pair[0].close()


def opener(child: FakeChild, seen: dict[str, object] | None = None) -> OpenProcess:
    async def open_fake(
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        run_as: RunAs | None,
        pass_fds: Sequence[int] = (),
    ) -> FakeChild:
        await trio.lowlevel.checkpoint()
        if seen is not None:
            seen.update(argv=tuple(argv), cwd=cwd, env=dict(env), run_as=run_as)
        return child

    return open_fake


FAKE_LAUNCH = Launch(Path("/opt/llama-server"), ("--port", "8090"), Path("/srv/x"), (("A", "1"),))


async def test_spawn_hands_argv_cwd_env_and_run_as_to_the_opener(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    seen: dict[str, object] = {}
    child = FakeChild()
    run_as = RunAs(1000, 1000, "alice")
    process = await ManagedProcess.spawn(
        nursery, FAKE_LAUNCH, open_process=opener(child, seen), run_as=run_as
    )
    assert seen == {
        "argv": ("/opt/llama-server", "--port", "8090"),
        "cwd": Path("/srv/x"),
        "env": {"A": "1"},
        "run_as": run_as,
    }
    assert process.started_at == trio.current_time()
    await process.terminate(grace_s=1.0)


async def test_kill_steps_term_grace_kill_at_exact_times(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    child = FakeChild(ignores=frozenset({signal.SIGTERM}))
    process = await ManagedProcess.spawn(nursery, FAKE_LAUNCH, open_process=opener(child))
    await trio.sleep(10.0)
    evidence = await process.terminate(grace_s=3.0)
    assert child.signals == [
        (10.0, signal.SIGTERM),
        (10.0, signal.SIGCONT),  # at once after SIGTERM, as systemd: a stopped server runs
        (13.0, signal.SIGKILL),  # step 3: the grace ran out
        (13.0, signal.SIGKILL),  # the watcher's sweep of the group after the leader's exit
    ]
    assert evidence.elapsed_s == 13.0
    assert evidence.signal == signal.SIGKILL
    assert evidence.killed_after_grace


async def test_obeyed_sigterm_sends_no_kill_to_the_leader(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    child = FakeChild()
    process = await ManagedProcess.spawn(nursery, FAKE_LAUNCH, open_process=opener(child))
    evidence = await process.terminate(grace_s=3.0)
    assert [signum for _, signum in child.signals] == [
        signal.SIGTERM,
        signal.SIGCONT,
        signal.SIGKILL,
    ]
    assert evidence.signal == signal.SIGTERM
    assert not evidence.killed_after_grace
    assert evidence.elapsed_s == 0.0


async def test_a_pipe_held_open_is_abandoned_after_the_drain(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    child = FakeChild(keeps_pipes_open=True)
    process = await ManagedProcess.spawn(nursery, FAKE_LAUNCH, open_process=opener(child))
    await child.out_pair[0].send_all(b"loading model\n")
    child.die(0)
    evidence = await process.wait_exited()
    assert trio.current_time() == OUTPUT_DRAIN_S
    assert not evidence.output_eof
    assert evidence.stdout == b"loading model\n"
    assert evidence.exit_code == 0


async def test_an_unkillable_leader_cannot_hang_terminate(
    autojump_clock: trio.testing.MockClock,
) -> None:
    child = FakeChild(ignores=frozenset({signal.SIGTERM, signal.SIGKILL}))
    async with trio.open_nursery() as nursery:
        process = await ManagedProcess.spawn(nursery, FAKE_LAUNCH, open_process=opener(child))
        evidence = await process.terminate(grace_s=2.0)
        assert trio.current_time() == 2.0 + REAP_BOUND_S + OUTPUT_DRAIN_S + 1.0
        assert evidence.exit_code is None
        assert evidence.signal is None
        assert evidence.describe() == "exit status unknown after the grace period"
        nursery.cancel_scope.cancel()
    assert trio.current_time() == 2.0 + 2 * REAP_BOUND_S + OUTPUT_DRAIN_S + 1.0


async def test_cancelled_terminate_kills_at_once(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    child = FakeChild(ignores=frozenset({signal.SIGTERM}))
    process = await ManagedProcess.spawn(nursery, FAKE_LAUNCH, open_process=opener(child))
    with trio.move_on_after(1.0) as scope:
        await process.terminate(grace_s=30.0)
    assert scope.cancelled_caught
    assert child.signals[:3] == [
        (0.0, signal.SIGTERM),
        (0.0, signal.SIGCONT),
        (1.0, signal.SIGKILL),
    ]
    assert not process.running
    assert (await process.wait_exited()).killed_after_grace


async def test_exit_between_grace_and_kill_is_not_a_kill(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    child = FakeChild(ignores=frozenset({signal.SIGTERM, signal.SIGKILL}))
    process = await ManagedProcess.spawn(nursery, FAKE_LAUNCH, open_process=opener(child))

    async def exit_late() -> None:
        await trio.sleep(3.0)
        child.die(0)

    nursery.start_soon(exit_late)
    evidence = await process.terminate(grace_s=3.0)
    assert evidence.exit_code == 0
    assert not evidence.killed_after_grace
