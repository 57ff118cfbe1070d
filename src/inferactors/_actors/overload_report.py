"""The supervisor's own overload, reported as its state (split from ``supervisor``).

The event loop's overloads (``_edges/loop_lag.py``: a deadline that lost its verdict, or a
stall over ``_policy.lateness.LATE_S``) are published once each, as `SupervisorOverloaded`
and `SupervisorCaughtUp` events and in the status board's ``supervisor`` field
(`InferRuntime.supervisor_status`), never as a server's.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from .._edges.loop_lag import loop_lag
from .._events import Event, SupervisorCaughtUp, SupervisorOverloaded
from .._policy.lateness import Overload
from .._status import SupervisorStatus
from .status_board import StatusBoard


async def report_overloads(board: StatusBoard, publish: Callable[[Event], None]) -> None:
    """Follow this run's overloads until cancelled, writing ``board.supervisor`` and
    publishing each start and end once (``publish``: the supervisor's fan-out)."""
    lag = loop_lag()
    current = lag.overloaded
    if current is not None:
        board.supervisor = SupervisorStatus(True, current.since, current.why)
    async for report in lag.reports():
        now = trio.current_time()
        if isinstance(report, Overload):
            board.supervisor = SupervisorStatus(True, report.since, report.why)
            publish(SupervisorOverloaded(report.why, report.since, now))
        else:
            board.supervisor = SupervisorStatus()
            publish(
                SupervisorCaughtUp(report.lasted_s, report.no_verdicts, report.worst_stall_s, now)
            )
