"""What the ``inferactors models`` commands share: the registry and trust options, opening
the registry they name, the error exit, sizes in binary units and the hashing progress line.

Errors print ``inferactors: error: <message>`` on stderr and exit 2 for bad input (a
malformed name, path, signature, anchor, registry file or unknown model) or 1 for anything
else (a tampered model, an I/O failure, a missing extra).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import attrs

from .._config.convert import load_run_config
from .._errors import InferactorsError, InvalidConfig, UnknownModel, one_line
from .._models.anchors import AnchorKind, TrustAnchors
from .._models.registry import ModelRegistry
from .._policy.progress_pace import SHOWN_EVERY_S, ProgressPace, Reading
from .._policy.sizes import binary_size_text

REGISTRY_ENV = "INFERACTORS_REGISTRY"
"""Environment variable naming the registry file."""

INTERRUPTED = 130
"""The exit status after Ctrl-C (128 + SIGINT), as a shell reports it."""

PROGRESS_THRESHOLD_BYTES = 64 << 20
"""Files larger than this (64 MiB) get a progress line while they are hashed."""

_MIB = float(1 << 20)


def default_registry_path() -> Path:
    """``$INFERACTORS_REGISTRY`` if set and not empty, else
    ``~/.local/share/inferactors/models.json``."""
    configured = os.environ.get(REGISTRY_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".local" / "share" / "inferactors" / "models.json"


def common_options() -> argparse.ArgumentParser:
    """The options every registry command takes: ``--registry``, ``--config``,
    ``--trust-key`` and ``--trust-root``."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--registry",
        type=Path,
        default=None,
        metavar="PATH",
        help=f"registry file (default: ${REGISTRY_ENV} or ~/.local/share/inferactors/models.json)",
    )
    common.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="RUN_FILE",
        help="take the registry and the trust anchors from this run file's [managed] section",
    )
    common.add_argument(
        "--trust-key",
        type=Path,
        action="append",
        default=[],
        metavar="PEM",
        help="a trusted public key (EC P-256/384/521), named after its file's stem; repeatable",
    )
    common.add_argument(
        "--trust-root",
        type=Path,
        action="append",
        default=[],
        metavar="PEM",
        help="trusted root certificates, named after the file's stem; repeatable",
    )
    return common


def with_registry(args: argparse.Namespace, run: Callable[[ModelRegistry], int]) -> int:
    """``run`` on the registry the options name: its exit status, or 2 for bad input, 1
    for another error, `INTERRUPTED` for Ctrl-C (one line each, no traceback)."""
    try:
        return run(open_registry(args))
    except (InvalidConfig, UnknownModel) as error:
        return fail(error, 2)
    except InferactorsError as error:
        return fail(error, 1)
    except KeyboardInterrupt:
        return interrupted()


def interrupted() -> int:
    """Say that Ctrl-C stopped the command and return `INTERRUPTED`. Every registry save is
    whole (a new file renamed over the old), so the registry holds what it held before,
    plus each model an import had finished before the interrupt."""
    print(
        "\ninferactors: interrupted: nothing half-saved (the registry holds what was saved "
        "before Ctrl-C)",
        file=sys.stderr,
    )
    return INTERRUPTED


def open_registry(args: argparse.Namespace) -> ModelRegistry:
    """The registry the common options name, verifying against their trust anchors.

    Raises:
        InvalidConfig: a bad run file, anchor file or registry file.
        Unsupported: trust anchors without the ``signing`` extra.
    """
    registry, entries = args.registry, []
    if args.config is not None:
        config = load_run_config(args.config)
        if config.managed is not None:
            registry = registry or config.managed.registry
            for anchor in config.managed.trust_anchors:
                entries.append((anchor.name, AnchorKind(anchor.kind), anchor.path))
    entries += [(p.stem, AnchorKind.PUBLIC_KEY, p) for p in args.trust_key]
    entries += [(p.stem, AnchorKind.CERTIFICATE, p) for p in args.trust_root]
    anchors = TrustAnchors.read(entries) if entries else TrustAnchors()
    path = (registry or default_registry_path()).expanduser()
    return ModelRegistry.open(path, anchors=anchors)


def fail(error: Exception, code: int) -> int:
    """Print ``inferactors: error: <error>`` on one stderr line and return ``code``."""
    print(one_line(f"inferactors: error: {error}"), file=sys.stderr)
    return code


def format_size(size: int) -> str:
    """Bytes in binary units with one decimal: ``"512 B"``, ``"510.1 KiB"``, ``"4.2 GiB"``."""
    return binary_size_text(size)


@attrs.define(eq=False)
class HashProgress:
    """A hashing progress callback that shows each large file's progress on ``stream``.

    Only files over ``threshold_bytes`` (64 MiB) are shown, and only once their hashing
    took longer than the pace's interval (`ProgressPace`: at most one line per second, and
    the last one when done): ``hashing big.gguf:  45% 2.7 GiB of 6.0 GiB, 512.0 MiB/s, 7 s
    left``. On a terminal the line is rewritten in place (``\\r``) and ended when the file
    is done; anywhere else (a pipe, a journal) each is a line of its own, at most every
    ``pipe_interval_s`` (2 s). Times come from ``clock`` (``time.monotonic``: CLI code, no
    trio loop runs here).
    """

    stream: TextIO
    clock: Callable[[], float] = attrs.field(factory=lambda: time.monotonic)
    threshold_bytes: int = PROGRESS_THRESHOLD_BYTES
    interval_s: float = SHOWN_EVERY_S
    pipe_interval_s: float = 2.0
    _file: Path | None = None
    _pace: ProgressPace = attrs.field(factory=ProgressPace)
    _width: int = 0
    _tty: bool = False

    def __call__(self, path: Path, done_bytes: int, total_bytes: int) -> None:
        """The `ProgressFn` for `ModelRegistry.add` and `ModelRegistry.verify`."""
        if total_bytes <= self.threshold_bytes:
            return
        if path != self._file:
            self._file, self._width, self._tty = path, 0, self.stream.isatty()
            self._pace = ProgressPace(self.interval_s if self._tty else self.pipe_interval_s)
        reading = self._pace.offer(self.clock(), done_bytes, total_bytes)
        if reading is None:
            return
        tty = self._tty
        line = hashing_line(path.name, reading)
        if tty:
            self.stream.write("\r" + line.ljust(self._width))
            self._width = len(line)
            self.stream.write("\n" if reading.finished else "")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def hashing_line(name: str, reading: Reading) -> str:
    """``hashing big.gguf:  45% 2.7 GiB of 6.0 GiB, 512.0 MiB/s, 7 s left`` (``done in
    12 s`` once finished; no rate nor time left before any time passed)."""
    percent = 100 * reading.done // reading.total if reading.total else 0
    line = f"hashing {name}: {percent:3d}% {format_size(reading.done)} of "
    line += format_size(reading.total)
    if reading.finished:
        return line + f", done in {reading.elapsed_s:.0f} s"
    if reading.rate > 0:
        line += f", {reading.rate / _MIB:.1f} MiB/s"
    if reading.eta_s is not None:
        line += f", {reading.eta_s:.0f} s left"
    return line
