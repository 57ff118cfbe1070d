"""Tests of the process edge: capture, evidence, and real process groups being spawned and killed.

Real processes for everything the OS does (groups, signals, pipes, environment, limits,
parent-death signal); a fake child under MockClock for the exact timing of the kill steps.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path

import attrs
import blake3
import psutil
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from inferactors._edges.capture import OutputCapture, RunEvidence, describe_exit, signal_name
from inferactors._edges.process import OUTPUT_DRAIN_S, REAP_BOUND_S, ManagedProcess
from inferactors._edges.spawn import OpenProcess, _child_setup, clamp_limit
from inferactors._errors import BackendError
from inferactors._policy.privilege import RunAs
from proc_checks import group_members as live_group_members
from proc_checks import is_gone

HELPERS = Path(__file__).parents[1] / "helpers"
PYTHON = sys.executable
PATH_ENV = (("PATH", "/usr/bin:/bin"),)
linux = sys.platform.startswith("linux")
linux_only = pytest.mark.skipif(not linux, reason="Linux only")
_PR_SET_CHILD_SUBREAPER = 36


@attrs.frozen
class Launch:
    """A stand-in for ``_launch.Launch`` (satisfies `LaunchLike`)."""

    program: Path
    args: tuple[str, ...]
    cwd: Path
    env: tuple[tuple[str, str], ...] = PATH_ENV


def python_launch(cwd: Path, code: str, env: tuple[tuple[str, str], ...] = PATH_ENV) -> Launch:
    return Launch(Path(PYTHON), ("-c", code), cwd, env)


def wrapper_launch(cwd: Path, mode: str, *command: str) -> Launch:
    args = (str(HELPERS / "fork_wrapper.sh"), mode, str(cwd / "grandchild.pid"), *command)
    return Launch(Path("/bin/sh"), args, cwd)


async def eventually(predicate: Callable[[], bool], timeout_s: float) -> None:
    """Poll OS state (files, process table) until ``predicate`` holds; fail after the timeout."""
    with trio.fail_after(timeout_s):
        while not predicate():  # noqa: ASYNC110  no trio event can tell us about OS state
            await trio.sleep(0.005)


async def wait_gone(pid: int, timeout_s: float = 1.0) -> None:
    """Wait for a SIGKILLed ``pid`` to finish dying (its pipes close a moment before).

    If it does not, the test fails and the process is killed, so a failure leaks nothing.
    """
    try:
        await eventually(lambda: is_gone(pid), timeout_s)
    except trio.TooSlowError:
        os.kill(pid, signal.SIGKILL)
        raise


async def wait_group_empty(pgid: int, timeout_s: float = 1.0) -> None:
    """Wait until no live (non-zombie) process is left in group ``pgid``."""
    await eventually(lambda: not live_group_members(pgid), timeout_s)


async def wait_for_file(path: Path, timeout_s: float = 10.0) -> str:
    """Wait for a helper to write ``path`` (helpers write a temporary file and rename it)."""
    await eventually(path.exists, timeout_s)
    return await trio.Path(path).read_text()


def _set_subreaper(on: bool) -> None:
    """PR_SET_CHILD_SUBREAPER: orphans of our descendants become our children, not init's."""
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(_PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(int(on)), 0, 0, 0) == 0


@pytest.fixture(autouse=True)
def no_leaked_children() -> Iterator[None]:
    """Fail a test that leaves a process of ours running; reap the dead it orphaned.

    The test process is a child subreaper meanwhile, so a grandchild orphaned by a test
    (a killed wrapper's child, a SIGKILLed supervisor's server) is ours to see and reap,
    rather than a zombie left to an init that does not reap.
    """
    if linux:
        _set_subreaper(True)
    try:
        yield
    finally:
        if linux:
            _set_subreaper(False)
        leaked = []
        for child in psutil.Process().children(recursive=True):
            try:
                if child.status() != psutil.STATUS_ZOMBIE:
                    leaked.append(child)
                    child.kill()
                os.waitpid(child.pid, 0)
            except (psutil.NoSuchProcess, ChildProcessError):
                continue
        assert leaked == [], f"leaked child processes: {leaked}"


@pytest.fixture
async def nursery() -> AsyncIterator[trio.Nursery]:
    async with trio.open_nursery() as nursery:
        yield nursery
        nursery.cancel_scope.cancel()


# --- pure parts: describe_exit, OutputCapture, RunEvidence -----------------------------------


@given(st.integers(min_value=0, max_value=255))
def test_describe_exit_keeps_exit_status(code: int) -> None:
    assert describe_exit(code) == (code, None)


@given(st.integers(min_value=1, max_value=64))
def test_describe_exit_turns_negative_returncode_into_signal(signum: int) -> None:
    assert describe_exit(-signum) == (None, signum)


def test_signal_name_falls_back_to_the_number() -> None:
    assert signal_name(15) == "SIGTERM"
    assert signal_name(999) == "signal 999"


@settings(max_examples=80)
@given(
    data=st.binary(max_size=300),
    cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=6),
    head_limit=st.integers(min_value=0, max_value=120),
    tail_limit=st.integers(min_value=1, max_value=40),
)
def test_capture_is_independent_of_chunking(
    data: bytes, cuts: list[int], head_limit: int, tail_limit: int
) -> None:
    capture = OutputCapture(head_limit=head_limit, tail_limit=tail_limit)
    bounds = [0, *sorted(c for c in cuts if c <= len(data)), len(data)]
    for start, end in itertools.pairwise(bounds):
        capture.feed(data[start:end])
    assert capture.head == data[:head_limit]
    assert capture.total == len(data)
    assert capture.truncated == (len(data) > head_limit)
    assert capture.tail_text == expected_tail_text(data, tail_limit)


def expected_tail_text(data: bytes, tail_limit: int) -> str:
    """The last ``tail_limit`` bytes, minus at most 3 leading continuation bytes when cut."""
    tail = data[-tail_limit:]
    if len(data) > tail_limit:
        for _ in range(3):
            if tail[:1] and tail[0] & 0xC0 == 0x80:
                tail = tail[1:]
    return tail.decode("utf-8", errors="replace")


def test_capture_tail_drops_a_character_cut_in_half() -> None:
    capture = OutputCapture(head_limit=4, tail_limit=4)
    capture.feed("abcdé€".encode())  # é is 2 bytes, € is 3: the tail starts inside é
    assert capture.tail_text == "€"
    whole = OutputCapture(tail_limit=5)
    whole.feed("é€".encode())
    assert whole.tail_text == "é€"


def make_evidence(
    *, exit_code: int | None = 0, signum: int | None = None, killed_after_grace: bool = False
) -> RunEvidence:
    out = OutputCapture()
    out.feed(b"secret model output")
    out.mark_eof()
    err = OutputCapture()
    err.mark_eof()
    evidence = RunEvidence.from_run(
        args=("--port", "8090"), pid=42, returncode=0, elapsed_s=1.5, stdout=out, stderr=err
    )
    return attrs.evolve(
        evidence, exit_code=exit_code, signal=signum, killed_after_grace=killed_after_grace
    )


def test_evidence_describes_exit_and_signal() -> None:
    assert make_evidence().describe() == "exited with status 0"
    signalled = make_evidence(exit_code=None, signum=signal.SIGTERM)
    assert signalled.describe() == "killed by SIGTERM"
    late = make_evidence(exit_code=None, signum=signal.SIGKILL, killed_after_grace=True)
    assert late.describe() == "killed by SIGKILL after the grace period"
    assert RunEvidence.empty().describe() == "exit status unknown"


def test_evidence_audit_summarises_without_output() -> None:
    evidence = make_evidence().owned_by("infer.llamacpp", "chat-0123abcd-node1")
    audit = evidence.audit()
    assert audit["stdout_blake3"] == blake3.blake3(b"secret model output").hexdigest()
    assert audit["stdout_bytes"] == len(b"secret model output")
    assert audit["runtime"] == "infer.llamacpp"
    assert audit["instance_id"] == "chat-0123abcd-node1"
    assert audit["args"] == ["--port", "8090"]
    assert audit["exit_code"] == 0
    assert audit["output_eof"] is True
    assert "secret" not in json.dumps(audit)


def test_empty_evidence_carries_its_owner() -> None:
    evidence = RunEvidence.empty(runtime="infer.ollama", instance_id="chat-1")
    assert (evidence.runtime, evidence.instance_id, evidence.pid) == ("infer.ollama", "chat-1", 0)
    assert evidence.exit_code is None
    assert evidence.signal is None


def test_clamp_limit_never_raises_a_hard_limit() -> None:
    import resource

    assert clamp_limit(4096, resource.RLIM_INFINITY) == 4096
    assert clamp_limit(4096, 1024) == 1024
    assert clamp_limit(4096, 20000) == 4096


# --- real processes ---------------------------------------------------------------------------


async def test_exit_on_its_own_is_noticed_as_it_happens(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    code = "import os,time; print(time.perf_counter(), flush=True); os._exit(3)"
    process = await ManagedProcess.spawn(nursery, python_launch(tmp_path, code))
    await trio.sleep(1.0)  # nobody waits on the process meanwhile
    assert not process.running
    assert process.returncode == 3
    evidence = await process.wait_exited()
    assert evidence.exit_code == 3
    assert evidence.signal is None
    assert evidence.describe() == "exited with status 3"
    exited_at = float(evidence.stdout)
    trio_clock_offset = trio.current_time() - time.perf_counter()
    noticed_at = process.started_at + evidence.elapsed_s - trio_clock_offset
    assert 0.0 <= noticed_at - exited_at < 0.1


async def test_output_is_capped_at_one_mib_with_exact_counts(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    code = (
        "import sys\n"
        "data = b''.join(b'%07d\\n' % i for i in range(262144))\n"
        "sys.stdout.buffer.write(data)\n"
        "sys.stderr.buffer.write(b'short complaint\\n')\n"
    )
    expected = b"".join(b"%07d\n" % i for i in range(262144))
    process = await ManagedProcess.spawn(nursery, python_launch(tmp_path, code))
    evidence = await process.wait_exited()
    assert evidence.exit_code == 0
    assert evidence.stdout_bytes == len(expected) == 2 << 20
    assert evidence.stdout == expected[: 1 << 20]
    assert evidence.stdout_tail == expected[-4096:].decode()
    assert evidence.truncated
    assert evidence.stderr == b"short complaint\n"
    assert evidence.stderr_bytes == 16
    assert evidence.stderr_tail == "short complaint\n"
    assert evidence.output_eof


async def test_terminate_stops_a_sleeper_with_sigterm(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    process = await ManagedProcess.spawn(nursery, Launch(Path("/bin/sleep"), ("600",), tmp_path))
    await trio.sleep(0.05)
    assert process.running
    started = trio.current_time()
    evidence = await process.terminate(grace_s=5.0)
    assert trio.current_time() - started < 1.0
    assert evidence.signal == signal.SIGTERM
    assert evidence.exit_code is None
    assert not evidence.killed_after_grace
    assert evidence.args == ("600",)
    assert evidence.pid == process.pid
    assert is_gone(process.pid)
    with pytest.raises(ProcessLookupError):  # reaped and alone: the group no longer exists
        os.killpg(process.pgid, 0)


async def test_fc05_fc11_sigterm_ignored_is_killed_after_grace(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    launch = Launch(Path(PYTHON), (str(HELPERS / "ignore_term.py"),), tmp_path)
    process = await ManagedProcess.spawn(nursery, launch)
    await wait_for_file(tmp_path / "ready")
    started = trio.current_time()
    evidence = await process.terminate(grace_s=0.5)
    took = trio.current_time() - started
    assert 0.5 <= took < 1.0
    assert evidence.signal == signal.SIGKILL
    assert evidence.killed_after_grace
    assert evidence.describe() == "killed by SIGKILL after the grace period"
    assert is_gone(process.pid)


async def test_fc12_forking_wrapper_grandchild_dies_with_the_group(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    launch = wrapper_launch(tmp_path, "wait", PYTHON, str(HELPERS / "ignore_term.py"))
    process = await ManagedProcess.spawn(nursery, launch)
    grandchild = int(await wait_for_file(tmp_path / "grandchild.pid"))
    await wait_for_file(tmp_path / "ready")
    assert os.getpgid(grandchild) == process.pgid
    evidence = await process.terminate(grace_s=5.0)
    assert evidence.signal == signal.SIGTERM  # the wrapper itself obeyed SIGTERM
    await wait_gone(grandchild)  # the grandchild ignored SIGTERM but got the group's SIGKILL
    await wait_group_empty(process.pgid)
    assert evidence.output_eof  # both pipes reached EOF: no member holds them any more
    assert evidence.stdout == b"wrapper-out\n"
    assert evidence.stderr == b"wrapper-err\n"


async def test_checklist_52_crashed_leader_takes_its_grandchild_along(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    process = await ManagedProcess.spawn(nursery, wrapper_launch(tmp_path, "crash", "sleep", "600"))
    evidence = await process.wait_exited()
    grandchild = int((tmp_path / "grandchild.pid").read_text())
    assert evidence.signal == signal.SIGABRT
    assert evidence.describe() == "killed by SIGABRT"
    await wait_gone(grandchild)
    await wait_group_empty(process.pgid)
    assert evidence.output_eof


async def test_checklist_43_environment_is_exactly_the_launch_env(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    env = (("PATH", "/usr/local/bin:/usr/bin:/bin"), ("INFERACTORS_TEST", "a b=c"))
    launch = Launch(Path("/usr/bin/env"), (), tmp_path, env)
    os.environ["INFERACTORS_LEAK_CHECK"] = "must not reach the child"
    try:
        process = await ManagedProcess.spawn(nursery, launch)
        evidence = await process.wait_exited()
    finally:
        del os.environ["INFERACTORS_LEAK_CHECK"]
    lines = evidence.stdout.decode().splitlines()
    assert dict(line.split("=", 1) for line in lines) == dict(env)


async def test_cwd_stdin_and_session_come_from_the_launch(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    code = (
        "import json,os,sys\n"
        "print(json.dumps({'cwd': os.getcwd(), 'stdin': sys.stdin.read(),"
        " 'pgid': os.getpgid(0), 'sid': os.getsid(0), 'pid': os.getpid(),"
        " 'stdin_path': os.path.realpath('/proc/self/fd/0')}))\n"
    )
    process = await ManagedProcess.spawn(nursery, python_launch(tmp_path, code))
    seen = json.loads((await process.wait_exited()).stdout)
    assert await trio.Path(seen["cwd"]).samefile(tmp_path)
    assert seen["stdin"] == ""
    if sys.platform.startswith("linux"):
        assert seen["stdin_path"] == "/dev/null"
    assert seen["pid"] == process.pid == process.pgid
    assert seen["pgid"] == seen["sid"] == process.pid
    assert seen["pgid"] != os.getpgrp()


async def test_checklist_44_own_process_group_while_running(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    process = await ManagedProcess.spawn(nursery, Launch(Path("/bin/sleep"), ("600",), tmp_path))
    try:
        assert os.getpgid(process.pid) == process.pid == process.pgid
        assert os.getpgid(process.pid) != os.getpgrp()
        assert os.getsid(process.pid) == process.pid
    finally:
        await process.terminate(grace_s=1.0)


async def test_child_resource_limits(nursery: trio.Nursery, tmp_path: Path) -> None:
    import resource

    code = (
        "import json,resource as r\n"
        "print(json.dumps([r.getrlimit(r.RLIMIT_CORE), r.getrlimit(r.RLIMIT_NOFILE),"
        " r.getrlimit(r.RLIMIT_FSIZE)]))\n"
    )
    process = await ManagedProcess.spawn(nursery, python_launch(tmp_path, code))
    core, nofile, fsize = json.loads((await process.wait_exited()).stdout)
    nofile_want = clamp_limit(4096, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    fsize_want = clamp_limit(1 << 44, resource.getrlimit(resource.RLIMIT_FSIZE)[1])
    assert core == [0, 0]
    assert nofile == [nofile_want, nofile_want]
    assert fsize == [fsize_want, fsize_want]


async def test_terminate_after_exit_signals_nothing_and_repeats_the_evidence(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    process = await ManagedProcess.spawn(nursery, python_launch(tmp_path, "raise SystemExit(5)"))
    evidence = await process.wait_exited()
    again = await process.terminate(grace_s=1.0)
    assert again is evidence
    assert again.exit_code == 5
    assert not again.killed_after_grace
    assert await process.terminate(grace_s=0.0) is evidence
    process.kill_group_now()  # released group: a no-op, must not raise


async def test_kill_group_now_kills_a_running_group(nursery: trio.Nursery, tmp_path: Path) -> None:
    process = await ManagedProcess.spawn(nursery, wrapper_launch(tmp_path, "wait", "sleep", "600"))
    grandchild = int(await wait_for_file(tmp_path / "grandchild.pid"))
    assert process.running
    assert process.returncode is None
    process.kill_group_now()
    evidence = await process.wait_exited()
    assert evidence.signal == signal.SIGKILL
    assert not evidence.killed_after_grace  # no stop asked for it
    await wait_gone(grandchild)


async def test_cancelling_terminate_still_kills_and_reaps(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    launch = Launch(Path(PYTHON), (str(HELPERS / "ignore_term.py"),), tmp_path)
    process = await ManagedProcess.spawn(nursery, launch)
    await wait_for_file(tmp_path / "ready")
    started = trio.current_time()
    with trio.move_on_after(0.2) as scope:
        await process.terminate(grace_s=30.0)
    assert scope.cancelled_caught
    assert trio.current_time() - started < 2.0
    assert process.returncode == -signal.SIGKILL
    assert is_gone(process.pid)
    evidence = await process.wait_exited()
    assert evidence.killed_after_grace


async def test_checklist_61_nursery_teardown_kills_the_group(tmp_path: Path) -> None:
    launch = wrapper_launch(tmp_path, "wait", PYTHON, str(HELPERS / "ignore_term.py"))
    async with trio.open_nursery() as nursery:
        process = await ManagedProcess.spawn(nursery, launch)
        grandchild = int(await wait_for_file(tmp_path / "grandchild.pid"))
        nursery.cancel_scope.cancel()
    assert process.returncode == -signal.SIGKILL
    await wait_gone(grandchild)
    await wait_group_empty(process.pgid)
    assert (await process.wait_exited()).signal == signal.SIGKILL


async def test_spawn_failure_is_a_backend_error_naming_the_program(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-server"
    with pytest.raises(BackendError, match="no-such-server"):
        await ManagedProcess.spawn(nursery, Launch(missing, (), tmp_path))
    not_executable = tmp_path / "server"
    not_executable.write_text("#!/bin/sh\n")
    with pytest.raises(BackendError, match=str(not_executable)):
        await ManagedProcess.spawn(nursery, Launch(not_executable, (), tmp_path))


async def sigkill_supervisor_and_see_its_server_die(tmp_path: Path, *run_as: str) -> int:
    """Run tests/helpers/supervisor.py (a real `ManagedProcess` owner), SIGKILL it, and
    wait for its server to die; returns the server's uid while it ran."""
    pid_file = tmp_path / "server.pid"
    supervisor = await trio.lowlevel.open_process(
        [PYTHON, str(HELPERS / "supervisor.py"), str(pid_file), *run_as]
    )
    try:
        server = int(await wait_for_file(pid_file))
        assert not is_gone(server)
        uid = psutil.Process(server).uids().real
    finally:
        supervisor.kill()
        await supervisor.wait()
    assert supervisor.returncode == -signal.SIGKILL
    await wait_gone(server, timeout_s=2.0)
    assert not live_group_members(server)
    return uid


@linux_only
async def test_fc13_supervisor_sigkilled_takes_its_server_along(tmp_path: Path) -> None:
    assert await sigkill_supervisor_and_see_its_server_die(tmp_path) == os.getuid()


@linux_only
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch users")
async def test_fc13_a_server_run_as_nobody_still_dies_with_its_supervisor(
    tmp_path: Path,
) -> None:
    """The kernel clears the parent-death signal on a uid change; ours is set after it."""
    assert await sigkill_supervisor_and_see_its_server_die(tmp_path, "nobody") == 65534


@linux_only
async def test_pdeathsig_follows_the_forking_thread_not_the_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Why spawn forks in the trio thread: a worker thread's exit would kill the child."""
    monkeypatch.setattr(trio._core._thread_cache, "IDLE_TIMEOUT", 0.05)
    child = await trio.lowlevel.open_process(
        ["/bin/sleep", "600"], preexec_fn=_child_setup(os.getpid())
    )
    try:
        with trio.fail_after(2.0):
            await child.wait()
        assert child.returncode == -signal.SIGKILL
    finally:
        child.kill()
        await child.wait()


@linux_only
async def test_pdeathsig_child_survives_worker_threads_ending(
    monkeypatch: pytest.MonkeyPatch, nursery: trio.Nursery, tmp_path: Path
) -> None:
    monkeypatch.setattr(trio._core._thread_cache, "IDLE_TIMEOUT", 0.05)
    await trio.to_thread.run_sync(lambda: None)
    process = await ManagedProcess.spawn(nursery, Launch(Path("/bin/sleep"), ("600",), tmp_path))
    await trio.to_thread.run_sync(lambda: None)
    await trio.sleep(0.5)  # every worker thread has ended by now
    assert process.running
    assert not is_gone(process.pid)
    await process.terminate(grace_s=1.0)


# --- kill steps at exact times, with a fake child under MockClock ----------------------------


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
        if signum not in self.ignores:
            self.die(-signum)
        return True

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
        argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], run_as: RunAs | None
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
    assert [signum for _, signum in child.signals] == [signal.SIGTERM, signal.SIGKILL]
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
    assert child.signals[:2] == [(0.0, signal.SIGTERM), (1.0, signal.SIGKILL)]
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
