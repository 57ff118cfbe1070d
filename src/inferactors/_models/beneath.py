"""Open a path beneath a model root without following links out of it: `open_beneath`, and
`ModelTree`, the root (or Hugging Face repository) held open (``design/pinning.md``).

Why a walk with ``O_NOFOLLOW`` and not ``openat2(RESOLVE_BENEATH)``: the walk is plain
POSIX (``openat``, ``fstatat``, ``readlinkat`` through `os` with ``dir_fd``), so it needs
no raw system-call numbers through ctypes and runs where ``openat2`` is missing or filtered
(kernels before 5.6, container seccomp profiles, macOS, where mlx_lm.server lives). It also
states the rule exactly: a link is followed only while it stays under the model root (or,
for a Hugging Face ``snapshots/<revision>`` root, in that repository's ``blobs/``), an
absolute link counts when it names a place inside, and every step is an ``openat`` on a
directory descriptor we hold, so a component swapped for a link mid-walk fails with
``ELOOP`` instead of being followed. ``RESOLVE_BENEATH`` refuses every absolute link.
Checking the files opened this way is ``pinning.py``.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

import attrs

MAX_LINKS = 40
"""Most symbolic links one walk follows (Linux's own limit), then ``ELOOP``."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO never blocks


class OutsideRoot(Exception):
    """A walk left the model root; the message says through which link or step."""


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
