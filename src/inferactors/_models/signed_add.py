"""Registering a model with its detached OMS signature (``models add --signature``).

`scan_signed` verifies the signature offline against the trust anchors first (no hashing:
``oms.verify_signature``), learns from it which files it signs and with which digest, then
hashes the model once (BLAKE3, and the signed digest in the same read when that is not
BLAKE3) and checks that the signature signs exactly the files to be pinned: the model's
weights, tokenizer and config files as ``models add`` scans them, plus every other file the
signature signs (a ``README.md``, a file in a subdirectory), which is then pinned too. A
scanned file the signature does not sign (added after signing, or a shard left out of the
signed manifest) refuses the model; so does a signed file that is missing, or any digest
that differs. The signature file must lie beneath the model's root: it is pinned like the
model's files, from the same bytes that were verified.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

import attrs
import blake3

from .._errors import InvalidConfig, shown
from .._flavor import ModelFormat
from .._untrusted_file import read_capped_fd
from .anchors import TrustAnchors
from .beneath import ModelTree, OutsideRoot
from .hashing import FileHasher, ProgressFn
from .manifest import ModelFile, ModelManifest, ModelSignature
from .oms import MAX_SIGNATURE_BYTES, SINGLE_FILE, BadSignature, verify_signature
from .scan import SecondDigests, gguf_root, scan_model
from .signature_check import compare_signed

SIGNATURE_NAME = "model.sig"
"""The name OpenSSF Model Signing gives a detached signature by default."""


def find_signature(path: Path) -> Path | None:
    """The detached signature lying beside a model, if any: ``<dir>/model.sig`` for a
    directory; ``<file>.sig``, else ``model.sig`` in its folder, for a single file."""
    if path.is_dir():
        candidates = [path / SIGNATURE_NAME]
    else:
        candidates = [path.with_name(path.name + ".sig"), path.with_name(SIGNATURE_NAME)]
    return next((c for c in candidates if os.path.lexists(c)), None)


def scan_signed(
    path: Path,
    *,
    name: str,
    fmt: ModelFormat | None,
    hasher: FileHasher,
    signature: Path,
    anchors: TrustAnchors,
    on_progress: ProgressFn | None = None,
) -> ModelManifest:
    """Hash the model at ``path`` and describe it as a manifest carrying its verified
    ``signature`` (module docstring).

    Raises:
        InvalidConfig: ``"signature: model.sig: ..."``: no anchor is configured, the file is
            unreadable, over 4 MiB, outside the model's root, not a sigstore bundle, signed
            by no anchor, does not verify, or does not sign exactly the files pinned with
            their digests; or as `scan.scan_model`.
        Unsupported: the ``signing`` extra is not installed.
        OSError: a model file cannot be read.
    """
    root = _root_of(path)
    relative = _beneath(root, signature)
    field = f"signature: {relative}"
    if not anchors:
        raise InvalidConfig(
            f"{field}: no trust anchor to verify it against (name one: --anchor, or the run "
            "file's [[managed.trust_anchors]] with --config)"
        )
    data = _read(root, relative, field)
    try:
        signed = verify_signature(data, anchors)
    except BadSignature as error:
        raise InvalidConfig(f"{field}: does not verify: {error}") from None
    names = _checked_names(tuple(n for n in signed.files if n != SINGLE_FILE), field)
    include = names if path.is_dir() else ()
    second = None if signed.algorithm == "blake3" else SecondDigests(signed.algorithm)
    manifest = scan_model(
        path,
        name=name,
        fmt=fmt,
        hasher=hasher,
        on_progress=on_progress,
        include=include,
        second=second,
    )
    manifest = attrs.evolve(
        manifest,
        tokenizer=tuple(f for f in manifest.tokenizer if f.path != relative),
        signature=ModelSignature(
            file=ModelFile(relative, len(data), blake3.blake3(data).hexdigest()),
            algorithm=signed.algorithm,
            anchor=signed.anchor,
            signer=signed.signer,
        ),
    )
    why = compare_signed(manifest, signed, second.digests if second is not None else {})
    if why is not None:
        raise InvalidConfig(f"{field}: {why}")
    return manifest


def _root_of(path: Path) -> Path:
    if path.is_dir():
        return Path(os.path.abspath(path))
    return gguf_root(path)[0]


def _beneath(root: Path, signature: Path) -> str:
    where = Path(os.path.abspath(signature))
    if not where.is_relative_to(root):
        raise InvalidConfig(
            f"signature: {signature} is not in the model's folder {root} (keep the detached "
            "signature beside the model's files: it is pinned with them)"
        )
    return where.relative_to(root).as_posix()


def _read(root: Path, relative: str, field: str) -> bytes:
    """The signature's bytes, opened beneath the model's root as every later check opens
    it (a link out of the root is refused here too, never read), a regular file of at most
    4 MiB."""
    try:
        tree = ModelTree.at_root(Path(os.path.realpath(root)))
        try:
            fd = tree.open(PurePosixPath(relative))
        finally:
            tree.close()
    except OutsideRoot as error:
        raise InvalidConfig(f"{field}: {error}") from None
    except OSError as error:
        raise InvalidConfig(f"{field}: cannot read it: {error.strerror}") from None
    try:
        return read_capped_fd(fd, Path(relative), MAX_SIGNATURE_BYTES, "signature")
    except InvalidConfig as error:
        raise InvalidConfig(f"{field}: {str(error).split(': ', 1)[-1]}") from None
    except OSError as error:
        raise InvalidConfig(f"{field}: cannot read it: {error.strerror}") from None
    finally:
        os.close(fd)


def _checked_names(names: tuple[str, ...], field: str) -> tuple[str, ...]:
    """``names`` once each is a plain relative path: no ``..``, no absolute path, no NUL or
    other control character (a file system could not hold it, a terminal would act on it).
    """
    for name in names:
        pure = PurePosixPath(name)
        odd = not name or not name.isprintable() or pure.as_posix() != name
        if odd or pure.is_absolute() or ".." in pure.parts:
            raise InvalidConfig(f"{field}: it signs {shown(name, 100)}, not a path beneath it")
    return names
