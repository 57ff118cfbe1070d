"""``inferactors run`` logs through stdlib logging (issue 10 item 6): ``--log-format json``
writes one JSON object per line (ts, level, logger, msg, instance, event), text lines start
with an ISO 8601 time with the date and UTC offset, and each line reaches a pipe as it
happens (read here while the supervisor still runs). A real ``inferactors run`` adopting a
real fake llama-server."""

from __future__ import annotations

import datetime
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

from inferactors.testing import start_fake_server
from support import own_state_dir_env


def adopt_run_file(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(
        'node_id = "logs"\n[[instances]]\nmode = "adopted"\nrole = "chat"\n'
        f'runtime = "infer.llamacpp"\nserve = {{ port = {port} }}\n'
    )
    return path


def lines_until(run: subprocess.Popen[bytes], *needles: str, within_s: float = 30.0) -> list[str]:
    """Lines read from the pipe while it runs, up to the first line by which each of
    ``needles`` was in some line (in whatever order they came)."""
    assert run.stdout is not None
    os.set_blocking(run.stdout.fileno(), False)
    buffer, lines = b"", []
    deadline = time.monotonic() + within_s
    with selectors.DefaultSelector() as selector:
        selector.register(run.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            selector.select(timeout=0.2)
            buffer += run.stdout.read() or b""
            *done, buffer = buffer.split(b"\n")
            lines += [line.decode() for line in done]
            left = set(needles)
            for at, line in enumerate(lines):
                left -= {needle for needle in left if needle in line}
                if not left:  # what came in the same read after it is not asked for
                    return lines[: at + 1]
    raise AssertionError(f"not every one of {needles!r} within {within_s} s: {lines}")


def run_adopting(tmp_path: Path, port: int, *flags: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "inferactors", "run", str(adopt_run_file(tmp_path, port))]
    env = own_state_dir_env(tmp_path)  # its own state directory (no [managed])
    return subprocess.Popen(
        [*argv, *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )


def stop(run: subprocess.Popen[bytes]) -> None:
    run.send_signal(signal.SIGINT)
    try:
        run.communicate(timeout=30)
    finally:
        run.kill()


def test_json_lines_parse_one_object_each_and_arrive_while_it_runs(tmp_path: Path) -> None:
    fake = start_fake_server(tmp_path / "fake")
    try:
        run = run_adopting(tmp_path, fake.port, "--log-format", "json")
        try:
            lines = lines_until(run, "supervising", "-> running")  # in either order
            assert run.poll() is None  # read from the pipe before it stopped: flushed
        finally:
            stop(run)
    finally:
        fake.stop()
    records = [json.loads(line) for line in lines]
    assert all(isinstance(record, dict) for record in records)
    for record in records:
        assert {"ts", "level", "logger", "msg"} <= record.keys(), record
        stamp = datetime.datetime.fromisoformat(record["ts"])
        assert stamp.tzinfo is not None
        assert abs(stamp.timestamp() - time.time()) < 120
        assert record["level"] in ("info", "warning")
        assert record["logger"] in ("inferactors.run", "inferactors.control")
    (change,) = [r for r in records if "-> running" in r["msg"]]
    assert change["event"] == "StateChanged"
    assert change["instance"].startswith("chat-")
    assert change["role"] == "chat"  # the name a person reads; the id stays in "instance"
    assert change["msg"] == "chat  loaded -> running (server up)"
    assert any(r["msg"] == "supervising 1 of 1 instance(s); Ctrl-C stops" for r in records)


def test_text_lines_start_with_an_iso_time_with_date_and_offset(tmp_path: Path) -> None:
    fake = start_fake_server(tmp_path / "fake")
    try:
        run = run_adopting(tmp_path, fake.port)
        try:
            lines = lines_until(run, "supervising 1 of 1")
        finally:
            stop(run)
    finally:
        fake.stop()
    for line in lines:
        stamp, level, _ = line.split(maxsplit=2)
        assert datetime.datetime.fromisoformat(stamp).tzinfo is not None, line
        assert level == "INFO", line
        assert stamp[10] == "T", line
        assert len(stamp) == len("2025-03-05T17:38:57.380+01:00"), line
    assert lines[-1].endswith("  INFO     supervising 1 of 1 instance(s); Ctrl-C stops")
