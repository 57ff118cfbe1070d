"""Containment: which user a managed server runs as, and whether that user can reach its files.

Root without ``run_as`` is refused, uid 0 is refused, and the child drops to ``run_as``
before exec; the instance directory, the model files and the server program must be
reachable by that user, and the error says exactly which one is not.

`resolve_run_as` turns the config's ``run_as`` text into ids and `user_name` a uid into a
name (both read the user database); `require_unprivileged` is the refusal to run a server
as root; `check_reachable` walks the permission bits the way the kernel does for that user
(``os.stat`` only; `os.access` would answer for the caller, which is root);
`prepare_instance_dir` hands the instance directory to the user. The child side
(setgroups, setgid, setuid) is in ``spawn.py``.
"""

from __future__ import annotations

import errno
import os
import pwd
import re
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from .._errors import AdmissionRefused, BackendError, InvalidConfig
from .._policy.privilege import RunAs, refuse_root

_IDS = re.compile(r"([0-9]{1,10})(?::([0-9]{1,10}))?")
_MAX_ID = 2**32 - 2  # (uid_t)-1 means "unchanged" to the kernel
SEARCH, WRITE, READ = os.X_OK, os.W_OK, os.R_OK
"""Access bits as `os.access` spells them (1, 2, 4), for `access_problem`."""


def resolve_run_as(spec: str) -> RunAs:
    """Resolve a ``run_as`` setting: a user name, ``uid`` or ``uid:gid``.

    A name or a bare uid takes its primary group and its supplementary groups from the user
    database (`os.getgrouplist`); ``uid:gid`` is taken as given, with no supplementary
    groups, and need not exist in the database.

    Raises:
        InvalidConfig: ``"run_as must name a non-root user"`` for uid 0 (or gid 0, root's
            group); an unknown user name; a bare uid with no user entry
            (give ``uid:gid``); an id out of range.
    """
    ids = _IDS.fullmatch(spec)
    if ids is None:
        return _from_entry(_user_named(spec))
    uid = _checked_id(spec, ids.group(1))
    if ids.group(2) is not None:
        return _explicit(uid, _checked_id(spec, ids.group(2)))
    try:
        return _from_entry(pwd.getpwuid(uid))
    except KeyError:
        raise InvalidConfig(f"run_as {spec}: no user has uid {uid}; give uid:gid") from None


def _user_named(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise InvalidConfig(f"run_as {name!r}: no such user on this host") from None


def _checked_id(spec: str, digits: str) -> int:
    value = int(digits)
    if value > _MAX_ID:
        raise InvalidConfig(f"run_as {spec}: id {value} is out of range")
    return value


def _explicit(uid: int, gid: int) -> RunAs:
    return refuse_root(RunAs(uid, gid, user_name(uid)))


def user_name(uid: int) -> str:
    """The user database's name of ``uid``, or the uid as text when it has none."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _from_entry(entry: pwd.struct_passwd) -> RunAs:
    groups = tuple(sorted(set(os.getgrouplist(entry.pw_name, entry.pw_gid))))
    return refuse_root(RunAs(entry.pw_uid, entry.pw_gid, entry.pw_name, groups))


def check_reachable(
    run_as: RunAs, *, directory: Path, files: Sequence[Path], program: Path
) -> None:
    """Check that ``run_as`` can use everything a managed server needs.

    For that user's uid, gid and supplementary groups, every directory on each path must be
    searchable; the ``files`` (model shards) readable; the ``program`` an executable regular
    file; and ``directory`` (the instance directory, after `prepare_instance_dir`) writable.
    Symbolic links are followed: the directories of the link and of its target both count.
    POSIX ACLs and capabilities are not evaluated, only mode bits and ownership.

    Raises:
        AdmissionRefused: naming every path that is not reachable and why, e.g. ``"the model
            file /root/x.gguf is not reachable by user nobody: /root is not searchable (mode
            0700, owner root)"``; several problems are joined with ``"; "``.
    """
    wanted = [
        ("the instance directory", directory, WRITE | SEARCH, True),
        ("the server program", program, SEARCH, False),
        *(("the model file", path, READ, False) for path in files),
    ]
    problems = []
    for label, path, want, is_directory in wanted:
        problem = access_problem(run_as, path, want, directory=is_directory)
        if problem is not None:
            problems.append(f"{label} {path} is not reachable by user {run_as.name}: {problem}")
    if problems:
        raise AdmissionRefused("; ".join(problems))


def access_problem(run_as: RunAs, path: Path, want: int, *, directory: bool = False) -> str | None:
    """Why ``run_as`` cannot access ``path`` with ``want`` (`READ` | `WRITE` | `SEARCH`).

    Args:
        run_as: The user.
        path: A regular file, or a directory when ``directory`` is True.
        want: The access needed; `SEARCH` means executable for a file.
        directory: Whether ``path`` must be a directory (else a regular file).

    Returns:
        None when the access is allowed, else one phrase: ``"/root is not searchable (mode
        0700, owner root)"``, ``"/x/y does not exist"``, ``"/x/y is not a regular file"``.
        Only the missing rights are named (``"is not writable"``, not ``"readable"`` too).
    """
    absolute = Path(os.path.abspath(path))
    for parent in _ancestors(absolute):
        problem = _one_problem(run_as, parent, SEARCH, directory=True)
        if problem is not None:
            return problem
    return _one_problem(run_as, absolute, want, directory=directory)


def _ancestors(path: Path) -> Iterator[Path]:
    """Every directory the kernel searches to reach ``path``, lexically and after links."""
    seen: set[Path] = set()
    for chain in (path, Path(os.path.realpath(path))):
        for parent in reversed(chain.parents):
            if parent not in seen:
                seen.add(parent)
                yield parent


def _one_problem(run_as: RunAs, path: Path, want: int, *, directory: bool) -> str | None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return f"{path} does not exist"
    except OSError as error:
        return f"{path} cannot be examined ({error.strerror})"
    if directory and not stat.S_ISDIR(info.st_mode):
        return f"{path} is not a directory"
    if not directory and not stat.S_ISREG(info.st_mode):
        return f"{path} is not a regular file"
    missing = want & ~granted(run_as, info)
    if not missing:
        return None
    return f"{path} is not {_describe(missing, directory)} ({_mode_and_owner(info)})"


def granted(run_as: RunAs, info: os.stat_result) -> int:
    """The rights (`READ` | `WRITE` | `SEARCH`) the kernel grants a non-root user.

    Exactly one class of bits applies: the owner bits if the user owns the file, else the
    group bits if the file's group is one of the user's groups, else the other bits (so an
    owner with fewer rights than "other" is refused, as the kernel does).
    """
    mode = stat.S_IMODE(info.st_mode)
    if info.st_uid == run_as.uid:
        return (mode >> 6) & 0o7
    if info.st_gid in run_as.group_ids:
        return (mode >> 3) & 0o7
    return mode & 0o7


def _describe(missing: int, directory: bool) -> str:
    words = []
    if missing & READ:
        words.append("readable")
    if missing & WRITE:
        words.append("writable")
    if missing & SEARCH:
        words.append("searchable" if directory else "executable")
    return " or ".join(words)


def _mode_and_owner(info: os.stat_result) -> str:
    try:
        owner = pwd.getpwuid(info.st_uid).pw_name
    except KeyError:
        owner = str(info.st_uid)
    return f"mode {stat.S_IMODE(info.st_mode):04o}, owner {owner}"


def prepare_instance_dir(path: Path, run_as: RunAs | None) -> None:
    """Create the instance directory if needed and, with ``run_as``, hand it to that user.

    With ``run_as`` the directory becomes owned by ``run_as.uid:run_as.gid`` with mode 0700
    (the server's private workspace; root still writes the ``server.json`` record there, see
    ``orphan_record.py``). Only the directory itself changes hands, not what it already holds.
    Call it before `check_reachable` and before the spawn.

    Raises:
        BackendError: the directory cannot be created or changed, or ``path`` is a symbolic
            link or not a directory (a link would hand its target to the user).
    """
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        if run_as is not None:
            _hand_over(path, run_as)
    except OSError as error:
        raise BackendError(f"cannot prepare the instance directory {path}: {error}") from error


def _hand_over(path: Path, run_as: RunAs) -> None:
    """chown and chmod through a descriptor opened without following a link (no race)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR) and path.is_symlink():
            raise BackendError(
                f"the instance directory {path} is a symbolic link; not handing its target "
                f"to user {run_as.name}"
            ) from error
        raise
    try:
        os.fchown(fd, run_as.uid, run_as.gid)
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
