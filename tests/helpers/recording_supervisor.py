"""Test helper: a supervisor that records its server (FC-13), for the test to SIGKILL.

Usage: python recording_supervisor.py INSTANCE_DIR PORT PROGRAM [ARG...]. Starts PROGRAM
through `ManagedProcess` (so with the parent-death signal) in INSTANCE_DIR, writes the
``server.json`` record as the runtime does, removes it once the server has been reaped,
and otherwise sleeps until killed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import attrs
import trio

from inferactors._edges.orphan_record import remove_record, write_record
from inferactors._edges.process import ManagedProcess


@attrs.frozen
class _Launch:
    program: Path
    args: tuple[str, ...]
    cwd: Path
    env: tuple[tuple[str, str], ...] = (("PATH", "/usr/bin:/bin"),)


async def _main(instance_dir: Path, port: int, argv: list[str]) -> None:
    launch = _Launch(Path(argv[0]), tuple(argv[1:]), instance_dir)
    async with trio.open_nursery() as nursery:
        process = await ManagedProcess.spawn(nursery, launch)
        write_record(instance_dir, process.pid, port, argv)
        await process.wait_exited()
        remove_record(instance_dir, pid=process.pid)
        await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(_main, Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])
