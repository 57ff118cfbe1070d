"""Extract members of a tar archive without letting one write outside the destination.

Python 3.12 and 3.11.4+ have ``tarfile.data_filter`` (PEP 706): `extract_data` uses it when
present. Debian stable ships Python 3.11.2, which has no ``filter`` argument and extracts
whatever an archive says (absolute paths, ``..``, links out, device files); there
`extract_data` checks every member itself, before anything is written, and refuses the
archive with `BackendError` naming the first bad member:

- a name that is absolute or holds a ``..`` part;
- a symbolic or hard link whose target is absolute or resolves outside the destination;
- a device, FIFO or any type other than a regular file, directory or link;
- a name whose parent, or a link whose target, as they are on disk at the time of writing,
  resolves outside the destination (through a link extracted earlier from the archive).

Regular files and directories get the permissions ``data_filter`` would give: no set-id or
sticky bits, no write for group and others; owners are not restored.
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from .._errors import BackendError


def extract_data(tar: tarfile.TarFile, dest: Path, members: Sequence[tarfile.TarInfo]) -> None:
    """Extract ``members`` of ``tar`` under ``dest`` (made if missing), refusing any that
    would write outside it.

    Raises `BackendError` naming the member when one is refused; with the fallback, nothing
    is written when a member's name, link or type is bad.
    """
    dest.mkdir(parents=True, exist_ok=True)
    if hasattr(tarfile, "data_filter"):
        try:
            tar.extractall(dest, members=members, filter="data")
        except tarfile.FilterError as err:
            raise BackendError(f"refused to extract {err.tarinfo.name!r}: {err}") from err
        return
    root = dest.resolve()
    for member in members:
        _check(member, root)
    for member in members:
        _check_parent(member, root)
        _set_data_mode(member)
        tar.extract(member, root, set_attrs=not (member.issym() or member.islnk()))


def _check(member: tarfile.TarInfo, root: Path) -> None:
    name = PurePosixPath(member.name)
    if name.is_absolute() or ".." in name.parts:
        _refuse(member, "its name is absolute or goes up with '..'")
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        _refuse(member, "it is a device, FIFO or other special file")
    if member.issym() or member.islnk():
        link = PurePosixPath(member.linkname)
        if link.is_absolute():
            _refuse(member, f"it links to the absolute path {member.linkname!r}")
        base = name.parent if member.issym() else PurePosixPath()
        if not _inside(root, root.joinpath(base, link)):
            _refuse(member, f"its link {member.linkname!r} points outside {root}")


def _check_parent(member: tarfile.TarInfo, root: Path) -> None:
    parent = root.joinpath(member.name).parent.resolve()
    if not _inside(root, parent):
        _refuse(member, f"its folder resolves outside {root} (through a link)")
    if member.issym() and not _inside(root, parent.joinpath(member.linkname).resolve()):
        _refuse(member, f"its link {member.linkname!r} resolves outside {root} (through a link)")


def _inside(root: Path, path: Path) -> bool:
    resolved = Path(os.path.normpath(path))
    return resolved == root or root in resolved.parents


def _set_data_mode(member: tarfile.TarInfo) -> None:
    member.uid, member.gid = os.getuid(), os.getgid()
    member.uname = member.gname = ""
    if member.isreg():
        executable = member.mode & 0o100
        member.mode = 0o755 if executable else 0o644
    elif member.isdir():
        member.mode = 0o755


def _refuse(member: tarfile.TarInfo, why: str) -> None:
    raise BackendError(f"refused to extract {member.name!r} from the archive: {why}")
