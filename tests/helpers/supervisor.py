"""Test helper: a supervisor that the test SIGKILLs while its managed child runs (FC-13).

Usage: python supervisor.py PIDFILE [RUN_AS]. Starts ``sleep 600`` through `ManagedProcess`
(as the user RUN_AS when given), writes the sleep's pid to PIDFILE, then sleeps until killed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import attrs
import trio

from inferactors._edges.containment import resolve_run_as
from inferactors._edges.process import ManagedProcess
from inferactors._policy.privilege import RunAs


@attrs.frozen
class _Launch:
    program: Path
    args: tuple[str, ...]
    cwd: Path
    env: tuple[tuple[str, str], ...]


async def _main(pid_file: Path, run_as: RunAs | None) -> None:
    launch = _Launch(Path("/bin/sleep"), ("600",), pid_file.parent, ())
    async with trio.open_nursery() as nursery:
        process = await ManagedProcess.spawn(nursery, launch, run_as=run_as)
        staging = pid_file.with_suffix(".tmp")
        staging.write_text(str(process.pid))
        staging.rename(pid_file)
        await trio.sleep_forever()


if __name__ == "__main__":
    user = resolve_run_as(sys.argv[2]) if len(sys.argv) > 2 else None
    trio.run(_main, Path(sys.argv[1]), user)
