"""A managed server that daemonizes a grandchild (fork, ``setsid``, fork; the daemon ignores
SIGTERM and SIGHUP) leaves nothing behind when it is stopped, restarted or unloaded through
a real runtime (the kit's fake llama-server run as the workspace's user behind
``tests/helpers/daemon_wrapper.sh``), with the daemon named in the stop's evidence: once
without a delegated cgroup (this host's default: the server is a child subreaper, so the
daemon stays in its tree and is tracked by pidfd) and once with a cgroup per server under a
cgroup the test makes (skipped, saying why, where this process may make none)."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from cgroup_support import in_cgroup, made_cgroup
from daemon_support import HOSTS, Daemons, daemonizing_program, daemons_killed_after, instance_dir
from inferactors import InstanceState, open_runtime
from inferactors._edges.bundle import Edges
from inferactors._edges.cgroups import CgroupTree
from inferactors._edges.process import open_child_process
from inferactors.testing import RuntimeKit
from proc_checks import is_gone

GRACE_S = 0.5


@pytest.fixture(params=HOSTS)
def host(request: pytest.FixtureRequest) -> Iterator[CgroupTree | None]:
    if request.param == "no cgroup":
        yield None
        return
    with made_cgroup() as base:
        yield CgroupTree.at(base)


@pytest.fixture
def daemons() -> Iterator[Daemons]:
    with daemons_killed_after() as seen:
        yield seen


async def new_daemon(daemons: Daemons, where: Path) -> int:
    return await trio.to_thread.run_sync(daemons.wait_new, where)


def check_placed(host: CgroupTree | None, where: Path, server: int, daemon: int) -> None:
    """Without a cgroup the daemon was adopted by the server itself; with one, both are in
    the server's cgroup under the tree."""
    if host is None:
        assert int(Path(f"/proc/{daemon}/stat").read_text().rsplit(")", 1)[1].split()[1]) == (
            server
        )
        return
    [cgroup] = [p for p in host.root.rglob(f"{where.name}-*") if p.is_dir()]
    assert in_cgroup(server, cgroup)
    assert in_cgroup(daemon, cgroup)


async def test_stop_restart_and_unload_leave_no_daemon(
    host: CgroupTree | None, daemons: Daemons, inferactors_kit: RuntimeKit
) -> None:
    program = daemonizing_program(
        inferactors_kit.root / "daemonizing", inferactors_kit.fake_program()
    )
    config = inferactors_kit.config(program=program)
    edges = Edges(open_process=functools.partial(open_child_process, cgroups=lambda: host))
    async with open_runtime(config, node_id="test", edges=edges, stop_grace_s=GRACE_S) as runtime:
        handle = await runtime.load(inferactors_kit.spec())
        where = await trio.to_thread.run_sync(instance_dir, config.managed.data_root, "chat")  # type: ignore[union-attr]

        async def running() -> tuple[int, int]:
            with trio.fail_after(30):
                status = await runtime.wait_state(handle, InstanceState.RUNNING)
            assert status.pid is not None
            return status.pid, await new_daemon(daemons, where)

        await runtime.start(handle)
        server, daemon = await running()
        check_placed(host, where, server, daemon)
        assert os.getsid(daemon) not in (server, daemon)  # daemonized: a session of its own
        evidence = await runtime.stop(handle, GRACE_S)
        assert is_gone(daemon), "the daemon outlived the stop"
        assert evidence.killed == (daemon,)
        assert f"process {daemon} (outside its group) survived; killed" in evidence.describe()

        await runtime.start(handle)
        server, daemon = await running()
        await runtime.restart(handle, GRACE_S)
        assert is_gone(daemon), "the daemon outlived the restart"
        server, daemon = await running()
        check_placed(host, where, server, daemon)

        await runtime.unload(handle)
        assert is_gone(daemon), "the daemon outlived the unload"
        assert is_gone(server)
    if host is not None:
        assert not any(p.name.startswith("chat-") for p in host.root.rglob("*")), (
            "a server's cgroup was left behind"
        )
