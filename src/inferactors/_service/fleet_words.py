"""The fleet's words for the operator: a server an earlier life left (`orphan_words`) and
how many instances run (`summary`)."""

from __future__ import annotations

from .._edges.orphan_record import RECORD_NAME
from .._edges.orphan_report import ReapedOrphan
from .._status import InstanceState
from .views import InstanceView


def orphan_words(orphan: ReapedOrphan) -> str:
    """One line for the operator about a server an earlier life left behind, in words: its
    pid, process group, program and port, the record (or the cgroup, for one that was
    never recorded) it was found by, what was done."""
    done = f"{orphan.outcome.value} ({orphan.detail})"
    if orphan.pid is None:
        return (
            f"found an unreadable record of an earlier life's server, {orphan.record_path}: {done}"
        )
    about = [f"process group {orphan.pgid}"] if orphan.pgid is not None else []
    about += [orphan.program] if orphan.program is not None else []
    about += [f"port {orphan.port}"] if orphan.port is not None else []
    listed = f" ({', '.join(about)})" if about else ""
    found_by = "its record" if orphan.record_path.name == RECORD_NAME else "its cgroup"
    return (
        f"found a server left by an earlier life: pid {orphan.pid}{listed}, "
        f"by {found_by} {orphan.record_path}: {done}"
    )


def summary(views: tuple[InstanceView, ...]) -> str:
    """``"3 of 4 running"``."""
    running = sum(1 for view in views if view.status.state is InstanceState.RUNNING)
    return f"{running} of {len(views)} running"
