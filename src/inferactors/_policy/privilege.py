"""Who a managed server runs as, and the refusal to run one as root (pure; no I/O).

A managed server never runs as root (uid or gid 0). Resolving a user name through the user
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
