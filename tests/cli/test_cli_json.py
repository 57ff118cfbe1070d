"""``--json`` on every client command that prints data (issue 19 item 5): ``start``,
``stop``, ``restart`` print the instance's view, ``reload`` its result, ``logs`` NDJSON
lines as the API sends them; against a real control server over a fake fleet."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import trio

from inferactors._service.control_server import serve_control
from service.control_support import FakeFleet


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


async def test_stop_json_is_the_view_after_it(fleet: FakeFleet, tmp_path: Path) -> None:
    done = await cli("stop", "chat", "--json", "--state-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)
    assert (view["name"], view["status"]["state"]) == ("chat", "exited")
    assert view["status"]["stop_reason"] == "requested"


async def test_reload_json_is_its_result(fleet: FakeFleet, tmp_path: Path) -> None:
    done = await cli("reload", "--json", "--state-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["added"] == ["new"]
    assert set(result) >= {"added", "removed", "changed", "unchanged", "refused"}


async def test_logs_json_are_the_apis_lines(fleet: FakeFleet, tmp_path: Path) -> None:
    for text in ("one", "two"):
        fleet.add_line("chat", text)
    done = await cli("logs", "chat", "-n", "2", "--json", "--state-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert [line["text"] for line in lines] == ["one", "two"]
    assert all({"at", "stream", "pid", "text"} <= line.keys() for line in lines)
