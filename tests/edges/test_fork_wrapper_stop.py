"""Tests of issue 8 item 8: a server started through a wrapper that forks without exec
(``tests/helpers/fork_wrapper.sh``, llama-swap #804, FC-12).

Stop (``_edges/process.py``): the wrapper, the group's leader, dies of the SIGTERM at once,
but the grace is the whole group's: its server gets the grace to finish, and SIGKILL comes
only after it. After a supervisor SIGKILL (``_edges/orphans.py``): the leader dies of the
parent-death signal, its server lives on in the leaderless group, and the next runtime finds
the group through the members its record lists and reaps it, never a process whose start
differs from the record's.
"""

from __future__ import annotations

import signal
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from edges.orphan_wrapper_support import (
    FakeTable,
    leaderless_record,
    reap_in_next_runtime,
    sigkill_recording_runtime,
    wait_members,
)
from edges.process_support import (
    GRACEFUL,
    HELPERS,
    PYTHON,
    linux_only,
    wait_for_file,
    wrapper_launch,
)
from inferactors._edges.netcheck import port_in_use
from inferactors._edges.orphan_report import OrphanOutcome
from inferactors._edges.orphans import reap_orphans
from inferactors._edges.process import GROUP_POLL_S, ManagedProcess
from proc_checks import group_members, is_gone
from support import Unprivileged

pytestmark = [pytest.mark.usefixtures("no_leaked_processes"), linux_only]


async def test_the_group_gets_the_grace_after_the_wrapper_died(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    launch = wrapper_launch(tmp_path, "wait", PYTHON, "-c", GRACEFUL)
    process = await ManagedProcess.spawn(nursery, launch)
    server = int(await wait_for_file(tmp_path / "grandchild.pid"))
    await wait_for_file(tmp_path / "ready")
    asked = trio.current_time()
    evidence = await process.terminate(5.0)
    took_s = trio.current_time() - asked
    assert (tmp_path / "clean").exists(), "the server was killed before it finished"
    assert evidence.signal == signal.SIGTERM, "the wrapper itself dies of the SIGTERM"
    assert not evidence.killed_after_grace
    assert 0.5 <= took_s < 3.0
    assert is_gone(server)
    assert group_members(process.pgid) == []


async def test_a_server_that_ignores_sigterm_is_killed_only_after_the_whole_grace(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    launch = wrapper_launch(tmp_path, "wait", PYTHON, str(HELPERS / "ignore_term.py"))
    process = await ManagedProcess.spawn(nursery, launch)
    server = int(await wait_for_file(tmp_path / "grandchild.pid"))
    await wait_for_file(tmp_path / "ready")
    asked = trio.current_time()
    evidence = await process.terminate(1.0)
    took_s = trio.current_time() - asked
    assert evidence.killed_after_grace
    assert 1.0 <= took_s < 3.0
    assert is_gone(server)
    assert group_members(process.pgid) == []


@attrs.define(eq=False)
class WrapperChild:
    """A leader that dies of SIGTERM at once; its forked server lives ``server_s`` more
    seconds after the SIGTERM (None: it ignores SIGTERM), until a SIGKILL."""

    server_s: float | None
    pid: int = 4343
    signals: list[tuple[float, int]] = attrs.field(factory=list)
    server_until: float = float("inf")
    exited: trio.Event = attrs.field(factory=trio.Event)
    returncode: int | None = None

    @property
    def stdout(self) -> trio.abc.ReceiveStream:
        return _ended()

    @property
    def stderr(self) -> trio.abc.ReceiveStream:
        return _ended()

    async def wait_exiting(self) -> None:
        await self.exited.wait()

    def reap(self) -> int:
        assert self.returncode is not None
        return self.returncode

    def signal_group(self, signum: int) -> bool:
        now = trio.current_time()
        self.signals.append((now, signum))
        if signum == signal.SIGKILL:
            self.server_until = min(self.server_until, now)
        elif signum == signal.SIGTERM and self.server_s is not None:
            self.server_until = now + self.server_s
        if self.returncode is None:
            self.returncode = -signum
            self.exited.set()
        return True

    def group_alive(self) -> bool:
        return trio.current_time() < self.server_until


def _ended() -> trio.testing.MemoryReceiveStream:
    stream = trio.testing.MemoryReceiveStream()
    stream.put_eof()
    return stream


@pytest.mark.parametrize(
    ("server_s", "ended_at", "killed"), [(1.5, 1.5, False), (None, 3.0, True), (5.0, 3.0, True)]
)
async def test_kill_steps_of_a_leaderless_group_at_exact_times(
    autojump_clock: trio.testing.MockClock, server_s: float | None, ended_at: float, killed: bool
) -> None:
    """Grace 3 s; the wrapper dies of the SIGTERM at 0 s. A server that takes 1.5 s ends on
    its own at 1.5 s; one that ignores SIGTERM or needs 5 s is SIGKILLed at 3 s."""
    child = WrapperChild(server_s)

    async def opener(*_: object, **__: object) -> WrapperChild:
        await trio.lowlevel.checkpoint()
        return child

    async with trio.open_nursery() as nursery:
        launch = wrapper_launch(Path("/"), "wait")
        process = await ManagedProcess.spawn(nursery, launch, open_process=opener)
        evidence = await process.terminate(3.0)
        finished = trio.current_time()
    assert child.signals[0] == (0.0, signal.SIGTERM)
    assert child.server_until == pytest.approx(ended_at)
    assert finished == pytest.approx(ended_at, abs=2 * GROUP_POLL_S)
    assert evidence.killed_after_grace is killed


def test_a_leaderless_group_with_a_recorded_member_is_reaped(instance_dir: Path) -> None:
    leaderless_record(instance_dir, members=[[501, 1001.0]])
    table = FakeTable(member_start=1001.0)
    [report] = reap_orphans(instance_dir.parent, grace_s=3.0, table=table)
    assert report.outcome is OrphanOutcome.KILLED
    assert table.signals == [(0.0, signal.SIGTERM), (0.0, signal.SIGCONT)]


@pytest.mark.parametrize("members", [[], [[501, 1001.5]], [[502, 1001.0]]])
def test_a_leaderless_group_not_proven_ours_is_never_signalled(
    instance_dir: Path, members: list[list[float]]
) -> None:
    """No members recorded (an older record), a recorded pid whose start differs (reused),
    or a recorded pid no longer in the group: reported, left alone."""
    path = leaderless_record(instance_dir, members=members)
    table = FakeTable(member_start=1001.0)
    [report] = reap_orphans(instance_dir.parent, grace_s=3.0, table=table)
    assert report.outcome is OrphanOutcome.ALIVE
    assert table.signals == []
    assert path.exists()


async def test_after_a_supervisor_sigkill_the_next_runtime_reaps_the_wrapped_server(
    server_dir: Path,
    registry_path: Path,
    llama_server: Path,
    unprivileged: Unprivileged,
    free_port: int,
) -> None:
    program = server_dir / "wrapped-llama-server"
    wrapper = HELPERS / "fork_wrapper.sh"
    program.write_text(f'#!/bin/sh\nexec /bin/sh {wrapper} wait server.pid {llama_server} "$@"\n')
    program.chmod(0o755)
    found = await sigkill_recording_runtime(
        registry_path, program, free_port, unprivileged, wait_members
    )
    leader, record, server = found
    assert not is_gone(server)
    assert group_members(record.pgid) == [server]
    reaped = await reap_in_next_runtime(registry_path, program, unprivileged)
    assert (reaped.pid, reaped.outcome) == (leader, OrphanOutcome.KILLED)
    assert reaped.detail == f"orphaned; group {record.pgid} ended by SIGTERM"
    assert is_gone(server)
    assert not await port_in_use("127.0.0.1", free_port)
