"""The ``inferactors models`` commands: add, add-ollama, list, verify, remove.

Each command reads the registry file named by ``--registry`` (default: `default_registry_path`)
and is a plain function ``handler(args) -> exit code`` set with ``set_defaults(func=...)``.
Errors print ``inferactors: error: <message>`` on stderr and exit 2 for bad input (a malformed
name, path, registry file or unknown model) or 1 for anything else (a tampered model, an I/O
failure). Hashing a file over 64 MiB shows its progress on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

import attrs

from .._errors import InferactorsError, InvalidConfig, UnknownModel, one_line
from .._flavor import ModelFormat
from .._models.manifest import ModelManifest, ModelSource
from .._models.registry import ModelRegistry

REGISTRY_ENV = "INFERACTORS_REGISTRY"
"""Environment variable naming the registry file."""

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


def register_models_commands(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """Add ``models`` and its subcommands to a CLI's subparsers.

    Every leaf sets ``func`` to its handler: ``args.func(args)`` runs it and returns the exit
    code.
    """
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--registry",
        type=Path,
        default=None,
        metavar="PATH",
        help=f"registry file (default: ${REGISTRY_ENV} or ~/.local/share/inferactors/models.json)",
    )
    models = subparsers.add_parser("models", help="register and check local models")
    commands = models.add_subparsers(dest="models_command", metavar="COMMAND", required=True)
    _add_add(commands, common)
    _add_add_ollama(commands, common)
    listing = commands.add_parser("list", parents=[common], help="list registered models")
    listing.set_defaults(func=handle_list)
    verify = commands.add_parser("verify", parents=[common], help="re-hash models in full")
    verify.add_argument("name", nargs="?", default=None, help="one model (default: all)")
    verify.set_defaults(func=handle_verify)
    remove = commands.add_parser("remove", parents=[common], help="forget a model (keeps files)")
    remove.add_argument("name")
    remove.set_defaults(func=handle_remove)


def _add_add(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    add = commands.add_parser(
        "add", parents=[common], help="register a .gguf file or a model directory (no copy)"
    )
    add.add_argument("path", type=Path, help="a .gguf file or a model directory")
    add.add_argument("--name", required=True, help="the model's registry name")
    add.add_argument("--hf-repo", default=None, help="Hugging Face repository it came from")
    add.add_argument("--hf-revision", default=None, help="Hugging Face revision it came from")
    formats = [f.value for f in ModelFormat if f is not ModelFormat.OLLAMA]
    add.add_argument("--format", choices=formats, default=None, help="override detection")
    add.set_defaults(func=handle_add)


def _add_add_ollama(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    add = commands.add_parser("add-ollama", parents=[common], help="register an Ollama tag")
    add.add_argument("--name", required=True, help="the model's registry name")
    add.add_argument("--tag", required=True, help="the tag Ollama knows it by, e.g. qwen3:0.6b")
    add.set_defaults(func=handle_add_ollama)


def handle_add(args: argparse.Namespace) -> int:
    """``models add PATH --name NAME [--hf-repo R] [--hf-revision V] [--format F]``."""

    def run(registry: ModelRegistry) -> int:
        source = ModelSource(hf_repo=args.hf_repo, hf_revision=args.hf_revision)
        fmt = ModelFormat(args.format) if args.format else None
        progress = HashProgress(stream=sys.stderr)
        manifest = registry.add(
            args.path, name=args.name, source=source, format=fmt, on_progress=progress
        )
        print(f"registered {manifest.name}: {_summary(manifest)}")
        return 0

    return _with_registry(args, run)


def handle_add_ollama(args: argparse.Namespace) -> int:
    """``models add-ollama --name NAME --tag TAG``."""

    def run(registry: ModelRegistry) -> int:
        manifest = registry.add_ollama(args.name, args.tag)
        print(f"registered {manifest.name}: ollama tag {manifest.source.ollama_tag}")
        return 0

    return _with_registry(args, run)


def handle_list(args: argparse.Namespace) -> int:
    """``models list``: a table of name, format, files, total size and root."""

    def run(registry: ModelRegistry) -> int:
        manifests = registry.list()
        if not manifests:
            print(f"no models registered in {registry.path}")
            return 0
        print(format_table(manifests))
        return 0

    return _with_registry(args, run)


def handle_verify(args: argparse.Namespace) -> int:
    """``models verify [NAME]``: full re-hash; exit 1 when any model fails."""

    def run(registry: ModelRegistry) -> int:
        checks = registry.verify(args.name, on_progress=HashProgress(stream=sys.stderr))
        if not checks:
            print(f"no models registered in {registry.path}")
        for check in checks:
            print(f"{'ok' if check.ok else 'FAILED':<7} {check.name}: {check.reason}")
        return 0 if all(check.ok for check in checks) else 1

    return _with_registry(args, run)


def handle_remove(args: argparse.Namespace) -> int:
    """``models remove NAME``: forget the model; its files stay where they are."""

    def run(registry: ModelRegistry) -> int:
        manifest = registry.remove(args.name)
        print(f"removed {manifest.name} (its files are untouched)")
        return 0

    return _with_registry(args, run)


def _with_registry(args: argparse.Namespace, run: Callable[[ModelRegistry], int]) -> int:
    path = (args.registry or default_registry_path()).expanduser()
    try:
        return run(ModelRegistry.open(path))
    except (InvalidConfig, UnknownModel) as error:
        return _fail(error, 2)
    except InferactorsError as error:
        return _fail(error, 1)


def _fail(error: Exception, code: int) -> int:
    print(one_line(f"inferactors: error: {error}"), file=sys.stderr)
    return code


def format_table(manifests: Sequence[ModelManifest]) -> str:
    """A left-aligned table: NAME, FORMAT, FILES, SIZE (binary units) and ROOT."""
    rows = [("NAME", "FORMAT", "FILES", "SIZE", "ROOT")]
    for m in manifests:
        files = m.shards + m.tokenizer
        root = m.root or f"(ollama tag {m.source.ollama_tag})"
        size = format_size(sum(f.size for f in files)) if files else "-"
        rows.append((m.name, m.format.value, str(len(files)), size, root))
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:4], widths, strict=True)]
        lines.append("  ".join([*cells, row[4]]))
    return "\n".join(lines)


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


def _summary(manifest: ModelManifest) -> str:
    files = manifest.shards + manifest.tokenizer
    count = f"{len(files)} file{'s' if len(files) != 1 else ''}"
    size = format_size(sum(f.size for f in files))
    return f"{manifest.format.value}, {count}, {size}, root {manifest.root}"


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
