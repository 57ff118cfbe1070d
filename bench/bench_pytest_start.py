"""pytest's start with inferactors' plugin next to without it (issue 19, item 7).

A project that installed the kit gets the plugin in every pytest session (the ``pytest11``
entry point). In a temporary folder holding one test that uses no fixture, each of these is
run as a new process and timed from spawn to exit, interleaved in each round (the order
rotated every round):

* ``with the plugin``: ``pytest -q one_test.py``, as installed;
* ``without it``: the same with ``-p no:inferactors``;
* ``bare pytest``: ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`` (no plugin of any package).

Columns: the median and the 90th percentile over the rounds in milliseconds, and the
median's ratio to ``without it`` (target: at most 1.1, the plugin's own cost near nothing).
The interpreter is this one, or ``BENCH_PYTHON`` (a venv holding only ``[testing]`` shows
what a downstream project sees).

Settings (environment): ``BENCH_ROUNDS`` (15; ``--quick``: 3), ``BENCH_PYTHON``.

Run: ``.venv/bin/python bench/bench_pytest_start.py`` (about 30 s).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from _common import env_float, load_note, print_context, print_grid, verdict

ROUNDS = int(env_float("BENCH_ROUNDS", 15, 3))
TARGET_RATIO = 1.1
PYTHON = os.environ.get("BENCH_PYTHON", sys.executable)
TEST = "def test_one():\n    assert 1 + 1 == 2\n"

KINDS: dict[str, tuple[list[str], dict[str, str]]] = {
    "with the plugin": ([], {}),
    "without it (-p no:inferactors)": (["-p", "no:inferactors"], {}),
    "bare pytest (no autoload)": ([], {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}),
}


def timed_ms(argv: Sequence[str], env: dict[str, str], where: Path) -> float:
    """Milliseconds from spawning ``argv`` to its exit (it must pass its one test)."""
    began = time.perf_counter()
    done = subprocess.run(argv, cwd=where, env=env, capture_output=True, text=True, check=False)
    spent = (time.perf_counter() - began) * 1000.0
    if done.returncode != 0 or "1 passed" not in done.stdout:
        raise SystemExit(f"{argv} failed:\n{done.stdout}{done.stderr}")
    return spent


def main() -> None:
    print_context("bench_pytest_start")
    print(f"python: {PYTHON}; {ROUNDS} rounds")
    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    with tempfile.TemporaryDirectory(prefix="bench-pytest-start-") as scratch:
        where = Path(scratch)
        (where / "one_test.py").write_text(TEST)
        base = [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "one_test.py"]
        kinds = list(KINDS)
        for round_ in range(ROUNDS):
            shift = round_ % len(kinds)
            for kind in kinds[shift:] + kinds[:shift]:
                extra, env = KINDS[kind]
                times[kind].append(timed_ms(base + extra, {**os.environ, **env}, where))
    without = statistics.median(times["without it (-p no:inferactors)"])
    rows = []
    for kind, spent in times.items():
        median = statistics.median(spent)
        p90 = statistics.quantiles(spent, n=10)[-1] if len(spent) > 1 else median
        ratio = median / without
        mark = verdict(ratio, TARGET_RATIO) if kind == "with the plugin" else ""
        rows.append([kind, f"{median:.0f}", f"{p90:.0f}", f"{ratio:.2f}", mark])
    print_grid(
        "pytest start, one test without fixtures (ms)",
        ["session", "median", "p90", "x without", f"<= {TARGET_RATIO}"],
        rows,
        [load_note()],
    )


if __name__ == "__main__":
    main()
