"""Words that match the world (issue 19 item 3), from the client commands run as separate
processes against a real control server over a fake fleet: display states, endpoint and
model in ``status``; ``start``/``restart`` wait for the instance to settle (``--wait``,
``--no-wait``) and exit 1 when it did not end running (4 when the wait ran out first); a
stop of a stopped instance exits 0 and says so."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import partial
from pathlib import Path

import attrs
import pytest
import trio

from inferactors._service.control_server import serve_control
from inferactors._status import InstanceState, InstanceStatus
from service.control_support import FakeFleet, shown


async def cli(*argv: str) -> subprocess.CompletedProcess[bytes]:
    return await trio.run_process(
        [sys.executable, "-m", "inferactors", *argv],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )


@pytest.fixture
async def fleet(tmp_path: Path, nursery: trio.Nursery) -> FakeFleet:
    served = FakeFleet()
    await nursery.start(partial(serve_control, served, state_dir=tmp_path))
    return served


def put(fleet: FakeFleet, name: str, status: InstanceStatus) -> None:
    view = fleet.instances[name]
    fleet.instances[name] = attrs.evolve(view, status=status, display_state=shown(status))


GAVE_UP = InstanceStatus(
    InstanceState.EXITED,
    "failed to start: bad model file",
    stop_reason="config-error",
    supervision="gave up: config-error: bad model file",
)
BACKOFF = InstanceStatus(
    InstanceState.EXITED,
    "server process exited",
    stop_reason="crash",
    exit_code=1,
    supervision="restarting in 2.0 s (attempt 1)",
)
STARTING = InstanceStatus(InstanceState.DEGRADED, "starting: waiting for a first token", pid=7)


async def test_status_shows_display_states_endpoint_and_model(
    fleet: FakeFleet, tmp_path: Path
) -> None:
    put(fleet, "chat", GAVE_UP)
    put(fleet, "embed", BACKOFF)
    table = await cli("status", "--state-dir", str(tmp_path))
    raw = await cli("status", "--json", "--state-dir", str(tmp_path))
    rows = [line.split()[:5] for line in table.stdout.decode().splitlines()[1:]]
    assert rows == [
        ["chat", "managed", "fatal", "127.0.0.1:8101", "tiny"],
        ["embed", "managed", "backoff", "127.0.0.1:8102", "tiny"],
    ]
    views = json.loads(raw.stdout)
    assert [(v["display_state"], v["status"]["state"]) for v in views] == [
        ("fatal", "exited"),
        ("backoff", "exited"),
    ]
    assert views[0]["endpoint"] == "http://127.0.0.1:8101"
    assert views[0]["model"] == "tiny"


async def test_a_start_asks_the_supervisor_to_wait_and_no_wait_does_not(
    fleet: FakeFleet, tmp_path: Path
) -> None:
    put(fleet, "chat", InstanceStatus(InstanceState.EXITED, stop_reason="requested"))
    put(fleet, "embed", InstanceStatus(InstanceState.EXITED, stop_reason="requested"))
    waited = await cli("start", "chat", "--wait", "30", "--state-dir", str(tmp_path))
    quick = await cli("restart", "embed", "--no-wait", "--state-dir", str(tmp_path))
    assert waited.returncode == 0, waited.stderr
    assert waited.stdout == b"chat: running\n"
    assert quick.returncode == 0, quick.stderr
    assert fleet.waits == [30.0, 0.0]


async def test_a_start_that_ends_anywhere_but_running_exits_1_or_4_when_the_wait_ran_out(
    fleet: FakeFleet, tmp_path: Path
) -> None:
    put(fleet, "chat", InstanceStatus(InstanceState.EXITED, stop_reason="requested"))
    fleet.start_status = GAVE_UP
    failed = await cli("start", "chat", "--state-dir", str(tmp_path))
    fleet.start_status = STARTING
    late = await cli("restart", "chat", "--wait", "1", "--state-dir", str(tmp_path))
    spawned = await cli("restart", "chat", "--no-wait", "--state-dir", str(tmp_path))
    assert failed.returncode == 1
    assert failed.stdout.decode().startswith("chat: fatal (failed to start: bad model file;")
    assert late.returncode == 4  # still starting when the wait ran out: not a failure yet
    assert late.stdout.decode().startswith("chat: starting, pid 7")
    assert b"restart: timed out: chat is still starting after --wait 1 s" in late.stderr
    assert spawned.returncode == 0  # not waited for: starting is as expected


async def test_stopping_a_stopped_instance_exits_0_and_says_so(
    fleet: FakeFleet, tmp_path: Path
) -> None:
    first = await cli("stop", "chat", "--state-dir", str(tmp_path))
    again = await cli("stop", "chat", "--state-dir", str(tmp_path))
    assert (first.returncode, again.returncode) == (0, 0)
    assert first.stdout == b"chat: stopped (reason: requested)\n"
    assert again.stdout == b"chat: already stopped (reason: requested)\n"


async def test_the_api_refuses_a_bad_wait(fleet: FakeFleet, tmp_path: Path) -> None:
    from inferactors._cli.control_client import ControlClient, ControlError
    from inferactors._service.control_server import control_socket_path

    client = ControlClient.open(control_socket_path(tmp_path), 5.0)
    bad: dict[str, str | int | float] = {"wait": -1}
    with pytest.raises(ControlError, match="wait must be a number of seconds"):
        await trio.to_thread.run_sync(client.post, "/v1/instances/chat/start", 5.0, bad)
    assert fleet.waits == []


async def test_logs_of_an_adopted_server_say_its_output_is_not_ours(
    fleet: FakeFleet, tmp_path: Path
) -> None:
    fleet.instances["other"] = attrs.evolve(fleet.instances["embed"], name="other", mode="adopted")
    done = await cli("logs", "other", "--state-dir", str(tmp_path))
    followed = await cli("logs", "other", "-f", "--state-dir", str(tmp_path))
    for answer in (done, followed):
        assert answer.returncode == 0
        assert answer.stdout == b""
        assert answer.stderr.decode().startswith("inferactors logs: other is adopted:")
