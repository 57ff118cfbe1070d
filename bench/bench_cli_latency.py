"""A client command's latency next to ``curl --unix-socket`` on the same route (issue 19,
item 2).

A real ``inferactors run`` supervises one adopted fake llama-server (its state directory in
a temporary ``XDG_STATE_HOME``). Then, interleaved in each round (the order rotated every
round), each of these is run as a new process and timed from spawn to exit:

* ``inferactors status`` and ``curl .../v1/instances``;
* ``inferactors logs chat -n 10`` and ``curl .../v1/instances/chat/logs?lines=10`` (the
  server is adopted: the route answers that its output is not ours, a 4xx, and the command
  says so and exits 0; curl is run without ``-f`` on this route alone, so both make and read
  the same request);
* ``inferactors events -n 20`` and ``curl .../v1/events?since=20``;
* ``inferactors probe readyz`` and ``curl .../readyz``;
* ``python -c pass``: the interpreter's own floor, for what no import can remove.

Each command is the console script with ``--state-dir`` (no run file read). Columns: the
median and the 90th percentile over the rounds, the CLI's median over curl's (target: at
most 2x), and the verdict against 150 ms (meant for an idle machine: the load average at
the end is printed).

Settings (environment): ``BENCH_ROUNDS`` (25; ``--quick``: 5).

Run: ``.venv/bin/python bench/bench_cli_latency.py`` (about 20 s).
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from _common import env_float, load_note, print_context, print_grid, verdict

from inferactors._config.state_dir import control_socket_path
from inferactors.testing import start_fake_server

ROUNDS = int(env_float("BENCH_ROUNDS", 25, 5))
TARGET_MS = 150.0
TARGET_RATIO = 2.0
BIN = Path(sys.executable).parent
CLI = str(BIN / "inferactors")

ROUTES = (
    ("status", ["status"], "/v1/instances", "-sf"),
    ("logs", ["logs", "chat", "-n", "10"], "/v1/instances/chat/logs?lines=10", "-s"),
    ("events", ["events", "-n", "20"], "/v1/events?since=20", "-sf"),
    ("probe", ["probe", "readyz"], "/readyz", "-sf"),
)
"""Each command, the route it asks (what curl asks too) and curl's flags (``-f`` where the
route answers 2xx: an error would stop the bench rather than be timed)."""


def timed_ms(argv: Sequence[str], env: dict[str, str]) -> float:
    """Milliseconds from spawning ``argv`` to its exit (it must exit 0)."""
    began = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True, timeout=60)
    return (time.perf_counter() - began) * 1000


@contextmanager
def supervisor(where: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A real ``inferactors run`` adopting one fake llama-server; its state directory."""
    fake = start_fake_server(where / "fake")
    env = {**os.environ, "XDG_STATE_HOME": str(where / "state-home")}
    run_file = where / "run.toml"
    run_file.write_text(
        '[[instances]]\nmode = "adopted"\nrole = "chat"\nruntime = "infer.llamacpp"\n'
        f"serve = {{ port = {fake.port} }}\n"
    )
    state_dir = where / "state-home" / "inferactors"
    run = subprocess.Popen(
        [CLI, "run", str(run_file)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    try:
        wait_ready(state_dir, env)
        yield state_dir, env
    finally:
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=30)
        fake.stop()


def wait_ready(state_dir: Path, env: dict[str, str]) -> None:
    """Until ``inferactors probe readyz`` answers 200 (60 s at most)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        asked = [CLI, "probe", "readyz", "--state-dir", str(state_dir)]
        if subprocess.run(asked, env=env, capture_output=True, check=False).returncode == 0:
            return
        time.sleep(0.2)
    raise RuntimeError("the supervisor was not ready within 60 s")


def measure(state_dir: Path, env: dict[str, str]) -> dict[str, list[float]]:
    """`ROUNDS` rounds of every command, its curl and the interpreter's floor."""
    sock = str(control_socket_path(state_dir))
    runs: list[tuple[str, list[str]]] = [("python -c pass", [sys.executable, "-c", "pass"])]
    for name, words, route, flags in ROUTES:
        runs.append((f"inferactors {name}", [CLI, *words, "--state-dir", str(state_dir)]))
        runs.append((f"curl {name}", ["curl", flags, "--unix-socket", sock, f"http://x{route}"]))
    times: dict[str, list[float]] = {label: [] for label, _ in runs}
    for round_number in range(ROUNDS):
        shift = round_number % len(runs)
        for label, argv in runs[shift:] + runs[:shift]:
            times[label].append(timed_ms(argv, env))
    return times


def report(times: dict[str, list[float]]) -> None:
    def median(label: str) -> float:
        return float(statistics.median(times[label]))

    def p90(label: str) -> float:
        return float(statistics.quantiles(times[label], n=10)[-1])

    rows = [["python -c pass", f"{median('python -c pass'):.1f}", f"{p90('python -c pass'):.1f}"]]
    rows[0] += ["", "", ""]
    worst_ratio, worst_ms = 0.0, 0.0
    for name, *_ in ROUTES:
        ours, curl = f"inferactors {name}", f"curl {name}"
        ratio = median(ours) / median(curl)
        worst_ratio, worst_ms = max(worst_ratio, ratio), max(worst_ms, median(ours))
        rows.append([ours, f"{median(ours):.1f}", f"{p90(ours):.1f}", f"{ratio:.2f}x", "", ""])
        rows.append([curl, f"{median(curl):.1f}", f"{p90(curl):.1f}", "1.00x", "", ""])
        rows[-2][4] = verdict(ratio, TARGET_RATIO)
        rows[-2][5] = verdict(median(ours), TARGET_MS)
    notes = [
        f"worst median {worst_ms:.1f} ms (target <= {TARGET_MS:g} ms on an idle machine: "
        f"{verdict(worst_ms, TARGET_MS)}); worst ratio to curl {worst_ratio:.2f}x "
        f"(target <= {TARGET_RATIO:g}x: {verdict(worst_ratio, TARGET_RATIO)})",
        f"{ROUNDS} rounds, interleaved, spawn to exit; {load_note()} at the end.",
    ]
    header = ("command", "median ms", "p90 ms", "vs curl", f"<= {TARGET_RATIO:g}x", "<= 150 ms")
    print_grid("Client command latency (one adopted server)", header, rows, notes)


def main() -> None:
    print_context("bench_cli_latency")
    if shutil.which("curl") is None:
        print("SKIPPED: no curl on PATH (apt-get install curl)")
        return
    where = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    try:
        with supervisor(where) as (state_dir, env):
            report(measure(state_dir, env))
    finally:
        shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()
