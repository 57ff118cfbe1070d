"""Tests of what a spawned server starts with: exactly the launch's environment, its cwd,
stdin from /dev/null, a session and process group of its own, clamped resource limits, and
a `BackendError` naming the program when it cannot be started. Real processes throughout.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import trio

from edges.process_support import Launch, python_launch
from inferactors._edges.process import ManagedProcess
from inferactors._edges.spawn import clamp_limit
from inferactors._errors import BackendError

pytestmark = pytest.mark.usefixtures("no_leaked_processes")


def test_clamp_limit_never_raises_a_hard_limit() -> None:
    import resource

    assert clamp_limit(4096, resource.RLIM_INFINITY) == 4096
    assert clamp_limit(4096, 1024) == 1024
    assert clamp_limit(4096, 20000) == 4096


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
