"""Scanning a model to register it: which files it has, its format, and their digests.

`scan_model` hashes a ``.gguf`` file or a model directory in place (never copying it) and
describes it as a manifest; the registry's ``add`` is built on it. Every file must resolve
inside the model's root (or, for a Hugging Face repository, its ``blobs/``).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import attrs

from .._errors import InvalidConfig
from .._flavor import ModelFormat
from .._safe_json import parse_json
from .._untrusted_file import MiB, read_capped
from .hashing import FileHasher, FileStamp, ProgressFn, blake3_and_fd, safetensors_format
from .manifest import ModelFile, ModelManifest
from .manifest_io import WEIGHT_SUFFIXES, choose_format, classify_file


def allowed_bases(real_root: Path) -> tuple[Path, ...]:
    """Directories a model's files may resolve into: the (symlink-free) root, plus the Hugging
    Face cache's ``blobs/`` when the root is ``.../snapshots/<revision>``."""
    if real_root.parent.name == "snapshots":
        return (real_root, real_root.parent.parent / "blobs")
    return (real_root,)


def scan_model(
    path: Path,
    *,
    name: str,
    fmt: ModelFormat | None,
    hasher: FileHasher,
    on_progress: ProgressFn | None = None,
    include: tuple[str, ...] = (),
    second: SecondDigests | None = None,
) -> ModelManifest:
    """Hash the model at ``path`` in place and describe it as a manifest (no source).

    ``path`` is one ``.gguf`` file (root: its directory, or its target's if it is a symlink)
    or a directory: its top-level weight files are shards, its tokenizer, config and template
    files are pinned too (`classify_file`), and the format comes from `choose_format`, mlx
    when ``config.json`` has mlx-lm's ``quantization`` key or the first safetensors header
    says ``format: mlx``.

    ``include`` names more files of a directory to pin with the tokenizer files (relative
    paths, perhaps in subdirectories: those a signature signs besides the scanned ones);
    ``second``, when given, gets each file's digest in its algorithm too, from the same read.

    Raises:
        InvalidConfig: ``path`` is missing, not a ``.gguf`` file, holds no weight files, has a
            file that resolves outside it, changed while hashed, or ``fmt`` does not fit; an
            ``include`` file is missing or not a regular file.
        OSError: a file cannot be read.
    """
    if path.is_dir():
        root = Path(os.path.abspath(path))
        shards, tokenizer = _list_model_dir(root)
        tokenizer = sorted((set(tokenizer) | _included(root, include)) - set(shards))
    elif path.is_file():
        if path.suffix.lower() != ".gguf":
            raise InvalidConfig(f"path: {path} is not a .gguf file; register its directory")
        root, file_name = gguf_root(path)
        shards, tokenizer = [file_name], []
        if not file_name.lower().endswith(".gguf"):  # a link to a file of another name
            _check_gguf_magic(path)
        fmt = choose_format([path.name], explicit=fmt, says_mlx=False)  # the name given
    else:
        raise InvalidConfig(f"path: {path} is not an existing file or directory")
    if fmt is None or path.is_dir():
        fmt = choose_format(shards, explicit=fmt, says_mlx=_says_mlx(root, shards, tokenizer))
    return ModelManifest(
        name=name,
        format=fmt,
        root=str(root),
        shards=_hash_files(root, shards, hasher, on_progress, second),
        tokenizer=_hash_files(root, tokenizer, hasher, on_progress, second),
    )


def _check_gguf_magic(path: Path) -> None:
    """Refuse a ``.gguf`` link to a file of another name (an Ollama blob is one) unless that
    file starts with the GGUF magic: a link named ``model.gguf`` to ``/etc/shadow`` is not
    registered as a model. A file named ``.gguf`` itself is registered as it is, broken or
    not: a broken model fails at load in the server's own words."""
    try:
        with path.open("rb") as handle:
            magic = handle.read(4)
    except OSError as error:
        raise InvalidConfig(f"path: {path}: cannot read it: {error.strerror}") from None
    if magic != b"GGUF":
        where = f" (a link to {os.path.realpath(path)})" if path.is_symlink() else ""
        raise InvalidConfig(f"path: {path}{where} is not a GGUF file: it does not start with GGUF")


def gguf_root(path: Path) -> tuple[Path, str]:
    """The root and pinned name of a single ``.gguf`` file: its own folder and name; for a
    symbolic link, its target's (the link may move), except in a Hugging Face snapshot,
    where the link itself is pinned (its target, ``blobs/<sha256>``, has no ``.gguf``
    name) and must lead into the repository's ``blobs/``: the root is then the snapshot
    folder and the name the link's path beneath it (``Q8_0/model.gguf`` for a file in a
    subfolder, as quantisation repositories lay them out).

    Raises:
        InvalidConfig: a snapshot's link that leads elsewhere.
    """
    here = Path(os.path.abspath(path))
    if not path.is_symlink():
        return here.parent, here.name
    snapshot = snapshot_of(here.parent)
    if snapshot is not None:
        real = Path(os.path.realpath(path))
        if not any(real.is_relative_to(base) for base in allowed_bases(snapshot.resolve())):
            raise InvalidConfig(f"path: {path.name} resolves to {real}, outside {here.parent}")
        return snapshot, here.relative_to(snapshot).as_posix()
    real = Path(os.path.realpath(path))
    return real.parent, real.name


SNAPSHOT_DEPTH = 4
"""The deepest subfolder of a Hugging Face snapshot a GGUF file is looked for in."""


def snapshot_of(folder: Path) -> Path | None:
    """The Hugging Face snapshot (``.../snapshots/<revision>``) ``folder`` is, or lies in
    at most `SNAPSHOT_DEPTH` levels down; None when it is in none."""
    for candidate in (folder, *folder.parents)[: SNAPSHOT_DEPTH + 1]:
        if candidate.parent.name == "snapshots":
            return candidate
    return None


@attrs.define
class SecondDigests:
    """Each file's digest in ``algorithm`` (``sha256`` or ``blake2``), by relative path,
    filled in by `scan_model` as it hashes."""

    algorithm: str
    digests: dict[str, str] = attrs.field(factory=dict)


def _included(root: Path, include: tuple[str, ...]) -> set[str]:
    bases = allowed_bases(root.resolve())
    for rel in include:
        real = (root / rel).resolve()
        if not any(real.is_relative_to(base) for base in bases):
            raise InvalidConfig(f"path: {rel} resolves to {real}, outside {root}")
        if not real.is_file():
            raise InvalidConfig(f"path: {rel} is missing from {root} (or not a regular file)")
    return set(include)


def _list_model_dir(root: Path) -> tuple[list[str], list[str]]:
    bases = allowed_bases(root.resolve())
    shards: list[str] = []
    tokenizer: list[str] = []
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        kind = classify_file(entry.name)
        if kind is None or not entry.is_file():
            continue
        real = (root / entry.name).resolve()
        if not any(real.is_relative_to(base) for base in bases):
            raise InvalidConfig(f"path: {entry.name} resolves to {real}, outside {root}")
        (shards if kind == "shard" else tokenizer).append(entry.name)
    if not shards:
        suffixes = ", ".join(sorted(WEIGHT_SUFFIXES))
        raise InvalidConfig(f"path: no weight files ({suffixes}) in {root}")
    return shards, tokenizer


def _hash_files(
    root: Path,
    names: list[str],
    hasher: FileHasher,
    on_progress: ProgressFn | None,
    second: SecondDigests | None = None,
) -> tuple[ModelFile, ...]:
    files = []
    for rel in names:
        before = FileStamp.of((root / rel).stat())
        if second is None:
            digest = hasher.hash_file(root / rel, on_progress=on_progress)
        else:
            digest, other = _blake3_and_file(root / rel, second.algorithm, on_progress)
            second.digests[rel] = other
        if FileStamp.of((root / rel).stat()) != before:
            raise InvalidConfig(f"path: {rel} changed while it was hashed; add it once complete")
        files.append(ModelFile(path=rel, size=before.size, blake3=digest))
    return tuple(files)


def _blake3_and_file(path: Path, also: str, on_progress: ProgressFn | None) -> tuple[str, str]:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return blake3_and_fd(fd, also, path=path, on_progress=on_progress)
    finally:
        os.close(fd)


def _says_mlx(root: Path, shards: list[str], tokenizer: list[str]) -> bool:
    if "config.json" in tokenizer:
        with contextlib.suppress(OSError, ValueError):
            config = parse_json(read_capped(root / "config.json", 16 * MiB, "config.json"))
            if isinstance(config, dict) and "quantization" in config:
                return True
    first = next((s for s in shards if s.lower().endswith(".safetensors")), None)
    return first is not None and safetensors_format(root / first) == "mlx"
