"""Check a model's pinned files from their open descriptors.

`open_and_check` is what the registry runs for every check: it opens the model root once,
walks to each pinned file from that directory descriptor (`open_beneath`, in
``beneath.py``), and checks the *open* file: ``fstat`` for its type, size and stamp, and,
unless the stamp equals the one recorded at the last full hash in this process or the
registry's persisted record vouches for it (``verified_record.py``), BLAKE3 read from the
descriptor. What passed is returned as a `PinnedModel` holding the descriptors, so a server
can be handed exactly the bytes that were verified (``/proc/self/fd/N``, see
``design/pinning.md``). A model registered with a signature has it checked once its files
pass (``signature_check.py``): the signature file is pinned like the others.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Self

import attrs

from .._flavor import ModelFormat
from .anchors import LiveAnchors
from .beneath import MAX_LINKS as MAX_LINKS
from .beneath import ModelTree as ModelTree
from .beneath import OutsideRoot as OutsideRoot
from .beneath import open_beneath as open_beneath
from .hashing import CheckFailure, FileHasher, FileStamp, ProgressFn, blake3_and_fd
from .manifest import ModelFile, ModelManifest
from .signature_check import HashNotes, SignatureCheck
from .verified_record import VerifiedRecord


class ClosedOnExit:
    """A holder of descriptors that closes them (its `close`) on leaving a ``with`` block."""

    __slots__ = ()

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@attrs.define(eq=False)
class PinnedModel(ClosedOnExit):
    """A checked model's open descriptors: its root directory and each pinned file.

    The descriptors are close-on-exec; a spawn that hands one to a server names it in
    ``pass_fds``. Close them with `close` (or use the object as a context manager).

    Attributes:
        manifest: the manifest the files were checked against.
        root_fd: the model root directory, or None for an Ollama model (no files).
        fds: each pinned file's descriptor by its path relative to the root.
        stamps: each file's stamp when it was verified (see `changed`).
    """

    manifest: ModelManifest
    root_fd: int | None = None
    fds: dict[str, int] = attrs.field(factory=dict)
    stamps: dict[str, FileStamp] = attrs.field(factory=dict)
    recheck: Callable[[PinnedModel], CheckFailure | None] | None = None
    """Set by the registry that checked it: whether what it verified still holds beyond
    the files' stamps (its signature under trust anchors a reload re-read); see `changed`."""

    def shard_fds(self) -> tuple[int, ...]:
        """The shards' descriptors, in the manifest's order."""
        return tuple(self.fds[shard.path] for shard in self.manifest.shards)

    def changed(self) -> CheckFailure | None:
        """The first file whose open descriptor no longer has the stamp it was verified
        with (size, mtime, ctime: an in-place write changes ctime), as a sticky failure;
        then, when the registry's trust anchors were re-read since the check, its signature
        verified again from the held descriptor against them (and the requirements on its
        name), a sticky failure naming the signer found and the anchors expected when it no
        longer verifies. None when nothing changed or the descriptors are closed. ``fstat``
        only, no hashing; a signature check (about 0.4 ms) only once per anchor change."""
        for label, file in pinned_files(self.manifest):
            fd, verified = self.fds.get(file.path), self.stamps.get(file.path)
            if fd is None or verified is None:
                continue
            differs = verified.differs_from(FileStamp.of(os.fstat(fd)))
            if differs is not None:
                why = f"{label}: changed while served: {differs}"
                return CheckFailure(why, sticky=True, file=file.path)
        if self.recheck is not None and self.root_fd is not None:
            return self.recheck(self)
        return None

    def close(self) -> None:
        """Close every descriptor (safe to call twice)."""
        for fd in (self.root_fd, *self.fds.values()):
            if fd is not None:
                os.close(fd)
        self.root_fd, self.fds = None, {}


def open_and_check(
    manifest: ModelManifest,
    stamps: dict[str, FileStamp],
    *,
    full: bool,
    hasher: FileHasher,
    record: VerifiedRecord | None = None,
    on_progress: ProgressFn | None = None,
    signing: SignatureCheck | None = None,
) -> PinnedModel | CheckFailure:
    """Open every pinned file of ``manifest`` beneath its root and check it from its
    descriptor, then its signature if it has one; see the module docstring.

    Args:
        manifest: what to check against.
        stamps: the stamp of each file (by relative path) at its last passing hash; updated
            in place: a passing file's stamp is recorded, a failing file's dropped.
        full: re-hash every file; else a file whose stamp equals its recorded one, or
            that ``record`` vouches for, is not re-hashed (the cheap check).
        hasher: hashes a descriptor.
        record: the registry's persisted record of verified files: consulted unless
            ``full``, and told of every hash that passed or failed.
        on_progress: passed to the hasher.
        signing: the manifest's signature state (``signature_check.py``); None checks a
            signed manifest against no trust anchor (so it fails).

    Returns:
        The open descriptors when every file passed, else the first `CheckFailure` (its
        reason starts with the file's label, ``"shard tiny.gguf: ..."``; nothing stays open).
    """
    if manifest.format is ModelFormat.OLLAMA:
        return PinnedModel(manifest)
    try:
        real_root = Path(manifest.root).resolve(strict=True)
        tree = ModelTree.at_root(real_root)
    except (OSError, RuntimeError):
        return CheckFailure(f"root {manifest.root} is missing", sticky=False)
    pinned = PinnedModel(manifest)
    signing = signing if signing is not None else SignatureCheck(LiveAnchors())
    notes = HashNotes(also=signing.second_algorithm(manifest))
    try:
        pinned.root_fd = tree.open_root()
        for label, file in pinned_files(manifest):
            known = None if full else stamps.get(file.path)
            second = notes.also is not None and label.startswith(_MODEL_FILE_LABELS)
            if second and not signing.knows(file.path, known):
                known = None  # its second digest is needed: hash it in full
            result = check_file(
                tree,
                label,
                file,
                known=known,
                hasher=hasher,
                on_progress=on_progress,
                record=record,
                trust_record=not full and not second,
                notes=notes if second else HashNotes(),
            )
            if isinstance(result, CheckFailure):
                stamps.pop(file.path, None)
                pinned.close()
                if label.startswith(_SIGNATURE_LABEL) and (result.sticky or result.missing):
                    return signing.gone(result, tree)  # every model file passed: tampering
                return result
            pinned.fds[file.path], stamps[file.path] = result
            pinned.stamps[file.path] = result[1]
            if known != result[1]:  # not on this process's stamp: checked afresh
                notes.hashed.setdefault(file.path, None)
        failure = signing.after_files(manifest, pinned.fds, pinned.stamps, notes, full=full)
        if failure is not None:
            pinned.close()
            return failure
    except OSError:
        pinned.close()
        return CheckFailure(f"root {manifest.root} is missing", sticky=False)
    except BaseException:
        pinned.close()
        raise
    finally:
        tree.close()
    return pinned


_MODEL_FILE_LABELS = ("shard ", "tokenizer file ")
_SIGNATURE_LABEL = "signature "


def pinned_files(manifest: ModelManifest) -> Iterator[tuple[str, ModelFile]]:
    """Each pinned file with its label: ``"shard x.gguf"``, ``"tokenizer file y.json"``,
    and last the signature file, if any (``"signature model.sig"``)."""
    yield from ((f"shard {f.path}", f) for f in manifest.shards)
    yield from ((f"tokenizer file {f.path}", f) for f in manifest.tokenizer)
    if manifest.signature is not None:
        yield f"signature {manifest.signature.file.path}", manifest.signature.file


def check_file(
    tree: ModelTree,
    label: str,
    file: ModelFile,
    *,
    known: FileStamp | None,
    hasher: FileHasher,
    on_progress: ProgressFn | None = None,
    record: VerifiedRecord | None = None,
    trust_record: bool = False,
    notes: HashNotes | None = None,
) -> tuple[int, FileStamp] | CheckFailure:
    """Open one pinned file beneath ``tree`` and check it from the descriptor; a file
    whose stamp is ``known``, or that ``record`` vouches for (when ``trust_record``), is not
    hashed; a hash that passes or fails is noted in ``record``, and one that passes in
    ``notes`` (with the digest in ``notes.also`` too, computed in the same read).

    Returns:
        ``(descriptor, stamp)`` when it passed (the caller owns the descriptor), else a
        `CheckFailure`: missing (not sticky), outside the root, not a regular file, resized
        or a BLAKE3 mismatch (sticky: tampering), unreadable or changed while hashed.
    """
    noted = None if record is None else _Noted(record, trust_record, record.clock_ns())
    try:
        fd = tree.open(PurePosixPath(file.path))
    except OutsideRoot as outside:
        return CheckFailure(f"{label}: {outside}", sticky=True, file=file.path)
    except OSError:
        reason = f"{label}: missing under {tree.real_root}"
        return CheckFailure(reason, sticky=False, file=file.path, missing=True)
    try:
        path = tree.real_root / file.path
        result = _check_open(fd, label, file, known, hasher, path, on_progress, noted, notes)
    except BaseException:
        os.close(fd)
        raise
    if isinstance(result, CheckFailure):
        os.close(fd)
        return result
    return fd, result


def _check_open(
    fd: int,
    label: str,
    file: ModelFile,
    known: FileStamp | None,
    hasher: FileHasher,
    path: Path,
    on_progress: ProgressFn | None,
    noted: _Noted | None,
    notes: HashNotes | None = None,
) -> FileStamp | CheckFailure:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        return CheckFailure(f"{label}: is not a regular file", sticky=True, file=file.path)
    if info.st_size != file.size:
        reason = f"{label}: size is {info.st_size} bytes, the registry pins {file.size} (resized)"
        return CheckFailure(reason, sticky=True, file=file.path)
    stamp = FileStamp.of(info)
    if known == stamp or (noted is not None and noted.vouches(stamp, file.blake3)):
        return stamp
    second = None
    try:
        if notes is not None and notes.also is not None:
            digest, second = blake3_and_fd(fd, notes.also, path=path, on_progress=on_progress)
        else:
            digest = hasher.hash_fd(fd, path=path, on_progress=on_progress)
    except OSError as error:
        return CheckFailure(f"{label}: unreadable: {error.strerror}", sticky=False, file=file.path)
    if digest != file.blake3:
        if noted is not None:
            noted.record.forget(stamp)
        reason = f"{label}: BLAKE3 differs from the registry (tampered or replaced)"
        return CheckFailure(reason, sticky=True, file=file.path)
    if FileStamp.of(os.fstat(fd)) != stamp:
        reason = f"{label}: changed while it was hashed; check again once it is complete"
        return CheckFailure(reason, sticky=False, file=file.path)
    if noted is not None:
        noted.record.note(stamp, digest, checked_since_ns=noted.since_ns)
    if notes is not None:
        notes.hashed[file.path] = second
    return stamp


@attrs.frozen
class _Noted:
    """The persisted record as one file's check uses it: trusted or only told, and the
    wall-clock moment (ns) the check began, read before the file was opened."""

    record: VerifiedRecord
    trusted: bool
    since_ns: int

    def vouches(self, stamp: FileStamp, digest: str) -> bool:
        return self.trusted and self.record.vouches(stamp, digest)
