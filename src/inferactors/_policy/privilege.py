"""Who a managed server runs as, and the refusal to run one as root (pure; no I/O).

A managed server never runs as root (uid or gid 0), and only a supervisor running as root
can run one as another user (`switch_refusal`). Resolving a user name through the user
database is the containment edge's job (`inferactors._edges.containment.resolve_run_as`).
"""

from __future__ import annotations

import attrs

from .._errors import AdmissionRefused, InvalidConfig

_NOT_ROOT = "run_as must name a non-root user"


@attrs.frozen
class RunAs:
    """The unprivileged account a managed server runs as.

    Attributes:
        uid: The user id (never 0).
        gid: The primary group id (never 0).
        name: The user name, or the uid as text when the user database has no entry.
        groups: Supplementary group ids set in the child (``setgroups``); empty for an
            explicit ``uid:gid``.
    """

    uid: int
    gid: int
    name: str
    groups: tuple[int, ...] = ()

    @property
    def group_ids(self) -> frozenset[int]:
        """Every group the user acts with: the primary one and the supplementary ones."""
        return frozenset((self.gid, *self.groups))


def refuse_root(run_as: RunAs) -> RunAs:
    """``run_as`` itself, unless it is root's user or group.

    Raises:
        InvalidConfig: uid 0, or gid 0 (root's group).
    """
    if run_as.uid == 0:
        raise InvalidConfig(_NOT_ROOT)
    if run_as.gid == 0:
        raise InvalidConfig(f"{_NOT_ROOT} and group (gid 0 is root's group)")
    return run_as


def require_unprivileged(run_as: RunAs | None, euid: int) -> None:
    """Refuse to run a managed server as root.

    Args:
        run_as: The configured account, if any.
        euid: The supervisor's effective uid (`os.geteuid`).

    Raises:
        AdmissionRefused: ``euid`` is 0 and no ``run_as`` is configured.
    """
    if euid == 0 and run_as is None:
        raise AdmissionRefused(
            "managed servers run unprivileged: set run_as to a non-root user "
            "when inferactors runs as root"
        )


def switch_refusal(run_as: RunAs, *, euid: int, user: str) -> str | None:
    """Why a supervisor of effective uid ``euid`` cannot run its servers as ``run_as``, or
    None when it can: it is root, or ``run_as`` is its own user. Only root may switch a
    child to another user (setuid(2)), or hand it a directory (chown(2)).

    Args:
        run_as: The configured account.
        euid: The supervisor's effective uid (`os.geteuid`).
        user: The supervisor's user name (the uid as text when the user database has none).

    Returns:
        ``"running servers as another user needs root; this supervisor runs as newbie
        (uid 1000): leave run_as out to run them as newbie"``, or None.
    """
    if euid == 0 or run_as.uid == euid:
        return None
    return (
        f"running servers as another user needs root; this supervisor runs as {user} "
        f"(uid {euid}): leave run_as out to run them as {user}"
    )
