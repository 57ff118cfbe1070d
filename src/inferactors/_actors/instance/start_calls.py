"""Starts that coalesce, and what cancelling one means (issue 9, items 8 and 9).

Concurrent starts of one instance are one start: the first spawns, every later caller joins
its waiters, and all of them get the one outcome (the same None, or the same error), never
one success and one "already running". `StartWaiters` holds them for the instance actor. A
start after the spawn was answered is a new command, and is refused "already running".

A trio caller that is cancelled expects the operation it asked for to be cancelled, unless
others still wait for it. A caller that gives up closes its reply channel (``messages.call``
leaves it), which the actor can see (`StartWaiters.abandoned`):

- a start whose caller gave up before the actor read it spawns nothing;
- a start whose callers have all given up is abandoned when its spawn returns: the server
  is stopped at once, as by a stop (Exited, reason ``requested``, not counted against the
  restart budget). The spawn itself is not cut in the middle (an exec half done would leave
  a process nobody tracks); it is bounded by the pin check and the exec;
- while one caller still waits, the start goes on, and that caller gets its outcome;
- a start already answered is not undone: the answer won the race with the cancellation.
"""

from __future__ import annotations

from typing import Any

import attrs
import trio

from ..._edges.capture import RunEvidence
from ..._errors import InferactorsError, InvalidState
from ..messages import Reply, ReplyTo, Stop, answer, refuse

ABANDONED_GRACE_S = 5.0
"""SIGTERM grace for the server of a start every caller gave up on."""


def caller_gone(reply: ReplyTo[Any]) -> bool:
    """Whether the caller waiting on ``reply`` gave up (its receiving end is closed)."""
    return reply.statistics().open_receive_channels == 0


def abandoning_stop() -> Stop:
    """The stop an abandoned start gets: its answer has no reader."""
    nobody, unread = trio.open_memory_channel[Reply[RunEvidence]](1)
    unread.close()
    return Stop(ABANDONED_GRACE_S, nobody)


@attrs.define
class StartWaiters:
    """The callers of the start in flight: the first and every one that joined it."""

    replies: list[ReplyTo[None]] = attrs.Factory(list)

    def join(self, reply: ReplyTo[None]) -> None:
        """Add a caller; it gets the outcome the others get."""
        self.replies.append(reply)

    def abandoned(self) -> bool:
        """Whether there were callers and every one of them gave up (was cancelled)."""
        return bool(self.replies) and all(caller_gone(reply) for reply in self.replies)

    def succeed(self) -> None:
        """Answer every caller None (spawned) and forget them."""
        replies, self.replies = self.replies, []
        for reply in replies:
            answer(reply, None)

    def abort(self, instance_id: str, by: str) -> None:
        """Answer every caller that the start of ``instance_id`` was aborted ``by`` (a stop,
        a crash): `InvalidState`."""
        self.fail(InvalidState(f"the start of {instance_id} was aborted by {by}"))

    def fail(self, error: InferactorsError) -> None:
        """Answer every caller with ``error`` and forget them."""
        replies, self.replies = self.replies, []
        for reply in replies:
            refuse(reply, error)
