"""``inferactors status`` shows the scheduler's figures (RESIDENCY, MEMORY, REQS, TTL)
only when a view carries them; the front door's events print as one line each."""

from __future__ import annotations

import datetime
from typing import Any

from inferactors._actors.front_door_msgs import ResidencyView
from inferactors._actors.front_door_seam import Residency
from inferactors._cli.control_format import status_table
from inferactors._cli.output import describe_event
from inferactors._config.convert_api import api_data
from inferactors._events import FootprintDrift, OnDemandStart, QueuedRequestRefused, ResidencyStop
from inferactors._service.views import InstanceView
from inferactors._status import InstanceState, InstanceStatus
from inferactors._stop_reasons import StopReason


def _view(name: str, residency: ResidencyView | None) -> dict[str, Any]:
    status = InstanceStatus(InstanceState.RUNNING, pid=42, uptime_s=61.0, serving=True)
    view = InstanceView(name, "infer.llamacpp", "managed", f"id-{name}", status, None, residency)
    data: dict[str, Any] = api_data(view)
    return data


def test_the_table_grows_the_schedulers_columns_only_when_it_runs() -> None:
    plain = status_table([_view("chat", None)])
    assert plain.splitlines()[0].split() == [
        "NAME", "MODE", "STATE", "ENDPOINT", "MODEL", "PID", "UPTIME", "RESTARTS", "DETAIL"
    ]  # fmt: skip
    residency = ResidencyView(
        residency=Residency.RESIDENT,
        on_demand=True,
        declared_bytes=1_570_912,
        estimated_bytes=18_692_672,
        measured_bytes=19_000_000,
        kv_bytes=1_048_576,
        in_flight=1,
        queued=2,
        ttl_left_s=299.5,
    )
    table = status_table([_view("chat", residency), _view("always", None)]).splitlines()
    assert table[0].split() == [
        "NAME", "MODE", "STATE", "ENDPOINT", "MODEL", "PID", "UPTIME", "RESTARTS",
        "RESIDENCY", "MEMORY", "REQS", "TTL", "DETAIL",
    ]  # fmt: skip
    assert table[1].split() == [
        "chat", "managed", "running", "-", "-", "42", "1m01s", "0",
        "resident", "1.6", "MB/18.7", "MB/19.0", "MB", "1+2", "4m59s",
    ]  # fmt: skip
    assert table[2].split()[8:12] == ["-", "-", "-", "-"]


def test_the_front_door_events_print_in_words() -> None:
    assert describe_event(OnDemandStart("chat-1", "request", 600_000_000, 1.0)) == (
        "chat-1  on-demand start (request); first waits for 600.0 MB of free memory"
    )
    stop = ResidencyStop("chat-1", StopReason.EVICTED, "to make room for 'code'", 2.0)
    assert describe_event(stop) == "chat-1  stopping (evicted): to make room for 'code'"
    refused = QueuedRequestRefused("chat-1", "wait-timeout", "waited 5.0 s", 5.0, 3.0)
    assert describe_event(refused) == (
        "chat-1  request refused after 5.0 s (wait-timeout): waited 5.0 s"
    )
    drift = FootprintDrift("chat-1", 800_000_000, 1_200_000_000, 4.0)
    assert describe_event(drift) == "chat-1  memory drift: measured 1.2 GB, expected 800.0 MB"


def test_a_stop_that_waits_shows_stopping_and_its_kill_time() -> None:
    status = InstanceStatus(InstanceState.RUNNING, pid=42, uptime_s=61.0, stop_deadline=70.0)
    view = InstanceView(
        "chat", "infer.llamacpp", "managed", "id-chat", status, stop_deadline_at=1_800_000_000.0
    )
    (row,) = status_table([api_data(view)]).splitlines()[1:]
    killed_at = datetime.datetime.fromtimestamp(1_800_000_000.0).isoformat(timespec="milliseconds")
    assert row.split()[:3] == ["chat", "managed", "stopping"]
    assert row.endswith(f"stopping: killed at {killed_at} if still running")
