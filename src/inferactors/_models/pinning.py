"""Open a model's pinned files without following links out of its root, and check each one
from its open descriptor (issue 8, items 4 and 5).

`open_and_check` is what the registry runs for every check: it opens the model root once,
walks to each pinned file from that directory descriptor (`open_beneath`), and checks the
*open* file: ``fstat`` for its type, size and stamp, and, unless the stamp equals the one
recorded at the last full hash, BLAKE3 read from the descriptor. What passed is returned as
a `PinnedModel` holding the descriptors, so a server can be handed exactly the bytes that
were verified (``/proc/self/fd/N``, see ``design/pinning.md``).

Why a walk with ``O_NOFOLLOW`` and not ``openat2(RESOLVE_BENEATH)``: the walk is plain
POSIX (``openat``, ``fstatat``, ``readlinkat`` through `os` with ``dir_fd``), so it needs
no raw system-call numbers through ctypes and runs where ``openat2`` is missing or filtered
(kernels before 5.6, container seccomp profiles, macOS, where mlx_lm.server lives). It also
states the rule exactly: a link is followed only while it stays under the model root (or,
for a Hugging Face ``snapshots/<revision>`` root, in that repository's ``blobs/``), an
absolute link counts when it names a place inside, and every step is an ``openat`` on a
directory descriptor we hold, so a component swapped for a link mid-walk fails with
``ELOOP`` instead of being followed. ``RESOLVE_BENEATH`` refuses every absolute link.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Self

import attrs

from .._flavor import ModelFormat
from .hashing import CheckFailure, FileHasher, FileStamp, ProgressFn
from .manifest import ModelFile, ModelManifest

MAX_LINKS = 40
"""Most symbolic links one walk follows (Linux's own limit), then ``ELOOP``."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO never blocks


class OutsideRoot(Exception):
    """A walk left the model root; the message says through which link or step."""


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

    def shard_fds(self) -> tuple[int, ...]:
        """The shards' descriptors, in the manifest's order."""
        return tuple(self.fds[shard.path] for shard in self.manifest.shards)

    def changed(self) -> CheckFailure | None:
        """The first file whose open descriptor no longer has the stamp it was verified
        with (size, mtime, ctime: an in-place write changes ctime), as a sticky failure;
        None when none changed or the descriptors are closed. ``fstat`` only, no hashing."""
        for label, file in pinned_files(self.manifest):
            fd, verified = self.fds.get(file.path), self.stamps.get(file.path)
            if fd is None or verified is None:
                continue
            differs = verified.differs_from(FileStamp.of(os.fstat(fd)))
            if differs is not None:
                why = f"{label}: changed while served: {differs}"
                return CheckFailure(why, sticky=True, file=file.path)
        return None

    def close(self) -> None:
        """Close every descriptor (safe to call twice)."""
        for fd in (self.root_fd, *self.fds.values()):
            if fd is not None:
                os.close(fd)
        self.root_fd, self.fds = None, {}


@attrs.define(eq=False)
class ModelTree:
    """The directory a model's files are walked from, held open.

    For an ordinary root that is the root itself. For a Hugging Face cache root
    (``.../models--x--y/snapshots/<revision>``, whose files link to ``../../blobs/<hash>``)
    it is the repository directory, and a walk may end only in that snapshot or in
    ``blobs/``.
    """

    base: Path
    base_fd: int
    root: tuple[str, ...]
    allowed: tuple[tuple[str, ...], ...]

    @classmethod
    def at_root(cls, real_root: Path) -> ModelTree:
        """Open the tree of the (symlink-free) root ``real_root``.

        Raises:
            OSError: the directory cannot be opened.
        """
        if real_root.parent.name == "snapshots":
            base, root = real_root.parent.parent, ("snapshots", real_root.name)
            fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            return cls(base, fd, root, (root, ("blobs",)))
        fd = os.open(real_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        return cls(real_root, fd, (), ((),))

    @property
    def real_root(self) -> Path:
        """The model root (symlink-free)."""
        return self.base.joinpath(*self.root)

    def open_root(self) -> int:
        """A new descriptor of the root directory."""
        return self.open(PurePosixPath(), directory=True)

    def open(self, relative: PurePosixPath, *, directory: bool = False) -> int:
        """Open ``relative`` (to the root) beneath the tree; see `open_beneath`."""
        parts = (*self.root, *relative.parts)
        return open_beneath(self.base_fd, parts, self.base, self.allowed, directory=directory)

    def close(self) -> None:
        """Close the tree's directory."""
        os.close(self.base_fd)


def open_beneath(
    base_fd: int,
    parts: Sequence[str],
    base: Path,
    allowed: tuple[tuple[str, ...], ...] = ((),),
    *,
    directory: bool = False,
) -> int:
    """Open ``base / parts`` from the directory ``base_fd``, never leaving ``base``.

    Each component is opened with ``O_NOFOLLOW`` relative to the directory before it. A
    symbolic link is read and followed by hand: ``..`` steps back up the walk (never above
    ``base``), and an absolute target must lie lexically under ``base``. The place reached
    must start with one of the ``allowed`` component prefixes (``()`` allows all of ``base``).

    Args:
        base_fd: an open directory descriptor of ``base``; it stays open.
        parts: the path's components under ``base``.
        base: the real path of that directory (for absolute links and messages).
        allowed: component prefixes under ``base`` the walk may end in.
        directory: open a directory (else a regular file or whatever the last part is).

    Returns:
        A new close-on-exec descriptor (``O_NONBLOCK`` for a file, so a FIFO cannot block).

    Raises:
        OutsideRoot: a link or ``..`` led outside ``base``, or the walk ended outside
            ``allowed``.
        OSError: a component is missing (``ENOENT``), is not a directory, was swapped for a
            link during the walk (``ELOOP``), or more than `MAX_LINKS` links were followed.
    """
    walk = _Walk(base_fd, base)
    try:
        return walk.run(list(reversed(_clean(parts))), allowed, directory=directory)
    finally:
        walk.close()


def _clean(parts: Sequence[str]) -> list[str]:
    return [part for part in parts if part not in ("", ".")]


@attrs.define(eq=False)
class _Walk:
    """One walk's state: the directories opened below ``base`` and their names."""

    base_fd: int
    base: Path
    stack: list[int] = attrs.field(factory=list)
    where: list[str] = attrs.field(factory=list)
    links: int = 0

    @property
    def at(self) -> int:
        return self.stack[-1] if self.stack else self.base_fd

    def run(self, todo: list[str], allowed: tuple[tuple[str, ...], ...], *, directory: bool) -> int:
        while todo:
            part = todo.pop()
            if part == "..":
                self._up(part)
                continue
            info = os.stat(part, dir_fd=self.at, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                todo.extend(reversed(self._follow(part)))
                continue
            if not todo and not directory:
                fd = os.open(part, _FILE_FLAGS, dir_fd=self.at)
                self.where.append(part)
                return self._inside(fd, allowed)
            self.stack.append(os.open(part, _DIR_FLAGS, dir_fd=self.at))
            self.where.append(part)
        if not directory:
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(self.base))
        fd = self.stack.pop() if self.stack else os.dup(self.base_fd)
        return self._inside(fd, allowed)

    def _up(self, step: str) -> None:
        if not self.where:
            raise OutsideRoot(f"resolves to {self.base}/{step}, outside the model root")
        os.close(self.stack.pop())
        self.where.pop()

    def _follow(self, name: str) -> list[str]:
        """The components a link stands for, from where the walk now is."""
        self.links += 1
        if self.links > MAX_LINKS:
            raise OSError(errno.ELOOP, "too many levels of symbolic links", name)
        target = os.readlink(name, dir_fd=self.at)
        path = PurePosixPath(target)
        if not path.is_absolute():
            return _clean(path.parts)
        if not path.is_relative_to(self.base):
            link = self.base.joinpath(*self.where, name)
            raise OutsideRoot(f"resolves to {target} (link {link}), outside the model root")
        self.close()
        self.stack, self.where = [], []
        return _clean(path.relative_to(self.base).parts)

    def _inside(self, fd: int, allowed: tuple[tuple[str, ...], ...]) -> int:
        if any(tuple(self.where[: len(prefix)]) == prefix for prefix in allowed):
            return fd
        os.close(fd)
        reached = self.base.joinpath(*self.where)
        raise OutsideRoot(f"resolves to {reached}, outside the model root")

    def close(self) -> None:
        for fd in self.stack:
            os.close(fd)
        self.stack = []


def open_and_check(
    manifest: ModelManifest,
    stamps: dict[str, FileStamp],
    *,
    full: bool,
    hasher: FileHasher,
    on_progress: ProgressFn | None = None,
) -> PinnedModel | CheckFailure:
    """Open every pinned file of ``manifest`` beneath its root and check it from its
    descriptor; see the module docstring.

    Args:
        manifest: what to check against.
        stamps: the stamp of each file (by relative path) at its last passing hash; updated
            in place: a passing file's stamp is recorded, a failing file's dropped.
        full: re-hash every file; else a file whose stamp equals its recorded one is not
            re-hashed (the cheap check).
        hasher: hashes a descriptor.
        on_progress: passed to the hasher.

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
    try:
        pinned.root_fd = tree.open_root()
        for label, file in pinned_files(manifest):
            known = None if full else stamps.get(file.path)
            result = check_file(
                tree, label, file, known=known, hasher=hasher, on_progress=on_progress
            )
            if isinstance(result, CheckFailure):
                stamps.pop(file.path, None)
                pinned.close()
                return result
            pinned.fds[file.path], stamps[file.path] = result
            pinned.stamps[file.path] = result[1]
    except OSError:
        pinned.close()
        return CheckFailure(f"root {manifest.root} is missing", sticky=False)
    except BaseException:
        pinned.close()
        raise
    finally:
        tree.close()
    return pinned


def pinned_files(manifest: ModelManifest) -> Iterator[tuple[str, ModelFile]]:
    """Each pinned file with its label: ``"shard x.gguf"``, ``"tokenizer file y.json"``."""
    yield from ((f"shard {f.path}", f) for f in manifest.shards)
    yield from ((f"tokenizer file {f.path}", f) for f in manifest.tokenizer)


def check_file(
    tree: ModelTree,
    label: str,
    file: ModelFile,
    *,
    known: FileStamp | None,
    hasher: FileHasher,
    on_progress: ProgressFn | None = None,
) -> tuple[int, FileStamp] | CheckFailure:
    """Open one pinned file beneath ``tree`` and check it from the descriptor.

    Returns:
        ``(descriptor, stamp)`` when it passed (the caller owns the descriptor), else a
        `CheckFailure`: missing (not sticky), outside the root, not a regular file, resized
        or a BLAKE3 mismatch (sticky: tampering), unreadable or changed while hashed.
    """
    try:
        fd = tree.open(PurePosixPath(file.path))
    except OutsideRoot as outside:
        return CheckFailure(f"{label}: {outside}", sticky=True, file=file.path)
    except OSError:
        reason = f"{label}: missing under {tree.real_root}"
        return CheckFailure(reason, sticky=False, file=file.path)
    try:
        path = tree.real_root / file.path
        result = _check_open(fd, label, file, known, hasher, path, on_progress)
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
) -> FileStamp | CheckFailure:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        return CheckFailure(f"{label}: is not a regular file", sticky=True, file=file.path)
    if info.st_size != file.size:
        reason = f"{label}: size is {info.st_size} bytes, the registry pins {file.size} (resized)"
        return CheckFailure(reason, sticky=True, file=file.path)
    stamp = FileStamp.of(info)
    if known == stamp:
        return stamp
    try:
        digest = hasher.hash_fd(fd, path=path, on_progress=on_progress)
    except OSError as error:
        return CheckFailure(f"{label}: unreadable: {error.strerror}", sticky=False, file=file.path)
    if digest != file.blake3:
        reason = f"{label}: BLAKE3 differs from the registry (tampered or replaced)"
        return CheckFailure(reason, sticky=True, file=file.path)
    if FileStamp.of(os.fstat(fd)) != stamp:
        reason = f"{label}: changed while it was hashed; check again once it is complete"
        return CheckFailure(reason, sticky=False, file=file.path)
    return stamp
