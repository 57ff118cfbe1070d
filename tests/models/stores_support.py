"""An Ollama model store and a Hugging Face cache folder, laid out as the real ones are.

Ollama (its source, ``server/internal/manifest`` and ``GetBlobsPath``)::

    <models>/manifests/registry.ollama.ai/library/<model>/<tag>   JSON, distribution v2
    <models>/blobs/sha256-<hex>                                    every layer by SHA-256

Hugging Face (the Hub's "local cache" documentation, as ``huggingface_hub`` writes it)::

    <cache>/models--<org>--<repo>/refs/main                        the commit, 40 hex
    <cache>/models--<org>--<repo>/blobs/<sha256 or git sha1>       the contents
    <cache>/models--<org>--<repo>/snapshots/<commit>/<file>        -> ../../blobs/<hash>

Imported as ``models.stores_support``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

V2 = "application/vnd.docker.distribution.manifest.v2+json"
MODEL = "application/vnd.ollama.image.model"


def put_blob(store: Path, data: bytes) -> str:
    """Write ``data`` as a blob of an Ollama store and return its ``sha256:<hex>`` digest."""
    digest = hashlib.sha256(data).hexdigest()
    (store / "blobs").mkdir(parents=True, exist_ok=True)
    (store / "blobs" / f"sha256-{digest}").write_bytes(data)
    return f"sha256:{digest}"


def ollama_manifest(layers: list[dict[str, object]]) -> dict[str, object]:
    config: dict[str, object] = {"mediaType": "application/vnd.docker.container.image.v1+json"}
    config |= {"digest": "sha256:" + "c" * 64, "size": 487}
    return {"schemaVersion": 2, "mediaType": V2, "config": config, "layers": layers}


def pull_into_ollama(
    store: Path, gguf: Path, model: str, tag: str, *, namespace: str = "library"
) -> Path:
    """Lay ``gguf`` out as ``ollama pull <model>:<tag>`` leaves it: the model blob, a
    template and a params blob, and the manifest naming them."""
    data = gguf.read_bytes()
    layers: list[dict[str, object]] = [{"mediaType": MODEL, "digest": put_blob(store, data)}]
    layers[0]["size"] = len(data)
    for kind, text in (("template", b"{{ .Prompt }}"), ("params", b'{"stop": ["</s>"]}')):
        digest = put_blob(store, text)
        layers.append({"mediaType": f"application/vnd.ollama.image.{kind}", "digest": digest})
        layers[-1]["size"] = len(text)
    return write_ollama_manifest(store, model, tag, ollama_manifest(layers), namespace=namespace)


def write_ollama_manifest(
    store: Path, model: str, tag: str, body: object, *, namespace: str = "library"
) -> Path:
    folder = store / "manifests" / "registry.ollama.ai" / namespace / model
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / tag
    path.write_text(body if isinstance(body, str) else json.dumps(body))
    return path


def cache_repo(
    cache: Path, repo_id: str, files: Mapping[str, Path | bytes], *, revision: str = "a" * 40
) -> Path:
    """Lay ``files`` out as ``hf_hub_download`` leaves a repository at ``revision``: each
    file's content in ``blobs/`` under its SHA-256, a relative link to it in the snapshot,
    and ``refs/main``. Returns the snapshot folder."""
    folder = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = folder / "snapshots" / revision
    (folder / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(revision)
    for name, content in files.items():
        data = content.read_bytes() if isinstance(content, Path) else content
        blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, link.parent), link)
    return snapshot


def mlx_files(folder: Path) -> dict[str, Path | bytes]:
    """The files of the tiny mlx model folder, by name."""
    return {p.name: p for p in sorted(folder.iterdir()) if p.is_file()}


def copy_tree(source: Path, target: Path) -> Path:
    return Path(shutil.copytree(source, target))
