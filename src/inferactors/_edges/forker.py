"""The forker: the one thread every managed server is forked from.

Linux sends a child its parent-death signal when the *thread* that forked it ends. trio's
worker threads end after 10 s idle, and forking in the trio thread blocks the event loop
for the whole ``subprocess.Popen``; so `in_forker` hands the fork to a daemon thread of its
own, started at the first spawn, that never ends. Why, and what is left of the loop's
wait: ``spawn.py``'s module docstring.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import TypeVar

import attrs
import trio

T = TypeVar("T")
_Job = tuple[Callable[[], object], Callable[[object, BaseException | None], None]]


@attrs.define(eq=False)
class _Forker:
    """The thread every child is forked from; it never ends (see the module docstring)."""

    jobs: queue.SimpleQueue[_Job] = attrs.Factory(queue.SimpleQueue)
    thread: threading.Thread | None = None
    lock: threading.Lock = attrs.Factory(threading.Lock)

    def submit(self, job: _Job) -> None:
        with self.lock:
            if self.thread is None:
                self.thread = threading.Thread(
                    target=self._serve, name="inferactors forker", daemon=True
                )
                self.thread.start()
        self.jobs.put(job)

    def _serve(self) -> None:
        while True:
            work, done = self.jobs.get()
            try:
                result = work()
            except BaseException as error:  # handed to the waiting task, raised there
                done(None, error)
            else:
                done(result, None)


_FORKER = _Forker()


async def in_forker(work: Callable[[], T]) -> T:
    """Run ``work`` in the forker thread and return its result (or raise its exception).

    The wait is shielded from cancellation: a fork cannot be taken back, and its child must
    reach a caller that owns it. Use it for short work only (a fork and exec).
    """
    token = trio.lowlevel.current_trio_token()
    finished = trio.Event()
    outcome: list[tuple[object, BaseException | None]] = []

    def done(result: object, error: BaseException | None) -> None:
        outcome.append((result, error))
        token.run_sync_soon(finished.set)

    _FORKER.submit((work, done))
    with trio.CancelScope(shield=True):
        await finished.wait()
    result, error = outcome[0]
    if error is not None:
        raise error
    return result  # type: ignore[return-value]  # what ``work`` returned
