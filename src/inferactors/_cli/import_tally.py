"""How an import registers each model it found and says so: one numbered line per model
(registered, already registered, or skipped with why) and a summary line.

A model already registered under the same name with the same root and shards (path and size,
from ``stat`` alone: nothing is hashed again) is ``already registered``, so an import can
be run again; a name another model holds is skipped.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs

from .._errors import InvalidConfig, one_line
from .._models.manifest import ModelManifest
from .._models.manifest_io import classify_file
from .._models.registry import ModelRegistry
from .._models.scan import gguf_root
from .models_common import format_size

_KINDS = ("registered", "already registered", "updated", "skipped")


@attrs.define
class Tally:
    """Counts and prints one import: a line per model, then a summary."""

    total: int
    done: int = 0
    counts: dict[str, int] = attrs.field(factory=lambda: dict.fromkeys(_KINDS, 0))

    def say(self, what: str, kind: str, detail: str = "") -> None:
        self.done += 1
        self.counts[kind] += 1
        line = f"[{self.done}/{self.total}] {what}: {kind}{': ' + detail if detail else ''}"
        print(one_line(line))  # names from a store may hold terminal escapes

    def summary(self) -> str:
        parts = [f"{self.counts[k]} {k}" for k in _KINDS if k != "updated" or self.counts[k]]
        return ", ".join(parts) + " (nothing downloaded)"


def import_one(
    registry: ModelRegistry,
    tally: Tally,
    name: str,
    files: tuple[str, dict[str, int]] | None,
    add: Callable[[ModelRegistry], ModelManifest],
) -> None:
    """Register one found model unless the same is registered already, saying which."""
    current = next((m for m in registry.list() if m.name == name), None)
    if current is not None:
        if files is not None and _same(current, *files):
            tally.say(name, "already registered")
        else:
            why = f"the name is taken by another model (root {current.root}); remove it first"
            tally.say(name, "skipped", why)
        return
    try:
        manifest = add(registry)
    except (InvalidConfig, OSError) as error:
        why = str(error) if isinstance(error, InvalidConfig) else f"cannot read: {error}"
        tally.say(name, "skipped", why)
        return
    tally.say(name, "registered", summary(manifest))


def summary(manifest: ModelManifest) -> str:
    """``gguf, 1 file, 510.1 KiB`` (and who signed it, when it is signed)."""
    files = manifest.shards + manifest.tokenizer
    text = f"{manifest.format.value}, {len(files)} file{'s' if len(files) != 1 else ''}, "
    text += format_size(sum(f.size for f in files))
    if manifest.signature is not None:
        text += f", signed by {manifest.signature.anchor}"
    return text


def _same(manifest: ModelManifest, root: str, files: dict[str, int]) -> bool:
    pinned = {f.path: f.size for f in manifest.shards}
    return manifest.root == root and pinned == files


def expected_files(path: Path) -> tuple[str, dict[str, int]] | None:
    """The root and shards (path and size) `ModelRegistry.add` would pin for ``path``,
    from ``stat`` alone, to tell a model registered already; None when unreadable."""
    try:
        if path.is_dir():
            shards = _top_level_shards(path)
            return os.path.abspath(path), {name: (path / name).stat().st_size for name in shards}
        root, name = gguf_root(path)
        return str(root), {name: (root / name).stat().st_size}
    except InvalidConfig:
        return None
    except OSError:
        return None


def _top_level_shards(folder: Path) -> Iterator[str]:
    for entry in sorted(os.listdir(folder)):
        if classify_file(entry) == "shard" and (folder / entry).is_file():
            yield entry
