"""``inferactors run`` is the subreaper of its servers' descendants (issue 18 item 4): a
server whose wrapper leaves a daemonized grandchild behind (its parent gone at once) has
that grandchild re-parented to the supervisor, not to init, and once it exits the
supervisor collects it: no zombie is left under it. Real processes: the kit's fake
llama-server behind a wrapper that orphans a short ``sleep``."""

from __future__ import annotations

import time

import psutil

from cli.run_support import RunProcess
from inferactors.testing import RuntimeKit
from inferactors.testing._fake_processes import free_port
from service.fleet_support import Entry, RunFile


def test_an_orphaned_grandchild_is_adopted_and_collected(inferactors_kit: RuntimeKit) -> None:
    run = RunFile.create(inferactors_kit)
    wrapper = inferactors_kit.root / "orphaning-server"
    wrapper.write_text(f'#!/bin/sh\n( sleep 1 & )\nexec {run.program} "$@"\n')
    wrapper.chmod(0o755)
    run.write(Entry("chat", free_port()), program=wrapper)
    process = RunProcess.start(run.path)
    try:
        process.wait_for("deep health: one token")
        supervisor = psutil.Process(process.process.pid)
        line = process.wait_for("collected the exit of pid", within_s=30)
        pid = int(line.split("pid ")[1].split(",")[0])
        assert not psutil.pid_exists(pid) or psutil.Process(pid).ppid() != supervisor.pid
        time.sleep(0.5)
        zombies = [c.pid for c in supervisor.children() if c.status() == psutil.STATUS_ZOMBIE]
        assert zombies == []
    finally:
        process.process.terminate()
        assert process.finish() == 0, process.output()
