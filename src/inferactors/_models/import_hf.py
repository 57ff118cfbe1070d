"""Finding the models in a Hugging Face cache folder (never downloading anything).

The Hub's local cache (``~/.cache/huggingface/hub``, ``$HF_HUB_CACHE``; layout documented
by Hugging Face as "Hub Local Cache" and written by ``huggingface_hub``) holds one folder
per repository::

    models--<org>--<repo>/
        refs/main                     the commit hash the ``main`` ref points to
        blobs/<hash>                  each file's content (``.incomplete`` while downloading)
        snapshots/<commit>/<path>     a symbolic link per file, into ../../blobs/

`find_hf_models` reads each model repository's snapshot that ``refs/main`` names; a
repository without a readable ``refs/main`` (a cache copied without its refs, a download
by revision) gets its newest snapshot (by modification time), and the import says so; every
other snapshot is skipped with why. It yields what to register: each GGUF file of the
snapshot, in a subfolder too (``Q8_0/model.gguf``, as quantisation repositories lay them
out), as its own model, or the snapshot folder as one model when it holds safetensors
weights and a ``config.json`` (an mlx folder with its shards). A split GGUF, a dangling link
(an unfinished download), weights in a format no server here loads (``.bin``, ``.pt``,
``.onnx``, safetensors without a ``config.json``), a repository that is not a model, and
a snapshot with nothing to serve are skipped with why. Registration itself hashes in place
(``scan.py``), where every link must stay inside the snapshot or the repository's
``blobs/`` (``hashing.allowed_bases``).

Registry names carry the organisation, as Ollama's carry the namespace (two repositories
of one name from two organisations never share a name): ``<org>.<repo>`` for a folder and
``<org>.<repo>:<file stem>`` for a GGUF file (``<org>.<repo>:<subfolder>.<file stem>`` in a
subfolder). A GGUF file's detached signature beside it (``<file>.sig``, else a
``model.sig`` in its folder) is checked like ``models add --signature``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import attrs

from .._errors import InvalidConfig, cut
from .._untrusted_file import read_capped
from .import_ollama import Skipped
from .manifest import ModelSource
from .manifest_io import check_model_name
from .scan import SNAPSHOT_DEPTH
from .signed_add import SIGNATURE_NAME

_REVISION = re.compile(r"[0-9a-f]{40}")
_REF = re.compile(r"[A-Za-z0-9._-]{1,128}")
_SPLIT = re.compile(r"(.*)-(\d{5})-of-(\d{5})\.gguf", re.I)
MAX_REPOS = 10_000
"""The most repository folders one import reads."""


@attrs.frozen
class HfModel:
    """A model in the cache to register: its registry ``name``, the ``path`` to scan (a
    GGUF file or the snapshot folder), where it came from, and the detached signature in
    the snapshot, if any."""

    name: str
    path: Path
    source: ModelSource
    signature: Path | None = None
    note: str | None = None
    """What the import chose for the user, said beside the model's line (a snapshot taken
    though no ``refs/main`` names it)."""


def find_hf_models(cache: Path) -> Iterator[HfModel | Skipped]:
    """Every model repository of the cache folder ``cache``, as models or skips.

    Raises:
        InvalidConfig: ``cache`` is not a folder.
    """
    if not cache.is_dir():
        raise InvalidConfig(f"{cache}: not a Hugging Face cache folder (~/.cache/huggingface/hub)")
    for count, entry in enumerate(sorted(cache.iterdir())):
        if count >= MAX_REPOS:
            yield Skipped(str(cache), f"more than {MAX_REPOS} entries: stopped there")
            return
        if entry.name.startswith((".", "datasets--", "spaces--")):
            continue  # the cache's locks, and repositories that hold no model
        if not entry.name.startswith("models--") or entry.is_symlink() or not entry.is_dir():
            yield Skipped(cut(entry.name, 120), "not a model repository folder (models--ORG--REPO)")
            continue
        yield from _repository(entry)


def _repository(folder: Path) -> Iterator[HfModel | Skipped]:
    repo_id = folder.name.removeprefix("models--").replace("--", "/", 1)
    snapshots = folder / "snapshots"
    main = _refs(folder).get("main")
    present = [p for p in _listed(snapshots) if _REVISION.fullmatch(p.name)]
    if main is None and not present:
        yield Skipped(repo_id, "no snapshot (nothing downloaded yet)")
        return
    chosen, note = (main, None) if main is not None else _newest(folder, present)
    for other in sorted(p.name for p in present if p.name != chosen):
        why = f"refs/main names {chosen[:8]}" if main else f"older than {chosen[:8]}, imported"
        yield Skipped(f"{repo_id}@{other[:8]}", f"not imported: {why}")
    snapshot = snapshots / chosen
    if snapshot.is_symlink() or not snapshot.is_dir():
        yield Skipped(f"{repo_id}@{chosen[:8]}", "the snapshot refs/main names is missing")
        return
    source = ModelSource(hf_repo=repo_id, hf_revision=chosen)
    base = repo_id.replace("/", ".")
    for item in _snapshot(snapshot, base, f"{repo_id}@{chosen[:8]}", source):
        yield attrs.evolve(item, note=note) if isinstance(item, HfModel) and note else item


def _newest(folder: Path, present: list[Path]) -> tuple[str, str]:
    """The newest snapshot of a repository ``refs/main`` names none of, and what to say."""
    chosen = max(present, key=_mtime).name
    ref = "refs/main is not a commit hash" if os.path.lexists(folder / "refs" / "main") else ""
    which = f"the newest of its {len(present)} snapshots" if len(present) > 1 else "its snapshot"
    return chosen, (
        f"{ref or 'no refs/main'}: imported {which}, {chosen[:8]} (models add PATH registers "
        "another snapshot)"
    )


def _mtime(path: Path) -> float:
    try:
        return path.lstat().st_mtime
    except OSError:
        return 0.0


def _refs(folder: Path) -> dict[str, str]:
    """Each ref (``refs/main``, ...) and the commit it names, if well-formed."""
    refs = {}
    for path in _listed(folder / "refs"):
        if _REF.fullmatch(path.name) and path.is_file() and not path.is_symlink():
            try:
                text = read_capped(path, 4096, "ref").decode("ascii", errors="replace").strip()
            except (OSError, InvalidConfig):
                continue
            if _REVISION.fullmatch(text):
                refs[path.name] = text
    return refs


def _snapshot(
    snapshot: Path, base: str, what: str, source: ModelSource
) -> Iterator[HfModel | Skipped]:
    files = _walk(snapshot)
    if files is None:
        yield Skipped(what, f"more than {MAX_SNAPSHOT_FILES} files: not read")
        return
    dangling = sorted(name for name, p in files.items() if p.is_symlink() and not p.exists())
    if dangling:
        yield Skipped(what, f"unfinished download: {', '.join(dangling[:3])} not in blobs/ yet")
        return
    top = {name for name in files if "/" not in name}
    folder = "config.json" in top and any(n.endswith(".safetensors") for n in top)
    ggufs = sorted(name for name in files if name.lower().endswith(".gguf"))
    for name in ggufs:
        split = _SPLIT.fullmatch(name)
        if split is not None:
            if split.group(2) == "00001":
                parts = f"a split GGUF in {int(split.group(3))} parts"
                yield Skipped(f"{what}/{name}", f"{parts}: register its folder with models add")
            continue
        signature = _gguf_signature(name, files, mlx_folder=folder)
        stem = name[: -len(".gguf")].replace("/", ".")
        yield _named(f"{base}:{stem}", files[name], f"{what}/{name}", source, signature)
    if folder:
        yield _named(base, snapshot, what, source, files.get(SIGNATURE_NAME))
    for name in sorted(files):
        why = _not_served(name, mlx_folder=folder)
        if why is not None:
            yield Skipped(f"{what}/{name}", why)
    if not ggufs and not folder:
        yield Skipped(what, "no GGUF file and no safetensors weights with a config.json")


MAX_SNAPSHOT_FILES = 10_000
"""The most files of one snapshot an import reads."""

_OTHER_WEIGHTS = {
    ".bin": "PyTorch weights",
    ".pt": "PyTorch weights",
    ".pth": "PyTorch weights",
    ".ckpt": "a checkpoint",
    ".onnx": "ONNX weights",
    ".h5": "Keras weights",
    ".msgpack": "Flax weights",
    ".tflite": "TensorFlow Lite weights",
    ".mlmodel": "Core ML weights",
}


def _not_served(name: str, *, mlx_folder: bool) -> str | None:
    """Why a weights file ``name`` of a snapshot is not imported, or None when it is not
    weights or is imported (a GGUF file, the safetensors of an mlx folder)."""
    suffix = PurePosixPath(name).suffix.lower()
    if suffix in _OTHER_WEIGHTS:
        return (
            f"{_OTHER_WEIGHTS[suffix]}, not a format llama-server (GGUF) or mlx_lm.server "
            "(safetensors with a config.json) loads"
        )
    if suffix == ".safetensors" and not (mlx_folder and "/" not in name):
        where = "in a subfolder" if "/" in name else "without a config.json beside them"
        return f"safetensors weights {where}: not a model folder mlx_lm.server loads"
    return None


def _gguf_signature(name: str, files: dict[str, Path], *, mlx_folder: bool) -> Path | None:
    """A GGUF file's detached signature: ``<file>.sig``, else ``model.sig`` in its folder
    (at the top, only when that is not the mlx folder's own)."""
    own = files.get(f"{name}.sig")
    if own is not None:
        return own
    folder = name.rsplit("/", 1)[0] + "/" if "/" in name else ""
    if not folder and mlx_folder:
        return None
    return files.get(folder + SIGNATURE_NAME)


def _walk(snapshot: Path) -> dict[str, Path] | None:
    """Every file (or link to one) of ``snapshot`` by its path beneath it, at most
    `scan.SNAPSHOT_DEPTH` folders down, no linked folder followed; None past
    `MAX_SNAPSHOT_FILES`."""
    found: dict[str, Path] = {}
    pending = [(snapshot, "")]
    while pending:
        folder, prefix = pending.pop()
        for path in _listed(folder):
            rel = prefix + path.name
            if path.is_dir() and not path.is_symlink():
                if rel.count("/") < SNAPSHOT_DEPTH - 1:
                    pending.append((path, rel + "/"))
                continue
            found[rel] = path
            if len(found) > MAX_SNAPSHOT_FILES:
                return None
    return found


def _named(
    name: str, path: Path, what: str, source: ModelSource, signature: Path | None = None
) -> HfModel | Skipped:
    try:
        check_model_name(name, where="name")
    except InvalidConfig as error:
        return Skipped(what, str(error))
    return HfModel(name, path, source, signature)


def _listed(folder: Path) -> list[Path]:
    try:
        with os.scandir(folder) as entries:
            return sorted(Path(e.path) for e in entries)
    except OSError:
        return []
