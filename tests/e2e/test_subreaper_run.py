"""``inferactors run`` keeps what its servers start in their own tree: a server whose
wrapper leaves a daemonized grandchild behind (its parent gone at once) has that grandchild
re-parented to the server itself (the exec helper makes each server a child subreaper),
never to init, so it is ended with the server; after the run stops nothing of it is left
and no zombie stays under the supervisor. Real processes: the kit's fake llama-server
behind a wrapper that orphans a ``sleep``."""

from __future__ import annotations

import time

import psutil

from cli.run_support import RunProcess
from inferactors.testing import RuntimeKit
from inferactors.testing._fake_processes import free_port
from service.fleet_support import Entry, RunFile


def _orphans_of(supervisor: psutil.Process, marker: str) -> list[psutil.Process]:
    found = []
    for process in supervisor.children(recursive=True):
        try:
            if process.cmdline()[:2] == ["sleep", marker]:
                found.append(process)
        except psutil.Error:
            continue
    return found


def test_an_orphaned_grandchild_stays_in_its_servers_tree_and_ends_with_it(
    inferactors_kit: RuntimeKit,
) -> None:
    marker = "61.5"  # a sleep of ours, told apart from any other
    run = RunFile.create(inferactors_kit)
    wrapper = inferactors_kit.root / "orphaning-server"
    wrapper.write_text(f'#!/bin/sh\n( sleep {marker} & )\nexec {run.program} "$@"\n')
    wrapper.chmod(0o755)
    run.write(Entry("chat", free_port()), program=wrapper)
    process = RunProcess.start(run.path)
    supervisor = psutil.Process(process.process.pid)
    try:
        line = process.wait_for("process ")
        server_pid = int(line.split("process ")[1].split()[0])
        process.wait_for("deep health: one token")
        [orphan] = _orphans_of(supervisor, marker)
        assert orphan.ppid() == server_pid  # kept in the server's tree, not init's
    finally:
        process.process.terminate()
        assert process.finish() == 0, process.output()
    time.sleep(0.5)
    assert not psutil.pid_exists(orphan.pid) or orphan.status() == psutil.STATUS_ZOMBIE
