"""The web page's rows: the display state an operator acts on, derived from the status in
one place; the front door's residency against its budget."""

from __future__ import annotations

import attrs
import pytest

from inferactors._actors.front_door_msgs import ResidencyView
from inferactors._actors.front_door_seam import Residency
from inferactors._cli.control_format import shown_state
from inferactors._config.convert_api import api_data
from inferactors._edges.tree_usage import TreeUsage
from inferactors._policy import service_status
from inferactors._service.ui_history import UiHistory
from inferactors._service.ui_rows import DISPLAY_STATES, display_state, door_summary, row
from inferactors._service.views import InstanceView
from inferactors._status import InstanceState, InstanceStatus

L, R, D, E, U = (InstanceState.LOADED, InstanceState.RUNNING, InstanceState.DEGRADED,
                 InstanceState.EXITED, InstanceState.UNKNOWN)  # fmt: skip


def view(
    status: InstanceStatus,
    *,
    mode: str = "managed",
    refused: str | None = None,
    residency: ResidencyView | None = None,
    on_demand: bool = False,
) -> InstanceView:
    """A view as the fleet makes it (`Member.view`): its display state from the policy."""
    stopping = residency is not None and residency.residency is Residency.STOPPING
    shown = service_status.display_state(
        status, adopted=mode == "adopted", refused=refused, on_demand=on_demand, stopping=stopping
    )
    return InstanceView(
        "chat", "infer.llamacpp", mode, "chat-1", status, refused, residency, display_state=shown
    )


def resident(
    phase: Residency, declared: int, measured: int | None, flight: int = 0
) -> ResidencyView:
    return ResidencyView(phase, True, declared, 0, measured, 0, flight, 1, None)


@pytest.mark.parametrize(
    ("status", "options", "shown"),
    [
        (InstanceStatus(R, "server up", pid=1), {}, "running"),
        (InstanceStatus(L, "loading"), {}, "starting"),
        (InstanceStatus(D, "starting: not listening yet", pid=1), {}, "starting"),
        (InstanceStatus(D, "loading model", pid=1), {}, "starting"),
        (InstanceStatus(D, "slow: first token in 12 s", pid=1), {}, "degraded"),
        (InstanceStatus(E, stop_reason="crash", supervision="restarting in 2.0 s"), {}, "backoff"),
        (InstanceStatus(E, stop_reason="requested"), {}, "stopped"),
        (InstanceStatus(L), {"on_demand": True}, "idle"),  # on demand, never started
        (InstanceStatus(E, stop_reason="evicted"), {"on_demand": True}, "idle"),
        (InstanceStatus(E, stop_reason="crash", exit_code=-9), {"on_demand": True}, "idle"),
        (InstanceStatus(E, stop_reason="requested"), {"on_demand": True}, "stopped"),
        (InstanceStatus(E, supervision="gave up: restart budget spent (5 of 5)"), {}, "fatal"),
        (InstanceStatus(E, stop_reason="tampered"), {}, "fatal"),
        (InstanceStatus(E, stop_reason="exposure"), {}, "fatal"),
        (InstanceStatus(L), {"refused": "unknown model 'x'"}, "fatal"),
        (InstanceStatus(U, "not answering"), {"mode": "adopted"}, "unknown"),
        (InstanceStatus(E), {"mode": "adopted"}, "gone"),
        (
            InstanceStatus(R, "server up", pid=1),
            {"residency": resident(Residency.STOPPING, 10, None)},
            "stopping",
        ),
    ],
)
def test_the_page_shows_the_display_state_the_cli_shows(
    status: InstanceStatus, options: dict[str, object], shown: str
) -> None:
    one = view(status, **options)  # type: ignore[arg-type]
    assert shown in DISPLAY_STATES
    assert display_state(one) == shown
    assert display_state(one) == one.display_state.value  # `inferactors status`'s word
    assert shown_state(api_data(one)) == shown


def test_a_row_has_what_the_page_shows_and_the_usage_of_the_process_shown() -> None:
    history = UiHistory(wall=lambda: 1_800_000_000.0, monotonic=lambda: 0.0)
    history.on_usage({"chat": (42, TreeUsage(rss_bytes=19_000_000, cpu_s=1.0))})
    status = InstanceStatus(R, "server up", pid=42, uptime_s=3.5, restarts=2, ttft_s=0.07)
    served = attrs.evolve(view(status), endpoint="http://127.0.0.1:8090", model="tiny")
    shown = row(served, history)
    assert {key: shown[key] for key in ("name", "state", "endpoint", "model", "pid")} == {
        "name": "chat",
        "state": "running",
        "endpoint": "http://127.0.0.1:8090",
        "model": "tiny",
        "pid": 42,
    }
    assert (shown["uptime_s"], shown["restarts"], shown["ttft_s"]) == (3.5, 2, 0.07)
    assert (shown["rss_bytes"], shown["cpu_percent"]) == (19_000_000, None)
    assert shown["detail"] == "server up"
    assert shown["status"]["state"] == "running"


def test_the_detail_says_a_refusal_or_why_it_stopped_and_what_is_done() -> None:
    crashed = InstanceStatus(E, "server process exited", stop_reason="crash",
                             supervision="restarting in 0.5 s")  # fmt: skip
    history = UiHistory()
    assert row(view(crashed), history)["detail"] == (
        "server process exited; reason: crash; restarting in 0.5 s"
    )
    refused = view(InstanceStatus(L), refused="unknown model 'x'")
    assert row(refused, history)["detail"] == ("refused: unknown model 'x'")


def test_the_front_door_counts_what_is_held_against_the_budget() -> None:
    views = [
        view(InstanceStatus(R), residency=resident(Residency.RESIDENT, 100, 150, flight=2)),
        view(InstanceStatus(R), residency=resident(Residency.STARTING, 100, None)),
        view(InstanceStatus(L), residency=resident(Residency.NOT_LOADED, 500, None)),
    ]
    assert door_summary(views, lambda: 1000) == {
        "budget_bytes": 1000,
        "resident_bytes": 250,  # measured once known, never less than declared
        "in_flight": 2,
        "queued": 3,
    }
    assert door_summary([view(InstanceStatus(R))], lambda: 1000) is None  # no scheduler
