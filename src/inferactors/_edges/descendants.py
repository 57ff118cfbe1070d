"""Everything a managed server started that a signal to its process group cannot reach.

A stop signals the server's process group (``process.py``). What left the group is found
here, three ways, each held by a pidfd checked against the start the scan saw
(``escapees.py``), so a signal never reaches a reused pid:

- **its cgroup**, where the host delegates a subtree (``cgroups.py``): every member is the
  server's by place, whatever session it made; at the kill the whole cgroup gets
  ``cgroup.kill``, which also reaches what forked after the last look;
- **its tree**: the kernel's children lists of the leader (``proctable.tree_pids``) and of
  the outsiders found so far. The exec helper made the leader a child subreaper
  (``spawn.py``), so a daemon's double fork leaves its grandchild under the leader, not
  under init: while the leader lives, everything it started is in its tree;
- **its session**, for what a leader that exited left to us: when this process is a child
  subreaper (``inferactors run``: ``subreaper.py``), the orphans of an exited leader become
  our children; one whose session is the leader's, or an outsider's we hold, or (in
  ``inferactors run``: `claim_orphans`) any session but ours when it is not one of our
  leaders (a daemon started in the server's last moments, after the last look), is the
  server's (`adopted_from`, at a stop and at the leader's exit).

`Descendants.track` runs right before a stop, at the leader's exit, on the record refresh
and the identity check, and, for a server without a cgroup only, on a timer when nobody
else looked for 1.5 s (``descendant_looks.py``). Synchronous: with a
cgroup, one read of ``cgroup.procs`` (what it holds is the whole server: no walk);
without, a walk of the server's tree, one ``children`` list per thread (0.1 to 0.7 ms for
the real llama-server's 14 threads here, the higher figure on a loaded machine); it runs
in the trio thread.

What it cannot see: without a cgroup, in a library's host (no subreaper), a descendant
that daemonized into a session of its own between two looks *and* whose leader exited
meanwhile: it went to init. In ``inferactors run`` it comes to us and `claim_orphans`
takes it. A cgroup has no such gap.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable

import attrs
import trio

from .capture import outside_words
from .cgroups import ServerCgroup
from .escapees import Escapees
from .proctable import child_pids
from .subreaper import is_subreaper

_log = logging.getLogger(__name__)

_LEADERS: set[int] = set()
"""The leaders of the servers this process runs: each from its spawn (`spawn_leader`)
until its `Descendants` is closed (or `forget_leader`, when its start failed)."""
_SPAWNING = threading.Lock()
"""Held while a server is spawned and noted as a leader, and while `adopted_from` reads our
children: a child it reads is never a server whose spawn has not been noted yet."""


def spawn_leader(spawn: Callable[[], int]) -> int:
    """Run ``spawn`` (it starts a server and returns its pid) and note the pid as a
    server's leader in the same step, before any other server's exit can look at our
    children (`adopted_from`): a server still starting is never taken for another's
    orphan. Blocking; called in the forker thread."""
    with _SPAWNING:
        pid = spawn()
        _LEADERS.add(pid)
    return pid


def forget_leader(pid: int) -> None:
    """The server ``pid`` never started (its helper reported a failure): no longer ours."""
    _LEADERS.discard(pid)


_CLAIMS = [False]
"""Whether `claim_orphans` is on (one flag, for the whole process)."""


def claim_orphans(on: bool = True) -> None:
    """Say that every child of this process outside its session, other than a server's
    leader, is an orphan of a server (`adopted_from`). True of ``inferactors run``, a child
    subreaper that starts nothing else in a session of its own; never of a library's host,
    whose other children are its own."""
    _CLAIMS[0] = on


def adopted_from(leader: int, outsiders: tuple[int, ...]) -> list[int]:
    """The children of this process that a server's exit left to it: those whose session
    is ``leader``'s or one of ``outsiders``'; and, once `claim_orphans` is on and while
    this process is a child subreaper, every child in a session other than ours that is
    not the leader of a server we run. What a server orphans is re-parented to us only once
    its leader (itself a subreaper) has exited: such a child is an orphan of a server whose
    leader is gone (this one, or one that exited at the same moment: its orphans must end
    as well). One read of our children lists."""
    sessions = {leader, *outsiders}
    ours = os.getsid(0)
    any_session = _CLAIMS[0] and is_subreaper()
    adopted = []
    with _SPAWNING:  # a server spawned meanwhile is a noted leader before it is a child
        children = child_pids(os.getpid())
    for pid in children:
        if pid == leader or (pid in _LEADERS):
            continue
        try:
            session = os.getsid(pid)
        except (ProcessLookupError, PermissionError):
            continue
        if session in sessions or (any_session and session != ours):
            adopted.append(pid)
    return adopted


@attrs.define(eq=False)
class Descendants:
    """The processes of the server led by ``leader`` (group ``pgid``) outside that group.

    Attributes:
        cgroup: The server's cgroup, None where the host delegates none.
        seen: Every outsider tracked so far, sorted.
        killed: The outsiders alive when a SIGKILL went out (`kill`): they had survived
            the grace of a stop, or outlived a leader that exited on its own.
    """

    leader: int
    pgid: int
    cgroup: ServerCgroup | None = None
    seen: tuple[int, ...] = ()
    killed: tuple[int, ...] = ()
    _escapees: Escapees = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._escapees = Escapees(self.leader, self.pgid)
        _LEADERS.add(self.leader)

    def track(self) -> tuple[int, ...]:
        """Look for new outsiders (its tree and its cgroup); the live ones."""
        if self.cgroup is None:
            return self._saw(self._escapees.track())
        return self._saw(self._escapees.track(self.cgroup.members(), walk=False))

    @property
    def shape(self) -> frozenset[tuple[int, int]]:
        """``(pid, pgid)`` of what the last `track` looked at (`Escapees.shape`)."""
        return self._escapees.shape

    def track_adopted(self) -> tuple[int, ...]:
        """`track`, plus the children of this process that the server left to it
        (`adopted_from`); the live outsiders. Reads every thread's children list of this
        process: called at a stop and at the leader's exit, not on the timer."""
        self.track()
        return self._saw(self._escapees.track(adopted_from(self.leader, self.alive())))

    def _saw(self, outside: tuple[int, ...]) -> tuple[int, ...]:
        self.seen = tuple(sorted({*self.seen, *outside}))
        return outside

    def alive(self) -> tuple[int, ...]:
        """The tracked outsiders that have not exited."""
        return self._escapees.alive()

    def anything_alive(self) -> bool:
        """Whether a tracked outsider lives, or any process is left in the cgroup."""
        return bool(self.alive()) or (self.cgroup is not None and bool(self.cgroup.members()))

    def signal(self, signum: int) -> None:
        """Send ``signum`` to every tracked outsider (each once: never a second SIGTERM to
        a server that takes a second one as "exit now", as llama-server does)."""
        self._escapees.signal(signum)

    def kill(self) -> None:
        """SIGKILL every outsider (and, with a cgroup, everything in it); the outsiders
        alive at that moment join `killed`."""
        outside = self.track()
        self.killed = tuple(sorted({*self.killed, *outside}))
        self._escapees.signal(signal.SIGKILL)
        if self.cgroup is not None:
            self.cgroup.request_kill()

    def close(self) -> tuple[int, ...]:
        """Close every pidfd and remove the cgroup if it is empty; the outsiders (or
        cgroup members) still alive: the survivors of the stop."""
        _LEADERS.discard(self.leader)
        survivors = {*self.alive()}
        if self.cgroup is not None:
            survivors.update(self.cgroup.members())
            if not survivors:
                self.cgroup.discard()
        self._escapees.close()
        return tuple(sorted(survivors))

    async def settle(self, bound_s: float, poll_s: float) -> tuple[int, ...]:
        """After the SIGKILL: wait up to ``bound_s`` seconds (polling every ``poll_s``) for
        every outsider and cgroup member to go, then `close`; the survivors. What was
        killed and what survived is also said in the log (a warning, an error)."""
        with trio.move_on_after(bound_s):
            while self.anything_alive():  # noqa: ASYNC110  pidfds and cgroupfs: no event
                await trio.sleep(poll_s)
        survivors = self.close()
        if self.killed:
            _log.warning(
                "server process %d: %s", self.leader, outside_words(self.killed, killed=True)
            )
        if survivors:
            _log.error("server process %d: %s", self.leader, outside_words(survivors, killed=False))
        return survivors
