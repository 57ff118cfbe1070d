"""Finding the models in a Hugging Face cache folder (never downloading anything).

The Hub's local cache (``~/.cache/huggingface/hub``, ``$HF_HUB_CACHE``; layout documented
by Hugging Face as "Hub Local Cache" and written by ``huggingface_hub``) holds one folder
per repository::

    models--<org>--<repo>/
        refs/main                     the commit hash the ``main`` ref points to
        blobs/<hash>                  each file's content (``.incomplete`` while downloading)
        snapshots/<commit>/<path>     a symbolic link per file, into ../../blobs/

`find_hf_models` reads each model repository's snapshot that a ref names (every snapshot
when no ref is left), and yields what to register: each top-level GGUF file of a snapshot
as its own model (a repository of quantisations holds several), or the snapshot folder as
one model when it holds safetensors weights and a ``config.json`` (an mlx folder with its
shards); a split GGUF, a dangling link (an unfinished download), a repository that is not a
model, and a snapshot with nothing to serve are skipped with why. Registration itself hashes
in place (``scan.py``), where every link must stay inside the snapshot or the repository's
``blobs/`` (``hashing.allowed_bases``). Registry names are ``<repo>`` for a folder and
``<repo>:<file stem>`` for a GGUF file, with ``@<commit[:8]>`` added for a snapshot no ref
names.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import attrs

from .._errors import InvalidConfig, cut
from .._untrusted_file import read_capped
from .import_ollama import Skipped
from .manifest import ModelSource
from .manifest_io import check_model_name
from .signed_add import SIGNATURE_NAME

_REVISION = re.compile(r"[0-9a-f]{40}")
_REF = re.compile(r"[A-Za-z0-9._-]{1,128}")
_SPLIT = re.compile(r".*-\d{5}-of-\d{5}\.gguf", re.I)
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
    repo = repo_id.rsplit("/", 1)[-1]
    snapshots = folder / "snapshots"
    named = _refs(folder)
    revisions = sorted(set(named.values())) or sorted(
        p.name for p in _listed(snapshots) if _REVISION.fullmatch(p.name)
    )
    if not revisions:
        yield Skipped(repo_id, "no snapshot (nothing downloaded yet)")
    for revision in revisions:
        snapshot = snapshots / revision
        if snapshot.is_symlink() or not snapshot.is_dir():
            yield Skipped(f"{repo_id}@{revision[:8]}", "the snapshot a ref names is missing")
            continue
        suffix = "" if revision in named.values() else f"@{revision[:8]}"
        source = ModelSource(hf_repo=repo_id, hf_revision=revision)
        yield from _snapshot(snapshot, repo + suffix, f"{repo_id}@{revision[:8]}", source)


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
    files = {p.name: p for p in _listed(snapshot)}
    dangling = sorted(name for name, p in files.items() if p.is_symlink() and not p.exists())
    if dangling:
        yield Skipped(what, f"unfinished download: {', '.join(dangling[:3])} not in blobs/ yet")
        return
    signature = files.get(SIGNATURE_NAME)
    ggufs = sorted(name for name in files if name.lower().endswith(".gguf"))
    folder = "config.json" in files and any(n.endswith(".safetensors") for n in files)
    for name in ggufs:
        if _SPLIT.fullmatch(name):
            yield Skipped(f"{what}/{name}", "a split GGUF: register its folder with models add")
            continue
        yield _named(f"{base}:{Path(name).stem}", files[name], f"{what}/{name}", source)
    if folder:
        yield _named(base, snapshot, what, source, signature)
    elif not ggufs:
        yield Skipped(what, "no GGUF file and no safetensors weights with a config.json")


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
