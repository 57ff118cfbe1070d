"""The version probe: run a server program's ``--version`` (or a configured argv) contained.

Nothing of ours runs as root. The probe is started exactly as a managed
server is (`ManagedProcess.spawn` through `open_child_process`): its own session, the
child limits, the switch to ``run_as``, the parent-death signal and ``PR_SET_NO_NEW_PRIVS``
(``spawn.py``), stdin on ``/dev/null``, a cleared environment (`PROBE_ENV`) and ``/`` as
its directory. As root without ``run_as`` nothing is run at all. A probe that outlives its
deadline is killed with its whole group.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import trio

from .._errors import BackendError
from .._policy.launch import DEFAULT_PATH, Launch
from .._policy.privilege import RunAs
from .process import ManagedProcess, OpenProcess, open_child_process

VERSION_PROBE_TIMEOUT_S = 5.0
"""How long a version probe may run before it is killed and counts as failed (seconds)."""

PROBE_ENV: tuple[tuple[str, str], ...] = (("PATH", DEFAULT_PATH),)
"""The whole environment of a version probe: a minimal PATH, nothing of ours."""

_LINE_LIMIT = 120


async def run_version_probe(
    argv: tuple[str, ...],
    *,
    run_as: RunAs | None,
    euid: int,
    timeout_s: float = VERSION_PROBE_TIMEOUT_S,
    open_process: OpenProcess = open_child_process,
) -> tuple[bool, str | None]:
    """Run ``argv`` as ``run_as``, contained; whether it exited 0, and its version line.

    Args:
        argv: The program and its arguments (never through a shell).
        run_as: The user to run as; None keeps ours, which is refused when ``euid`` is 0.
        euid: The supervisor's effective uid.
        timeout_s: Seconds the probe may run (float); then its group is SIGKILLed.
        open_process: The spawn function (the real one by default).

    Returns:
        ``(True, line)`` for a zero exit, where ``line`` is the first non-blank line of
        stdout, else of stderr, cut to 120 characters (None when both are blank);
        ``(False, None)`` for a non-zero exit, a timeout, a program that cannot be started
        (missing, not executable by ``run_as``) or, as root without ``run_as``, not run.

    Cancellation kills the probe's group and reaps it (bounded) before it propagates.
    """
    output = await run_probe_program(
        argv, run_as=run_as, euid=euid, timeout_s=timeout_s, open_process=open_process
    )
    if output.exit_code != 0:
        return False, None
    return True, first_line(output.stdout) or first_line(output.stderr)


@attrs.frozen
class ProbeOutput:
    """What a probe program left: its exit code (None when it did not exit on its own in
    time or never ran, ``why`` says which), and its first 1 MiB of stdout and stderr."""

    exit_code: int | None
    stdout: bytes = b""
    stderr: bytes = b""
    why: str | None = None


async def run_probe_program(
    argv: tuple[str, ...],
    *,
    run_as: RunAs | None,
    euid: int,
    timeout_s: float = VERSION_PROBE_TIMEOUT_S,
    open_process: OpenProcess = open_child_process,
) -> ProbeOutput:
    """Run ``argv`` as ``run_as``, contained as a server is (module docstring), and return
    its output; arguments as `run_version_probe`. Never raises for the program's faults: a
    program that cannot be started, outlives ``timeout_s`` seconds (its group is then
    SIGKILLed) or, as root without ``run_as``, is not run gives ``exit_code=None`` and
    ``why``. Cancellation kills the group and reaps it (bounded) before it propagates."""
    if run_as is None and euid == 0:
        return ProbeOutput(None, why="not run: as root a probe needs run_as")
    launch = Launch(Path(argv[0]), tuple(argv[1:]), Path("/"), PROBE_ENV)
    async with trio.open_nursery() as nursery:
        try:
            process = await ManagedProcess.spawn(
                nursery, launch, open_process=open_process, run_as=run_as
            )
        except BackendError as error:
            return ProbeOutput(None, why=f"cannot be started: {error}")
        with trio.move_on_after(timeout_s):
            evidence = await process.wait_exited()
            if evidence.exit_code is None:
                return ProbeOutput(None, evidence.stdout, evidence.stderr, why="killed")
            return ProbeOutput(evidence.exit_code, evidence.stdout, evidence.stderr)
        await process.terminate(0.0)
    return ProbeOutput(None, why=f"timed out after {timeout_s:g} s")


def first_line(output: bytes) -> str | None:
    """The first non-blank line of ``output``, stripped and cut to 120 characters."""
    for line in output.decode(errors="replace").splitlines():
        if line.strip():
            return line.strip()[:_LINE_LIMIT]
    return None
