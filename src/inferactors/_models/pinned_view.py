"""A private directory that shows a server a model's pinned files and nothing else
(``design/pinning.md``).

A server that reads a model as a directory (mlx_lm.server globs ``model*.safetensors``;
llama.cpp opens a split model's other files by name) would read any file added to, or
renamed over in, the model's own directory after the check. `build_views` builds, for each
such model, a *view*: ``<instance dir>/pinned/<slot>/<root name>/``, owned by us (mode
0755, so the server's user may read it but never write it), holding for each pinned file,
at the same relative path, a symbolic link to ``<fd_dir>/N``, ``N`` being that file's
verified descriptor, inherited by the server at the same number. ``/proc/self`` resolves in
the process that opens the link, so the server opens the very inode that was hashed.

Everything below the instance directory is made through descriptors: ``pinned`` is
removed and made afresh at every spawn, opened without following a link and refused unless
it is a new, empty directory of ours, and the rest is made beneath that descriptor. The
instance directory belongs to the server's user, who could rename ``pinned`` away; the
server is therefore handed each view as ``/proc/self/fd/V`` (the returned descriptors), so
what it reads is the directory we built, whatever the names say by then.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def build_views(
    instance_dir: Path,
    views: Sequence[tuple[str, str, Mapping[str, int]]],
    *,
    fd_dir: str,
    base: str = "pinned",
) -> tuple[int, ...]:
    """Build one view per ``(slot, root name, {relative path: descriptor})`` (module
    docstring) in a fresh ``instance_dir/base``, at ``base/slot/root name``; the instance
    directory is made (0700) when missing.

    Returns:
        Each view's directory descriptor, in order (close-on-exec; the caller closes them).

    Raises:
        OSError: a directory cannot be made, or ``pinned`` was not the one we made.
    """
    instance_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    parent = os.open(instance_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    opened: list[int] = []
    try:
        base_fd = _fresh_dir(parent, base)
        try:
            for slot, name, files in views:
                slot_fd = _fresh_dir(base_fd, slot)
                try:
                    view = _fresh_dir(slot_fd, name)
                finally:
                    os.close(slot_fd)
                opened.append(view)
                _link_files(view, files, fd_dir)
        finally:
            os.close(base_fd)
    except BaseException:
        for fd in opened:
            os.close(fd)
        raise
    finally:
        os.close(parent)
    return tuple(opened)


def _fresh_dir(parent_fd: int, name: str) -> int:
    """Remove whatever ``name`` is beneath ``parent_fd``, make it a new directory of ours
    (0755) and open it; refused unless what was opened is that new, empty directory."""
    if name in ("", ".", "..") or "/" in name:
        raise OSError(errno.EINVAL, "not one path component", name)
    _remove(parent_fd, name)
    os.mkdir(name, 0o700, dir_fd=parent_fd)
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid() or os.listdir(fd):
            raise OSError(errno.EPERM, "replaced while it was being made", name)
        os.fchmod(fd, 0o755)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _remove(parent_fd: int, name: str) -> None:
    try:
        info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(name, dir_fd=parent_fd)  # descriptor-based: never follows a link
    else:
        os.unlink(name, dir_fd=parent_fd)


def _link_files(view_fd: int, files: Mapping[str, int], fd_dir: str) -> None:
    """One link per file, ``relative path -> fd_dir/N``, subdirectories made as needed."""
    for relative, fd in files.items():
        *dirs, last = PurePosixPath(relative).parts
        at = os.dup(view_fd)
        try:
            for part in dirs:
                if part in (".", ".."):
                    raise OSError(errno.EINVAL, "not a path inside the model", relative)
                try:
                    os.mkdir(part, 0o755, dir_fd=at)
                except FileExistsError:
                    pass
                step = os.open(part, _DIR_FLAGS, dir_fd=at)
                os.close(at)
                at = step
                os.fchmod(at, 0o755)
            os.symlink(f"{fd_dir}/{fd}", last, dir_fd=at)
        finally:
            os.close(at)
