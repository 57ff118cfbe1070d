"""The exec helper: the first program of every managed child, started by ``os.posix_spawn``.

``spawn.py`` starts it as ``python -I -S spawn_child.py PLAN_FD STATUS_FD``: an isolated
interpreter (no site, no environment variables read, no script directory on the path), so
only the standard library is importable. It reads its plan (JSON) from ``PLAN_FD``, sets the
child up in this order, then executes the server:

0. with a cgroup (``cgroups.py``, where the host delegates a subtree): ``0`` written to the
   plan's ``cgroup_fd`` (that cgroup's ``cgroup.procs``, opened by the parent), before
   anything else and before the user switch (a ``run_as`` user may not write it), so the
   server is in its cgroup from its exec on;
1. a new session (``setsid``): the child's process group id is its pid, every signal goes
   to the whole group;
2. resource limits (the plan's, computed by the parent);
3. the working directory (before the user switch, as root can always enter it);
4. with a user switch: ``setgroups``, ``setgid``, ``setuid``;
5. on Linux, ``PR_SET_PDEATHSIG`` = SIGKILL (after the switch: the kernel clears it on a uid
   change), ``PR_SET_NO_NEW_PRIVS`` and ``PR_SET_CHILD_SUBREAPER`` (the server adopts
   what its own descendants orphan, so a daemonized grandchild stays in its tree); if the
   parent died before the signal was armed, exit at once;
6. every descriptor closed but 0, 1, 2, the plan's ``pass_fds`` and the status pipe (which
   is close-on-exec); SIGPIPE and SIGXFSZ back to their defaults (Python ignores them);
7. ``execve`` of the server with exactly the plan's environment.

Any failure is written to ``STATUS_FD`` as ``"<errno> <where>: <message>"`` and the helper
exits 127; a successful exec closes the pipe unwritten, which is how the parent knows.
This file imports nothing of inferactors.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import sys
import time
from typing import Any

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38


def main(plan_fd: int, status_fd: int) -> None:
    """Set up and exec per the plan; on failure report to ``status_fd`` and exit 127."""
    where = "plan"
    try:
        with os.fdopen(plan_fd, "rb") as source:
            plan = json.loads(source.read())
        where = "setup"
        _set_up(plan, status_fd)
        where = "exec"
        os.execve(plan["argv"][0], plan["argv"], plan["env"])
    except OSError as error:
        _report(status_fd, error.errno or 0, f"{where}: {error.strerror or error}")
    except Exception as error:  # a malformed plan: say what, never hang
        _report(status_fd, 0, f"{where}: {type(error).__name__}: {error}")
    os._exit(127)


def _set_up(plan: dict[str, Any], status_fd: int) -> None:
    cgroup_fd = plan.get("cgroup_fd")
    if cgroup_fd is not None:
        try:
            os.write(cgroup_fd, b"0")  # into its cgroup, first, before the user switch
        except OSError as error:
            raise OSError(error.errno, f"cannot enter its cgroup: {error.strerror}") from None
        os.close(cgroup_fd)
    os.setsid()
    for which, value in plan["rlimits"]:
        resource.setrlimit(which, (value, value))
    os.chdir(plan["cwd"])
    switch = plan.get("switch")
    if switch is not None:
        groups, gid, uid = switch
        os.setgroups(groups)
        os.setgid(gid)
        os.setuid(uid)
    if sys.platform.startswith("linux"):
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, "PR_SET_PDEATHSIG")
        _prctl(_PR_SET_NO_NEW_PRIVS, 1, "PR_SET_NO_NEW_PRIVS")
        _prctl(_PR_SET_CHILD_SUBREAPER, 1, "PR_SET_CHILD_SUBREAPER")
    if os.getppid() != plan["parent_pid"]:
        os._exit(1)  # the parent died before the signal was armed
    _close_all_but(sorted({0, 1, 2, *plan["pass_fds"], status_fd}))
    os.set_inheritable(status_fd, False)  # closed by the exec: the parent's "it ran"
    for signum in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(signum, signal.SIG_DFL)
    time.sleep(plan.get("pause_s", 0.0))  # tests only: a slow setup, the loop runs meanwhile


def _prctl(option: int, value: int, name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    zero = ctypes.c_ulong(0)
    if libc.prctl(option, ctypes.c_ulong(value), zero, zero, zero) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"prctl({name}) failed: {os.strerror(number)}")


def _close_all_but(keep: list[int]) -> None:
    low = 0
    for fd in keep:
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)


def _report(status_fd: int, number: int, message: str) -> None:
    try:
        os.write(status_fd, f"{number} {message}".encode(errors="replace")[:4096])
    except OSError:
        pass  # nobody to tell: the exit status says it


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
