"""Registering what Ollama has pulled, from its model store (never downloading anything).

Ollama keeps, under its models directory (``~/.ollama/models``, or ``$OLLAMA_MODELS``)::

    manifests/<host>/<namespace>/<model>/<tag>     a JSON manifest per pulled name
    blobs/sha256-<64 hex>                          every layer, named by its SHA-256

A manifest (Docker's distribution manifest v2, or OCI's) lists ``layers``, each
``{"mediaType", "digest": "sha256:<hex>", "size"}``; the weights are the one layer of media
type ``application/vnd.ollama.image.model``, a GGUF file (layout from Ollama's source,
``server/internal/manifest`` and ``GetBlobsPath``). `find_ollama_models` walks the
manifests (no symbolic link followed, every manifest at most 1 MiB read by the one safe JSON
parser, at most 64 layers) and says, for each, what to register or why it is skipped;
`ollama_manifest` then hashes the blob once, BLAKE3 and SHA-256 in the same read from a
descriptor opened without following links, refusing it unless its SHA-256 is its name
(Ollama's content address) and its size the layer's. The registered model is the blob
itself, format gguf, root the ``blobs`` directory, ``source.ollama_tag`` the name Ollama
knows it by. Its registry name is that Ollama name (``qwen3:0.6b`` for
``registry.ollama.ai/library/qwen3/0.6b``, ``user.model:tag`` for another namespace,
``host.namespace.model:tag`` for another host).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

import attrs

from .._errors import InvalidConfig, cut
from .._flavor import ModelFormat
from .._safe_json import parse_json
from .._untrusted_file import MiB, read_capped
from .hashing import ProgressFn, blake3_and_fd
from .manifest import ModelFile, ModelManifest, ModelSource
from .manifest_io import check_model_name

DEFAULT_HOST = "registry.ollama.ai"
"""The registry whose ``library`` namespace Ollama's short names (``qwen3:0.6b``) mean."""

MODEL_LAYER = "application/vnd.ollama.image.model"
"""The media type of the weights layer (a GGUF file)."""

MANIFEST_TYPES = frozenset(
    {
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
    }
)
"""The manifest media types Ollama writes (a manifest without one is read as v2)."""

MAX_MANIFEST_BYTES = 1 * MiB
MAX_LAYERS = 64
MAX_MANIFESTS = 10_000
"""Bounds of one import: a manifest is a few hundred bytes with a handful of layers."""

_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@attrs.frozen
class OllamaModel:
    """A pulled model to register: its registry ``name``, the ``tag`` Ollama knows it by,
    and its weights blob (``blobs/sha256-<sha256>``, ``size`` bytes)."""

    name: str
    tag: str
    blob: Path
    sha256: str
    size: int
    left_out: tuple[str, ...] = ()
    """The kinds of the layers a server run from the weights alone goes without
    (``adapter``, ``projector``: a LoRA adapter, a vision projector Ollama loads beside
    them), said at import so no one takes the registration for the whole model."""


@attrs.frozen
class Skipped:
    """Something found that is not imported: ``what`` it is and ``why`` not."""

    what: str
    why: str


def find_ollama_models(store: Path) -> Iterator[OllamaModel | Skipped]:
    """Every manifest under ``store/manifests``, as a model to register or a skip.

    Raises:
        InvalidConfig: ``store`` has no ``manifests`` or ``blobs`` directory.
    """
    manifests, blobs = store / "manifests", store / "blobs"
    for needed in (manifests, blobs):
        if not needed.is_dir() or needed.is_symlink():
            raise InvalidConfig(
                f"{store}: not an Ollama model store ({needed.name}/ is missing; it is "
                "~/.ollama/models or $OLLAMA_MODELS)"
            )
    for count, (path, parts) in enumerate(_manifest_files(manifests)):
        if count >= MAX_MANIFESTS:
            yield Skipped(str(manifests), f"more than {MAX_MANIFESTS} manifests: stopped there")
            return
        yield _read_manifest(path, parts, blobs)


def ollama_manifest(found: OllamaModel, on_progress: ProgressFn | None = None) -> ModelManifest:
    """Hash ``found``'s blob (from a descriptor opened without following a link) and
    describe it as a manifest to register.

    Raises:
        InvalidConfig: the blob is not a regular file, its size or SHA-256 is not the
            manifest's, or it is not a GGUF file.
        OSError: it cannot be read.
    """
    fd = os.open(found.blob, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidConfig(f"{found.blob.name} is not a regular file")
        if info.st_size != found.size:
            raise InvalidConfig(
                f"{found.blob.name} is {info.st_size} bytes, the manifest says {found.size}"
            )
        if os.pread(fd, 4, 0) != b"GGUF":
            raise InvalidConfig(f"{found.blob.name}: the model layer is not a GGUF file")
        blake3, sha256 = blake3_and_fd(fd, "sha256", path=found.blob, on_progress=on_progress)
    finally:
        os.close(fd)
    if sha256 != found.sha256:
        raise InvalidConfig(f"{found.blob.name}: its SHA-256 is not its name (a damaged blob)")
    return ModelManifest(
        name=found.name,
        format=ModelFormat.GGUF,
        root=str(found.blob.parent),
        shards=(ModelFile(found.blob.name, found.size, blake3),),
        source=ModelSource(ollama_tag=found.tag),
    )


def _manifest_files(manifests: Path) -> Iterator[tuple[Path, tuple[str, ...]]]:
    """``manifests/<host>/<namespace>/<model>/<tag>``: each file four levels down, links
    not followed (a link anywhere is reported by `_read_manifest` as a skip)."""
    for top, dirs, files in os.walk(manifests, followlinks=False):
        parts = Path(top).relative_to(manifests).parts
        dirs.sort()
        for name in [d for d in dirs if (Path(top) / d).is_symlink()]:
            yield Path(top) / name, (*parts, name)
        if len(parts) >= 3:
            dirs.clear()  # the tags are files at the fourth level; nothing deeper is read
        if len(parts) == 3:
            for name in sorted(files):
                yield Path(top) / name, (*parts, name)


def _read_manifest(path: Path, parts: tuple[str, ...], blobs: Path) -> OllamaModel | Skipped:
    what = "/".join(parts)
    if len(parts) != 4 or path.is_symlink():
        return Skipped(what, "a symbolic link, not followed")
    if not all(_PART.fullmatch(part) for part in parts):
        return Skipped(cut(what, 120), "not a name Ollama writes")
    host, namespace, model, tag = parts
    try:
        data = parse_json(read_capped(path, MAX_MANIFEST_BYTES, "Ollama manifest"))
        digest, size = _model_layer(data)
        left_out = _left_out(data)
        name = check_model_name(_registry_name(host, namespace, model, tag), where="name")
    except InvalidConfig as error:
        return Skipped(what, str(error))
    except OSError as error:
        return Skipped(what, f"cannot read it: {error.strerror}")
    blob = blobs / f"sha256-{digest}"
    if blob.is_symlink() or not blob.is_file():
        return Skipped(what, f"its model blob {blob.name} is {_blob_kind(blob)}")
    return OllamaModel(
        name, _ollama_name(host, namespace, model, tag), blob, digest, size, left_out
    )


def _blob_kind(blob: Path) -> str:
    """What a model blob that is not a regular file is instead."""
    if blob.is_symlink():
        return "a symbolic link, not followed"
    if not os.path.lexists(blob):
        return "missing"
    return "not a regular file (a folder, FIFO or device)"


_SERVED_LAYERS = ("adapter", "projector")
"""The layer kinds (``application/vnd.ollama.image.<kind>``) Ollama loads with the weights."""


def _left_out(data: object) -> tuple[str, ...]:
    """The served layer kinds besides the weights in a checked manifest ``data``."""
    layers = data.get("layers") if isinstance(data, dict) else None
    kinds = {
        str(layer.get("mediaType", "")).removeprefix("application/vnd.ollama.image.")
        for layer in (layers if isinstance(layers, list) else [])
        if isinstance(layer, dict)
    }
    return tuple(kind for kind in _SERVED_LAYERS if kind in kinds)


def _model_layer(data: object) -> tuple[str, int]:
    """The digest (hex) and size of the manifest's one model layer.

    Raises:
        InvalidConfig: a manifest not shaped as Ollama writes it, naming the field.
    """
    if not isinstance(data, dict):
        raise InvalidConfig("$: the manifest is not a JSON object")
    media = data.get("mediaType", next(iter(MANIFEST_TYPES)))
    if media not in MANIFEST_TYPES:
        raise InvalidConfig(f"$.mediaType: {cut(repr(media), 80)} is not a manifest Ollama writes")
    layers = data.get("layers")
    if not isinstance(layers, list) or len(layers) > MAX_LAYERS:
        raise InvalidConfig(f"$.layers: expected a list of at most {MAX_LAYERS} layers")
    found = []
    for index, layer in enumerate(layers):
        if isinstance(layer, dict) and layer.get("mediaType") == MODEL_LAYER:
            found.append((index, layer))
    if len(found) != 1:
        raise InvalidConfig(f"$.layers: {len(found)} layers of type {MODEL_LAYER}, expected one")
    index, layer = found[0]
    digest = layer.get("digest")
    match = _DIGEST.fullmatch(digest) if isinstance(digest, str) else None
    if match is None:
        raise InvalidConfig(f"$.layers[{index}].digest: expected sha256:<64 lower-case hex>")
    size = layer.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise InvalidConfig(f"$.layers[{index}].size: expected a byte count")
    return match.group(1), size


def _ollama_name(host: str, namespace: str, model: str, tag: str) -> str:
    """The name Ollama shows: ``qwen3:0.6b``, ``user/model:tag``, ``host/ns/model:tag``."""
    if host == DEFAULT_HOST:
        return f"{model}:{tag}" if namespace == "library" else f"{namespace}/{model}:{tag}"
    return f"{host}/{namespace}/{model}:{tag}"


def _registry_name(host: str, namespace: str, model: str, tag: str) -> str:
    """The Ollama name with ``/`` (not allowed in registry names) made ``.``."""
    return _ollama_name(host, namespace, model, tag).replace("/", ".")
