"""A server still starting is never taken for another server's orphan.

In ``inferactors run`` (a child subreaper that claims the orphans outside its session), a
server's exit looks at our children (`descendants.adopted_from`) and takes every one in a
session other than ours that is not a server's leader. A server just spawned is our child
in a session of its own before its start has returned; it was taken for the exited
server's orphan and SIGKILLed (seen in the README's Operate session: ``chat`` killed the
moment ``broken`` failed to start, their pids one apart). The spawn now notes the leader
in the same step (`descendants.spawn_leader`).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator

import pytest

from edges.process_support import _set_subreaper
from inferactors._edges.descendants import adopted_from, claim_orphans, forget_leader, spawn_leader
from inferactors._edges.subreaper import is_subreaper

SLEEPER = (sys.executable, "-c", "import time; time.sleep(30)")


def _spawn_in_own_session() -> int:
    return os.posix_spawn(SLEEPER[0], SLEEPER, dict(os.environ), setsid=True)


@pytest.fixture
def claiming() -> Iterator[None]:
    """This process as ``inferactors run`` is: a child subreaper claiming orphans."""
    if not sys.platform.startswith("linux"):
        pytest.skip("child subreapers are Linux's")
    was = is_subreaper()
    _set_subreaper(True)
    claim_orphans()
    try:
        yield
    finally:
        claim_orphans(False)
        if not was:
            _set_subreaper(False)


@pytest.fixture
def children() -> Iterator[list[int]]:
    made: list[int] = []
    yield made
    for pid in made:
        forget_leader(pid)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_a_server_spawned_as_a_leader_is_no_orphan_of_another(
    claiming: None, children: list[int]
) -> None:
    starting = spawn_leader(_spawn_in_own_session)
    children.append(starting)
    exited_leader = 2**22 - 1  # a server that just exited (no such process)
    assert starting not in adopted_from(exited_leader, ())


def test_a_child_in_its_own_session_not_noted_as_a_leader_is_claimed(
    claiming: None, children: list[int]
) -> None:
    """The rule the first test guards against: without the note, the same child is taken."""
    stranger = _spawn_in_own_session()
    children.append(stranger)
    assert stranger in adopted_from(2**22 - 1, ())
