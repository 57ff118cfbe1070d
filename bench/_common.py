"""What the benchmarks share: an unprivileged workspace, fake-server programs, statistics,
event waits, a loopback HTTP GET and the result table.

Not a benchmark itself (running it does nothing); the ``bench_*.py`` scripts import it.

As root, inferactors refuses to run a managed server without ``run_as`` (issue 3, item 6),
so the benchmarks do what ``tests/conftest.py`` does: servers run as ``nobody``, from a
world-readable workspace under /tmp, with an interpreter ``nobody`` can execute. Every
exposure connect stays on loopback: ``INFERACTORS_LAN_ADDRESSES`` is set to 127.0.0.2 for
this process (and so for every server it starts) before anything scans.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import attrs
import trio

from inferactors import (
    Event,
    InferConfig,
    InferenceSpec,
    InferFlavor,
    ManagedConfig,
    ModelRegistry,
    RestartPolicy,
    ServeArgs,
)
from inferactors._edges.containment import SEARCH, access_problem, resolve_run_as
from inferactors.testing import FakeServerFaults, write_fake_server_program, write_tiny_gguf

os.environ["INFERACTORS_LAN_ADDRESSES"] = "127.0.0.2"

UNPRIVILEGED_USER = "nobody"
NO_RESTARTS = RestartPolicy(max_restarts=0)
"""Every benchmark instance: a crash or a kill is measured, never followed by a restart."""

E = TypeVar("E")


# --- the workspace -------------------------------------------------------------------------


@attrs.frozen
class Workspace:
    """Where managed fake servers run in one benchmark, and as whom.

    Attributes:
        root: a world-readable (0755) directory under /tmp, removed at the end.
        run_as: ``nobody`` when the benchmark runs as root, else None.
        python: an interpreter ``run_as`` can execute.
        sys_path: what that interpreter needs on ``sys.path`` (site-packages, our source).
        registry: a registry file holding the tiny model as ``tiny``.
    """

    root: Path
    run_as: str | None
    python: str
    sys_path: tuple[str, ...]
    registry: Path

    def directory(self, name: str) -> Path:
        """A fresh world-readable directory under the workspace."""
        path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.root))
        path.chmod(0o755)
        return path

    def program(
        self,
        faults: FakeServerFaults,
        *,
        request_log: Path | None = None,
        pid_file: Path | None = None,
    ) -> Path:
        """A fake llama-server program (an ``sh`` script) with ``faults``; relative paths
        resolve against the server's working directory, its instance directory."""
        return write_fake_server_program(
            self.directory("bin") / "fake-llama-server",
            faults=faults,
            python=self.python,
            sys_path=self.sys_path,
            request_log=request_log,
            pid_file=pid_file,
        )

    def config(self, program: Path) -> InferConfig:
        """A managed llama.cpp config running ``program``, never restarting."""
        managed = ManagedConfig(
            registry=self.registry,
            data_root=self.directory("state"),
            serve_program=program,
            run_as=self.run_as,
            restart=NO_RESTARTS,
        )
        return InferConfig.managing(InferFlavor.LLAMACPP, managed)


@contextmanager
def workspace() -> Iterator[Workspace]:
    """A `Workspace`, removed afterwards (servers must be stopped by then)."""
    run_as = UNPRIVILEGED_USER if os.geteuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="inferactors-bench-", dir="/tmp"))
    root.chmod(0o755)
    try:
        models = root / "models"
        models.mkdir(mode=0o755)
        registry = root / "models.json"
        ModelRegistry.open(registry).add(write_tiny_gguf(models / "tiny.gguf"), name="tiny")
        yield Workspace(root, run_as, _server_python(run_as), _sys_path(), registry)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _sys_path() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    source = str(Path(__file__).resolve().parent.parent / "src")
    return tuple(dict.fromkeys((paths["purelib"], paths["platlib"], source)))


def _server_python(run_as: str | None) -> str:
    if run_as is None:
        return sys.executable
    user = resolve_run_as(run_as)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, f"/usr/bin/{version}", shutil.which(version) or ""):
        usable = candidate and Path(candidate).exists()
        if usable and access_problem(user, Path(candidate), SEARCH) is None:
            return candidate
    raise SystemExit(f"no {version} that {run_as} can execute (apt-get install python3)")


def chat_spec(port: int) -> InferenceSpec:
    """The benchmarks' instance: role ``chat``, the tiny model, on 127.0.0.1:``port``."""
    return InferenceSpec(
        role="chat", runtime=InferFlavor.LLAMACPP, model="tiny", serve=ServeArgs(port=port)
    )


def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


# --- waiting for events -----------------------------------------------------------------------


async def next_event(
    events: trio.MemoryReceiveChannel[Event],
    kind: type[E],
    where: Callable[[E], bool] = lambda _: True,
    *,
    timeout_s: float = 30.0,
) -> tuple[E, float]:
    """The next event of ``kind`` that satisfies ``where``, and the trio time it arrived.

    Raises:
        TimeoutError: none within ``timeout_s`` seconds (trio.TooSlowError).
    """
    with trio.fail_after(timeout_s):
        async for event in events:
            if isinstance(event, kind) and where(event):
                return event, trio.current_time()
    raise RuntimeError("the event stream ended")


# --- loopback HTTP ----------------------------------------------------------------------------


@attrs.frozen
class Exchange:
    """One GET: its status (None: no connection), and when it was sent and answered (trio s)."""

    status: int | None
    sent_at: float
    answered_at: float


async def get(port: int, path: str, *, timeout_s: float = 2.0) -> Exchange:
    """``GET path`` on 127.0.0.1:``port`` with ``Connection: close``; never raises for the
    server's sake (refused, reset or slow: status None)."""
    sent_at = trio.current_time()
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()
    with trio.move_on_after(timeout_s):
        try:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await stream.send_all(request)
                head = await _read_all(stream)
            return Exchange(_status_of(head), sent_at, trio.current_time())
        except OSError:
            pass  # not listening (yet, or any more)
    return Exchange(None, sent_at, trio.current_time())


async def _read_all(stream: trio.SocketStream) -> bytes:
    data = b""
    while chunk := await stream.receive_some(65536):
        data += chunk
    return data


def _status_of(response: bytes) -> int | None:
    parts = response.split(b" ", 2)
    return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else None


# --- statistics and the table -----------------------------------------------------------------


@attrs.frozen
class Summary:
    """Median and spread of samples (seconds)."""

    n: int
    median: float
    p10: float
    p90: float
    low: float
    high: float

    @classmethod
    def of(cls, samples: Sequence[float]) -> Summary:
        """Summarise at least two samples. Raises ValueError for fewer."""
        if len(samples) < 2:
            raise ValueError(f"need at least two samples, got {len(samples)}")
        deciles = statistics.quantiles(samples, n=10, method="inclusive")
        median = statistics.median(samples)
        return cls(len(samples), median, deciles[0], deciles[-1], min(samples), max(samples))


@attrs.frozen
class Row:
    """One line of a table: a figure (or a part, or a baseline), its samples' summary, an
    optional target (the median must be under it) and an optional baseline to compare with.

    ``key`` names the row for other rows' ``baseline``; baselines are usually keyed B1, B2.
    """

    label: str
    summary: Summary
    target_s: float | None = None
    baseline: str | None = None
    key: str = ""


@attrs.frozen
class Unit:
    """How to print seconds: ``name`` and the factor from seconds (ms: 1e3, µs: 1e6)."""

    name: str
    per_s: float

    def show(self, seconds: float) -> str:
        value = seconds * self.per_s
        return f"{value:.0f}" if abs(value) >= 100 else f"{value:.1f}"


MS = Unit("ms", 1e3)
US = Unit("µs", 1e6)


def print_table(title: str, rows: Sequence[Row], unit: Unit, notes: Sequence[str] = ()) -> None:
    """Print ``rows`` under ``title``: n, median, p10-p90, min-max, target, verdict, ratio."""
    keyed = {row.key: row for row in rows if row.key}
    header = ("figure", "n", f"median {unit.name}", "p10-p90", "min-max", "target", "", "vs")
    lines = [header, *(_cells(row, unit, keyed) for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    print(f"\n{title}")
    for number, line in enumerate(lines):
        print("  " + "  ".join(_align(cell, width, i) for i, (cell, width) in _cols(line, widths)))
        if number == 0:
            print("  " + "  ".join("-" * width for width in widths))
    for note in notes:
        print(f"  {note}")


def _cols(line: Sequence[str], widths: Sequence[int]) -> Iterator[tuple[int, tuple[str, int]]]:
    return enumerate(zip(line, widths, strict=True))


def _align(cell: str, width: int, column: int) -> str:
    return cell.ljust(width) if column in (0, 6, 7) else cell.rjust(width)


def _cells(row: Row, unit: Unit, keyed: dict[str, Row]) -> tuple[str, ...]:
    s = row.summary
    label = f"[{row.key}] {row.label}" if row.key else row.label
    target = verdict = ""
    if row.target_s is not None:
        target = f"< {unit.show(row.target_s)}"
        verdict = "ok" if s.median < row.target_s else "MISSED"
    ratio = ""
    base = keyed.get(row.baseline) if row.baseline else None
    if base is not None and base.summary.median > 0:
        ratio = f"{s.median / base.summary.median:.2f}x {base.key}"
    spread = f"{unit.show(s.p10)}-{unit.show(s.p90)}"
    extremes = f"{unit.show(s.low)}-{unit.show(s.high)}"
    return (label, str(s.n), unit.show(s.median), spread, extremes, target, verdict, ratio)


def print_context(name: str, seed: int | None = None) -> None:
    """Print what ran where: the benchmark, the machine's cores, Python, trio, the seed."""
    seeded = "" if seed is None else f", seed {seed}"
    cores = os.cpu_count()
    python = sys.version.split()[0]
    print(f"{name}: {cores} cores, Python {python}, trio {trio.__version__}{seeded}")


# --- options, grids and verdicts (issue 11) ---------------------------------------------------


def quick() -> bool:
    """Whether to run the quick version (a smoke run): ``--quick`` on the command line or
    ``BENCH_QUICK=1`` in the environment."""
    return "--quick" in sys.argv[1:] or os.environ.get("BENCH_QUICK", "") not in ("", "0")


def env_float(name: str, default: float, quick_default: float | None = None) -> float:
    """``$name`` as a float, else ``quick_default`` in a `quick` run, else ``default``."""
    if name in os.environ:
        return float(os.environ[name])
    return quick_default if quick_default is not None and quick() else default


def env_ints(name: str, default: Sequence[int], quick_default: Sequence[int]) -> list[int]:
    """``$name`` as comma-separated integers, else the (quick) default."""
    if name in os.environ:
        return [int(part) for part in os.environ[name].split(",") if part.strip()]
    return list(quick_default if quick() else default)


def verdict(value: float | None, limit: float, *, at_least: bool = False) -> str:
    """``ok`` when ``value`` meets ``limit`` (at most it, or at least it), else ``MISSED``;
    ``MISSED`` when there is no value."""
    if value is None:
        return "MISSED"
    return "ok" if (value >= limit if at_least else value <= limit) else "MISSED"


def print_grid(
    title: str, header: Sequence[str], rows: Sequence[Sequence[str]], notes: Sequence[str] = ()
) -> None:
    """Print ``rows`` of cells under ``header`` (first column left-aligned), then ``notes``."""
    lines = [tuple(header), *(tuple(row) for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    print(f"\n{title}")
    for number, line in enumerate(lines):
        cells = (c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in _cols(line, widths))
        print("  " + "  ".join(cells))
        if number == 0:
            print("  " + "  ".join("-" * width for width in widths))
    for note in notes:
        print(f"  {note}")


def summary(script: str, **figures: object) -> None:
    """Append ``figures`` as one JSON line ``{"script": ..., ...}`` to the file named by
    ``$BENCH_SUMMARY``, when set (``bench_cost.py`` sets it and reads them back)."""
    path = os.environ.get("BENCH_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8") as sink:
            sink.write(json.dumps({"script": script, **figures}) + "\n")


def load_note() -> str:
    """The machine's load averages, for the notes on what limited a figure."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


if __name__ == "__main__":
    print("bench/_common.py holds shared helpers; run the bench_*.py scripts.")
