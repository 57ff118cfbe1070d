"""Manifest validation and the registry file's JSON form (pure; no I/O).

The registry file is ``{"schema": "inferactors.model-registry.v1", "models": [manifest, ...]}``
where a manifest is::

    {"name": "tiny", "format": "gguf", "root": "/abs/dir",
     "shards": [{"path": "tiny.gguf", "size": 522336, "blake3": "<64 hex>"}],
     "tokenizer": [], "source": {"hf_repo": "...", "hf_revision": "...", "ollama_tag": "..."},
     "signature": {"path": "model.sig", "size": 1234, "blake3": "<64 hex>",
                   "algorithm": "blake3", "anchor": "ops", "signer": "key sha256:<64 hex>"}}

``signature`` is present only for a model registered with a detached OpenSSF Model Signing
signature (``manifest.ModelSignature``).

Unknown keys are refused. Every error is an `InvalidConfig` whose message names the field as a
JSON path, for example ``$.models[2].shards[0].blake3: expected 64 lower-case hex characters``.
The text is read by the one safe parser (`inferactors._safe_json.parse_json`), so nesting
bombs, duplicate keys and huge integers are refused the same way, naming line or path.
A manifest body has a token name of up to 128 characters and 1 to 255 shards sorted by
path, each a relative path with a size and a 64 lower-hex BLAKE3 digest, and an optional
detached OpenSSF Model Signing signature (``design/signing.md``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any

from .._errors import InvalidConfig, shown
from .._flavor import ModelFormat
from .._safe_json import NotJson, parse_json
from .manifest import SIGNED_ALGORITHMS, ModelFile, ModelManifest, ModelSignature, ModelSource

REGISTRY_SCHEMA = "inferactors.model-registry.v1"
MAX_NAME_CHARS = 128
MAX_SHARDS = 255

_NAME_RE = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._+:-]{{0,{MAX_NAME_CHARS - 1}}}")
_HEX64_RE = re.compile(r"[0-9a-f]{64}")
_TAG_RE = re.compile(r"[^\s\x00-\x1f\x7f]{1,256}")
_MANIFEST_KEYS = frozenset({"name", "format", "root", "shards", "tokenizer", "source", "signature"})
_FILE_KEYS = frozenset({"path", "size", "blake3"})
_SIGNATURE_KEYS = _FILE_KEYS | {"algorithm", "anchor", "signer"}
_ANCHOR_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+:-]{0,63}")
_SIGNER_RE = re.compile(r"[^\x00-\x1f\x7f]{1,512}")
_SOURCE_KEYS = frozenset({"hf_repo", "hf_revision", "ollama_tag"})
_FORMATS = ", ".join(f.value for f in ModelFormat)


def check_model_name(name: object, *, where: str = "name") -> str:
    """Return ``name`` if it is a plain token: 1 to 128 characters, a letter or digit first,
    then letters, digits and ``. _ + : -``.

    Raises:
        InvalidConfig: naming ``where``, for a name with spaces, slashes, ``..`` and so on.
    """
    if not isinstance(name, str) or _NAME_RE.fullmatch(name) is None:
        raise InvalidConfig(
            f"{where}: {shown(name)} is not a model name (1 to {MAX_NAME_CHARS} characters: "
            "a letter or digit, then letters, digits and . _ + : -)"
        )
    return name


def check_manifest(manifest: ModelManifest, *, where: str = "$") -> ModelManifest:
    """Validate a manifest built in code by the rules the registry file obeys.

    Raises:
        InvalidConfig: naming the failing field under ``where``.
    """
    return manifest_from_json(manifest_to_json(manifest), where=where)


def manifest_to_json(manifest: ModelManifest) -> dict[str, Any]:
    """The JSON object for one manifest (``source`` keys that are None are left out)."""
    source = {
        key: value
        for key in sorted(_SOURCE_KEYS)
        if (value := getattr(manifest.source, key)) is not None
    }
    body: dict[str, Any] = {
        "name": manifest.name,
        "format": manifest.format.value,
        "root": manifest.root,
        "shards": [_file_to_json(f) for f in manifest.shards],
        "tokenizer": [_file_to_json(f) for f in manifest.tokenizer],
        "source": source,
    }
    if manifest.signature is not None:
        body["signature"] = _signature_to_json(manifest.signature)
    return body


def manifest_from_json(obj: object, *, where: str = "$") -> ModelManifest:
    """Build a `ModelManifest` from its JSON object, checking every field.

    Raises:
        InvalidConfig: naming the failing field under ``where``.
    """
    body = _object(obj, where, _MANIFEST_KEYS, required=("name", "format", "root", "shards"))
    fmt = _format(body["format"], f"{where}.format")
    source = _source(body.get("source", {}), f"{where}.source", fmt)
    shards = _files(body["shards"], f"{where}.shards")
    tokenizer = _files(body.get("tokenizer", []), f"{where}.tokenizer")
    _check_file_set(fmt, shards, tokenizer, where)
    signature = None
    if body.get("signature") is not None:
        signature = _signature(body["signature"], f"{where}.signature")
        _check_signature_file(fmt, signature, shards + tokenizer, f"{where}.signature")
    return ModelManifest(
        name=check_model_name(body["name"], where=f"{where}.name"),
        format=fmt,
        root=_root(body["root"], f"{where}.root", fmt),
        shards=shards,
        tokenizer=tokenizer,
        source=source,
        signature=signature,
    )


def registry_to_text(manifests: Iterable[ModelManifest]) -> str:
    """The registry file's text: manifests sorted by name, two-space indent, final newline."""
    models = [manifest_to_json(m) for m in sorted(manifests, key=lambda m: m.name)]
    return json.dumps({"schema": REGISTRY_SCHEMA, "models": models}, indent=2) + "\n"


def registry_from_text(text: str, *, origin: str) -> tuple[ModelManifest, ...]:
    """Parse a registry file's text; ``origin`` (the file name) prefixes every error.

    Raises:
        InvalidConfig: ``"<origin>: $.models[2].shards[0].blake3: expected ..."``; also for
            text that is not JSON, a wrong ``schema`` and duplicate names, nesting over 64
            levels, a key twice in one object and an integer over 100 digits.
    """
    try:
        return _registry_from_json(parse_json(text))
    except NotJson as error:
        raise InvalidConfig(f"{origin}: not valid JSON: {error}") from None
    except InvalidConfig as error:
        raise InvalidConfig(f"{origin}: {error}") from None


def _registry_from_json(obj: object) -> tuple[ModelManifest, ...]:
    body = _object(obj, "$", frozenset({"schema", "models"}), required=("schema", "models"))
    if body["schema"] != REGISTRY_SCHEMA:
        raise InvalidConfig(f"$.schema: expected {REGISTRY_SCHEMA!r}, got {shown(body['schema'])}")
    models = _list(body["models"], "$.models")
    manifests: list[ModelManifest] = []
    seen: set[str] = set()
    for index, item in enumerate(models):
        manifest = manifest_from_json(item, where=f"$.models[{index}]")
        if manifest.name in seen:
            raise InvalidConfig(f"$.models[{index}].name: duplicate name {manifest.name!r}")
        seen.add(manifest.name)
        manifests.append(manifest)
    return tuple(manifests)


def _file_to_json(file: ModelFile) -> dict[str, Any]:
    return {"path": file.path, "size": file.size, "blake3": file.blake3}


def _signature_to_json(signature: ModelSignature) -> dict[str, Any]:
    return _file_to_json(signature.file) | {
        "algorithm": signature.algorithm,
        "anchor": signature.anchor,
        "signer": signature.signer,
    }


def _signature(obj: object, where: str) -> ModelSignature:
    body = _object(obj, where, _SIGNATURE_KEYS, required=tuple(sorted(_SIGNATURE_KEYS)))
    file = _file({key: body[key] for key in _FILE_KEYS}, where)
    algorithm = _str(body["algorithm"], f"{where}.algorithm")
    if algorithm not in SIGNED_ALGORITHMS:
        raise InvalidConfig(
            f"{where}.algorithm: {shown(algorithm)} is not one of {', '.join(SIGNED_ALGORITHMS)}"
        )
    anchor = _str(body["anchor"], f"{where}.anchor")
    if _ANCHOR_RE.fullmatch(anchor) is None:
        raise InvalidConfig(f"{where}.anchor: {shown(anchor)} is not a trust anchor name")
    signer = _str(body["signer"], f"{where}.signer")
    if _SIGNER_RE.fullmatch(signer) is None:
        raise InvalidConfig(f"{where}.signer: expected 1 to 512 printable characters")
    return ModelSignature(file=file, algorithm=algorithm, anchor=anchor, signer=signer)


def _check_signature_file(
    fmt: ModelFormat, signature: ModelSignature, files: tuple[ModelFile, ...], where: str
) -> None:
    if fmt is ModelFormat.OLLAMA:
        raise InvalidConfig(f"{where}: an ollama model pins no files, so it carries no signature")
    if any(f.path == signature.file.path for f in files):
        raise InvalidConfig(f"{where}.path: {signature.file.path!r} is also a pinned model file")


def _object(
    obj: object, where: str, allowed: frozenset[str], *, required: tuple[str, ...] = ()
) -> Mapping[str, object]:
    if not isinstance(obj, dict):
        raise InvalidConfig(f"{where}: expected an object, got {_kind(obj)}")
    for key in obj:
        if key not in allowed:
            raise InvalidConfig(f"{where}.{key if len(key) <= 40 else shown(key, 40)}: unknown key")
    for key in required:
        if key not in obj:
            raise InvalidConfig(f"{where}.{key}: missing")
    return obj


def _list(obj: object, where: str) -> list[object]:
    if not isinstance(obj, list):
        raise InvalidConfig(f"{where}: expected a list, got {_kind(obj)}")
    return obj


def _str(obj: object, where: str) -> str:
    if not isinstance(obj, str):
        raise InvalidConfig(f"{where}: expected a string, got {_kind(obj)}")
    return obj


def _kind(obj: object) -> str:
    names: dict[type, str] = {dict: "an object", list: "a list", str: "a string"}
    names |= {bool: "a boolean", int: "a number", float: "a number"}
    if obj is None:
        return "null"
    return names.get(type(obj), f"a {type(obj).__name__}")


def _format(obj: object, where: str) -> ModelFormat:
    try:
        return ModelFormat(_str(obj, where))
    except ValueError:
        raise InvalidConfig(f"{where}: {shown(obj)} is not one of {_FORMATS}") from None


def _root(obj: object, where: str, fmt: ModelFormat) -> str:
    root = _str(obj, where)
    if fmt is ModelFormat.OLLAMA:
        if root:
            raise InvalidConfig(f"{where}: must be empty for an ollama model (Ollama owns files)")
        return root
    if not PurePosixPath(root).is_absolute():
        raise InvalidConfig(f"{where}: expected an absolute directory, got {shown(root)}")
    return root


def _files(obj: object, where: str) -> tuple[ModelFile, ...]:
    items = _list(obj, where)
    if len(items) > MAX_SHARDS:
        raise InvalidConfig(f"{where}: {len(items)} files, at most {MAX_SHARDS} allowed")
    files = tuple(_file(item, f"{where}[{i}]") for i, item in enumerate(items))
    paths = [f.path for f in files]
    if paths != sorted(paths):
        raise InvalidConfig(f"{where}: files must be sorted by path")
    return files


def _file(obj: object, where: str) -> ModelFile:
    body = _object(obj, where, _FILE_KEYS, required=tuple(sorted(_FILE_KEYS)))
    size = body["size"]
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise InvalidConfig(f"{where}.size: expected a byte count >= 0, got {shown(size)}")
    digest = _str(body["blake3"], f"{where}.blake3")
    if _HEX64_RE.fullmatch(digest) is None:
        raise InvalidConfig(f"{where}.blake3: expected 64 lower-case hex characters")
    return ModelFile(path=_relative_path(body["path"], f"{where}.path"), size=size, blake3=digest)


def _relative_path(obj: object, where: str) -> str:
    path = _str(obj, where)
    pure = PurePosixPath(path)
    if not path or pure.is_absolute() or ".." in pure.parts or "\\" in path:
        raise InvalidConfig(f"{where}: {shown(path)} must be a relative path inside the model root")
    if pure.as_posix() != path or path == ".":
        raise InvalidConfig(
            f"{where}: {shown(path)} is not a normalised path (try {shown(pure.as_posix())})"
        )
    return path


def _check_file_set(
    fmt: ModelFormat, shards: tuple[ModelFile, ...], tokenizer: tuple[ModelFile, ...], where: str
) -> None:
    if fmt is ModelFormat.OLLAMA and (shards or tokenizer):
        raise InvalidConfig(f"{where}.shards: an ollama model pins no files (Ollama owns them)")
    if fmt is not ModelFormat.OLLAMA and not shards:
        raise InvalidConfig(f"{where}.shards: a {fmt.value} model needs at least one shard")
    seen: set[str] = set()
    for kind, files in (("shards", shards), ("tokenizer", tokenizer)):
        for index, file in enumerate(files):
            if file.path in seen:
                raise InvalidConfig(f"{where}.{kind}[{index}].path: {file.path!r} listed twice")
            seen.add(file.path)


def _source(obj: object, where: str, fmt: ModelFormat) -> ModelSource:
    body = _object(obj, where, _SOURCE_KEYS)
    source = ModelSource(
        hf_repo=_optional_tag(body.get("hf_repo"), f"{where}.hf_repo"),
        hf_revision=_optional_tag(body.get("hf_revision"), f"{where}.hf_revision"),
        ollama_tag=_optional_tag(body.get("ollama_tag"), f"{where}.ollama_tag"),
    )
    if fmt is ModelFormat.OLLAMA and source.ollama_tag is None:
        raise InvalidConfig(f"{where}.ollama_tag: an ollama model needs its tag")
    return source


def _optional_tag(obj: object, where: str) -> str | None:
    if obj is None:
        return None
    tag = _str(obj, where)
    if _TAG_RE.fullmatch(tag) is None:
        raise InvalidConfig(f"{where}: expected 1 to 256 characters, no spaces, got {shown(tag)}")
    return tag


WEIGHT_SUFFIXES = frozenset({".safetensors", ".gguf", ".bin", ".pt", ".pth", ".npz", ".ckpt"})
"""File suffixes scanned as shards."""
TOKENIZER_SUFFIXES = frozenset({".json", ".model", ".tiktoken", ".txt", ".jinja"})
"""File suffixes pinned as tokenizer, config and template files."""


def classify_file(name: str) -> str | None:
    """``"shard"``, ``"tokenizer"`` or None (ignored) for a file name in a model directory.

    Hidden files (a leading ``.``) are ignored; suffixes compare case-insensitively.
    """
    suffix = PurePosixPath(name).suffix.lower()
    if name.startswith("."):
        return None
    if suffix in WEIGHT_SUFFIXES:
        return "shard"
    return "tokenizer" if suffix in TOKENIZER_SUFFIXES else None


def choose_format(
    shards: Iterable[str], *, explicit: ModelFormat | None, says_mlx: bool
) -> ModelFormat:
    """The format of a scanned model: ``explicit`` if given and consistent, else gguf when
    every shard is ``.gguf``, else mlx when the directory says so, else safetensors.

    Raises:
        InvalidConfig: ``format`` is ollama (use an Ollama registration), gguf while some
            shard is not a ``.gguf`` file, or mlx or safetensors while every shard is.
    """
    suffixes = {PurePosixPath(s).suffix.lower() for s in shards}
    if explicit is ModelFormat.OLLAMA:
        raise InvalidConfig("format: ollama models are registered by tag, not by path")
    if explicit is ModelFormat.GGUF and suffixes != {".gguf"}:
        raise InvalidConfig(f"format: gguf needs only .gguf shards, found {sorted(suffixes)}")
    if explicit is not None and suffixes == {".gguf"} and explicit is not ModelFormat.GGUF:
        raise InvalidConfig(f"format: {explicit.value} does not fit a model of .gguf files")
    if explicit is not None:
        return explicit
    if suffixes == {".gguf"}:
        return ModelFormat.GGUF
    return ModelFormat.MLX if says_mlx else ModelFormat.SAFETENSORS
