"""``inferactors llama-server`` builds the pinned server when none is found: Ctrl-C in the
middle prints one line, not a traceback, and removes the half-built tree, and the next run
starts clean (a Ctrl-C left 251 MB behind and printed a traceback). The command runs in a
process of its own (sent a real SIGINT) whose compile is a fake step injected as
``ensure_llama_server``'s ``build_command`` (a real process too), so the test does not
compile llama.cpp."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

FAKE_BUILD = """\
import os, sys, time
build = sys.argv[1]
if os.listdir(build):
    sys.exit("not a clean start: " + repr(os.listdir(build)))
os.makedirs(os.path.join(build, "obj"))
for n in range(1, 11):
    with open(os.path.join(build, "obj", f"{n}.o"), "wb") as obj:
        obj.write(b"x" * (1 << 20))
    print(f"[{n}/10] Building CXX object obj/{n}.o", flush=True)
    if n == 3 and os.environ.get("FAKE_BUILD_HANG"):
        time.sleep(60)
os.makedirs(os.path.join(build, "bin"))
server = os.path.join(build, "bin", "llama-server")
with open(server, "w") as out:
    out.write("#!/bin/sh\\necho fake llama-server\\n")
os.chmod(server, 0o755)
"""


COMMAND = """\
import argparse, sys
from inferactors._cli.main import _llama_server
sys.exit(_llama_server(argparse.Namespace(), build_command=sys.argv[1:]))
"""
"""``inferactors llama-server`` with the fake build injected (its argv after ``-c``)."""


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "INFERACTORS_LLAMA_SERVER"}
    return {
        **env,
        "PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin",  # no llama-server on it
        "INFERACTORS_CACHE_DIR": str(tmp_path / "cache"),
        **extra,
    }


def _command(tmp_path: Path) -> list[str]:
    fake = tmp_path / "fake_build.py"
    fake.write_text(FAKE_BUILD)
    return [sys.executable, "-c", COMMAND, sys.executable, str(fake)]


def _build(tmp_path: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        _command(tmp_path),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: Ctrl-C reaches the whole group
    )


def test_ctrl_c_mid_build_says_one_line_removes_the_partial_tree_and_a_rerun_is_clean(
    tmp_path: Path,
) -> None:
    root = tmp_path / "cache" / "llama-server" / "llama-cpp-python-0.3.36"
    build = _build(tmp_path, _env(tmp_path, FAKE_BUILD_HANG="1"))
    try:
        assert build.stderr is not None
        said: list[str] = []
        while not said or "(3/10)" not in said[-1]:
            line = build.stderr.readline()
            assert line, "the build ended before its progress reached 3/10: " + "".join(said)
            said.append(line)
        assert (root / "build" / "obj" / "3.o").is_file()  # a partial tree is there
        os.killpg(build.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        out, rest = build.communicate(timeout=30)
    finally:
        build.kill()
    assert build.returncode == 130
    assert out == ""
    assert rest == f"inferactors llama-server: interrupted; removed the partial build in {root}\n"
    assert "Traceback" not in "".join(said)
    assert sorted(p.name for p in root.iterdir()) == [".lock", "build.log"]
    again = subprocess.run(
        _command(tmp_path),
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"{root / 'bin' / 'llama-server'}\n"
    progress = [line for line in again.stderr.splitlines() if "compiling" in line]
    assert progress == [  # not a terminal: one line per step of 10 %, no carriage return
        f"inferactors: compiling llama-server {p:3d}% ({p // 10}/10)" for p in range(10, 101, 10)
    ]
    assert sorted(p.name for p in root.iterdir()) == [".lock", "bin", "build.log"]


def test_a_build_left_behind_by_a_killed_run_is_removed_before_building(tmp_path: Path) -> None:
    root = tmp_path / "cache" / "llama-server" / "llama-cpp-python-0.3.36"
    (root / "build" / "obj").mkdir(parents=True)
    (root / "build" / "obj" / "stale.o").write_bytes(b"x" * 1000)  # the fake refuses it
    (root / "src").mkdir()
    done = subprocess.run(
        _command(tmp_path),
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert not (root / "src").exists()
    assert not (root / "build").exists()
