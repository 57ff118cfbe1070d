"""What a server's process tree costs now: `tree_usage`, the one reader of a tree's
resident memory and CPU time (the web page's plots, the ``/metrics`` scrape, the front
door's memory gauge).

The tree is found from the kernel's ``children`` lists (`proctable.tree_pids`: about
20 microseconds for a small server), not from psutil's ``children(recursive=True)``,
which reads the parent of every process on the host (about 5 ms with 100 processes);
each member is then read by psutil (``oneshot``: one read of its ``stat`` files for both
figures).
"""

from __future__ import annotations

import attrs
import psutil

from .proctable import tree_pids


@attrs.frozen
class TreeUsage:
    """What a server's process tree costs now: resident memory in bytes, and CPU time in
    float seconds (user and system, of the processes alive now)."""

    rss_bytes: int
    cpu_s: float


def tree_usage(pid: int) -> TreeUsage | None:
    """`TreeUsage` of ``pid`` and every descendant, or None when ``pid`` is gone or
    cannot be read (a descendant that ends while it is read is left out). Blocking (reads
    ``/proc``): call it in a worker thread."""
    members = tree_pids(pid)
    if not members:
        return None
    rss, cpu = 0, 0.0
    for member in members:
        try:
            process = psutil.Process(member)
            with process.oneshot():
                rss += process.memory_info().rss
                times = process.cpu_times()
        except psutil.Error:
            if member == pid:
                return None
            continue  # it ended meanwhile
        cpu += times.user + times.system
    return TreeUsage(rss, cpu)
