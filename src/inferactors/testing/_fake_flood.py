"""The fake server's output floods (``--flood-start-bytes``, ``--flood-bytes-per-s``) and
what they cost it (``--flood-stats``).

A server that logs a great deal is a fault for its supervisor: 7 MB of load logs before it
listens, lines of hundreds of KiB, or a debug log that never stops. Each flood line is
``flood_line_bytes`` long with its newline: a counter, then ``x``s. Every write is timed:
a write that waits on a full pipe is the supervisor not reading, and ``--flood-stats FILE``
gets, about every 0.2 s and at the end of the start-up burst, a JSON object ``{"writes":
N, "written_bytes": N, "blocked": N, "max_block_s": S, "total_block_s": S}`` (``blocked``: writes
that took over `BLOCKED_S`), written atomically.

Like ``_fake_server``, this module imports nothing of the ``inferactors`` package but its
siblings.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import attrs

from ._fake_faults import FakeServerOptions

BLOCKED_S = 0.05
"""A write that took longer than this (seconds) counts as blocked by the pipe."""
_STATS_EVERY_S = 0.2
_BURST_WRITE_BYTES = 65536


@attrs.define
class FloodStats:
    """What the flood's writes cost: counts, bytes and time blocked (float seconds)."""

    writes: int = 0
    written_bytes: int = 0
    blocked: int = 0
    max_block_s: float = 0.0
    total_block_s: float = 0.0
    _lock: threading.Lock = attrs.field(factory=threading.Lock, repr=False)

    def write(self, data: bytes) -> None:
        """Write ``data`` to stderr's descriptor whole, timing it."""
        began = time.monotonic()
        view = memoryview(data)
        while view:
            view = view[os.write(2, view) :]
        took = time.monotonic() - began
        with self._lock:
            self.writes += 1
            self.written_bytes += len(data)
            self.blocked += took > BLOCKED_S
            self.max_block_s = max(self.max_block_s, took)
            self.total_block_s += took

    def save(self, path: Path | None) -> None:
        """Write the figures to ``path`` atomically (nothing when None)."""
        if path is None:
            return
        with self._lock:
            figures = attrs.asdict(self, filter=lambda field, _: not field.name.startswith("_"))
        staging = path.with_name(path.name + ".tmp")
        staging.write_text(json.dumps(figures), encoding="utf-8")
        staging.rename(path)


STATS = FloodStats()


def flood_lines(count: int, line_bytes: int, first: int = 0) -> bytes:
    """``count`` flood lines of ``line_bytes`` bytes each (newline included)."""
    lines = []
    for number in range(first, first + count):
        head = f"flood {number} "
        body = head + "x" * max(0, line_bytes - 1 - len(head))
        lines.append(body[: max(0, line_bytes - 1)] + "\n")
    return "".join(lines).encode()


def flood_at_start(options: FakeServerOptions) -> None:
    """Write ``flood_start_bytes`` of lines on stderr now (blocks while the pipe is full)."""
    faults = options.faults
    total = faults.flood_start_bytes
    if total <= 0:
        return
    per_write = max(1, _BURST_WRITE_BYTES // faults.flood_line_bytes)
    written, number = 0, 0
    try:
        while written < total:
            count = max(1, min(per_write, (total - written) // faults.flood_line_bytes))
            data = flood_lines(count, faults.flood_line_bytes, number)
            STATS.write(data)
            written, number = written + len(data), number + count
    except OSError:
        return  # nobody reads our output any more
    STATS.save(options.flood_stats)


def flood_for_ever(options: FakeServerOptions) -> None:
    """Write ``flood_bytes_per_s`` of lines a second on stderr until the process ends
    (blocks: run it in a thread of its own). Saves the stats about every 0.2 s."""
    faults = options.faults
    rate = faults.flood_bytes_per_s
    if rate <= 0:
        return
    began, sent, number, saved = time.monotonic(), 0, 0, 0.0
    per_write = max(1, _BURST_WRITE_BYTES // faults.flood_line_bytes)
    while True:
        now = time.monotonic()
        due = int((now - began) * rate) - sent
        if due < faults.flood_line_bytes:
            time.sleep(min(0.01, (faults.flood_line_bytes - due) / rate))
            continue
        count = max(1, min(per_write, due // faults.flood_line_bytes))
        try:
            STATS.write(flood_lines(count, faults.flood_line_bytes, number))
        except OSError:
            return
        sent, number = sent + count * faults.flood_line_bytes, number + count
        if now - saved >= _STATS_EVERY_S:
            STATS.save(options.flood_stats)
            saved = now


def start_flood(options: FakeServerOptions) -> None:
    """Start `flood_for_ever` in a daemon thread when a sustained flood is asked for."""
    if options.faults.flood_bytes_per_s > 0:
        threading.Thread(target=flood_for_ever, args=(options,), daemon=True).start()
