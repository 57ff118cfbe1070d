"""Colour and the terminal's width on a TTY only, ``NO_COLOR`` honoured (issue 19 item 5):
``inferactors status`` run on a real pseudo-terminal, then into a pipe."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import trio

from inferactors._cli.terminal import colour_wanted, table
from inferactors._service.control_server import serve_control
from service.control_support import FakeFleet

LONG = "a detail long enough to run past a narrow terminal's edge, and on, and on, and on"


@pytest.fixture
async def fleet(tmp_path: Path, nursery: trio.Nursery) -> FakeFleet:
    served = FakeFleet()
    await nursery.start(partial(serve_control, served, state_dir=tmp_path))
    return served


def _on_a_tty(argv: list[str], env: dict[str, str]) -> bytes:
    """What ``argv`` writes to a pseudo-terminal (its stdout and stderr)."""
    leader, follower = pty.openpty()
    try:
        process = subprocess.Popen(argv, stdout=follower, stderr=follower, env=env)
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other side closed
                break
            if not chunk:
                break
            seen += chunk
        assert process.wait(timeout=30) == 0, seen
        return seen
    finally:
        os.close(leader)


def _status(tmp_path: Path, **env: str) -> bytes:
    argv = [sys.executable, "-m", "inferactors", "status", "--state-dir", str(tmp_path)]
    base = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS")}
    return _on_a_tty(argv, {**base, "TERM": "xterm", **env})


async def test_a_terminal_gets_colour_and_its_width_a_pipe_neither(
    fleet: FakeFleet, tmp_path: Path
) -> None:
    import attrs

    fleet.instances["chat"] = attrs.evolve(
        fleet.instances["chat"],
        status=attrs.evolve(fleet.instances["chat"].status, detail=LONG),
    )
    coloured = await trio.to_thread.run_sync(partial(_status, tmp_path, COLUMNS="90"))
    plain = await trio.to_thread.run_sync(partial(_status, tmp_path, COLUMNS="90", NO_COLOR="1"))
    piped = await trio.run_process(
        [sys.executable, "-m", "inferactors", "status", "--state-dir", str(tmp_path)],
        capture_stdout=True,
        env={**os.environ, "COLUMNS": "90", "TERM": "xterm"},
    )
    assert b"\x1b[32mrunning\x1b[0m" in coloured
    assert b"\x1b[" not in plain
    assert max(len(line) for line in plain.decode().splitlines()) <= 90, plain.decode()
    assert "…" in plain.decode()
    assert b"\x1b[" not in piped.stdout
    assert LONG in piped.stdout.decode()  # a pipe gets whole lines


def test_no_color_set_but_empty_is_no_request() -> None:
    class Tty:
        def isatty(self) -> bool:
            return True

    tty = Tty()
    assert colour_wanted(tty, {"TERM": "xterm"})  # type: ignore[arg-type]
    assert colour_wanted(tty, {"TERM": "xterm", "NO_COLOR": ""})  # type: ignore[arg-type]
    assert not colour_wanted(tty, {"TERM": "xterm", "NO_COLOR": "1"})  # type: ignore[arg-type]
    assert not colour_wanted(tty, {"TERM": "dumb"})  # type: ignore[arg-type]


def test_the_last_column_is_cut_to_the_width_but_never_below_its_floor() -> None:
    rows = [("NAME", "DETAIL"), ("chat", "x" * 50)]
    assert [len(line) for line in table(rows, width=30).splitlines()] == [12, 30]
    assert table(rows, width=30).splitlines()[1].endswith("x…")
    assert len(table(rows, width=5).splitlines()[1]) == 6 + 12  # the floor: 12 characters
    assert table(rows).splitlines()[1] == "chat  " + "x" * 50
