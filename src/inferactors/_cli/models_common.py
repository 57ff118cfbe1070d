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
    if size < 1024:
        return f"{size} B"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"


@attrs.define(eq=False)
class HashProgress:
    """A hashing progress callback that rewrites one stderr line per large file.

    Only files over ``threshold_bytes`` (64 MiB) are shown; the line is rewritten at most every
    ``interval_s`` seconds (0.5 s) and ends with a newline when the file is done. The rate is
    MiB/s since the first chunk, measured with ``clock`` (``time.monotonic``: CLI code, no
    trio loop runs here).
    """

    stream: TextIO
    clock: Callable[[], float] = time.monotonic
    threshold_bytes: int = PROGRESS_THRESHOLD_BYTES
    interval_s: float = 0.5
    _file: Path | None = None
    _start: tuple[float, int] = (0.0, 0)
    _shown_at: float = float("-inf")

    def __call__(self, path: Path, done_bytes: int, total_bytes: int) -> None:
        """The `ProgressFn` for `ModelRegistry.add` and `ModelRegistry.verify`."""
        if total_bytes <= self.threshold_bytes:
            return
        now = self.clock()
        if path != self._file:
            self._file, self._start = path, (now, done_bytes)
        finished = done_bytes >= total_bytes
        if not finished and now - self._shown_at < self.interval_s:
            return
        self._shown_at = now
        self.stream.write(f"\r{self._line(path, done_bytes, total_bytes, now)}")
        self.stream.write("\n" if finished else "")
        self.stream.flush()

    def _line(self, path: Path, done: int, total: int, now: float) -> str:
        started, first = self._start
        elapsed = now - started
        rate = f"{(done - first) / _MIB / elapsed:.1f} MiB/s" if elapsed > 0 else "-- MiB/s"
        percent = 100 * done // total
        return f"hashing {path.name}: {percent:3d}% of {format_size(total)} ({rate})"
